"""Discord through discord.py 2: the adapter (gateway websocket, messages → `Inbound`), sending and "is typing…"
(outbound), live previews of an answer being written (preview), the threads `thread_replies: auto` opens
(threads), message text and errors (text), slash commands (commands), the catch-up after a reconnect
(catchup), attachments streamed from Discord's CDN (files) and voice replies as voice messages
(voice). Imports only the vocabulary and its own modules.
"""
