"""Slack through slack-bolt (async): the adapter (lifecycle, events and the slash command →
`Inbound`), the signed HTTP Events API server or the Socket Mode websocket and its liveness ping
(connection), the store-before-ack plumbing (ack), bounded Web API lookups (lookup), sending and the
thinking reaction (outbound), Block Kit buttons and their block_actions (buttons),
live previews of an answer being written (preview: Slack's own streaming, else a message updated),
mrkdwn text (text), files fetched with the bot token from Slack's own host (files) and voice replies
uploaded as audio files (voice). Imports only the vocabulary and its own modules.
"""
