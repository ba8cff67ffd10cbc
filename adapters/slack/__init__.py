"""Slack through slack-bolt (async): the adapter (Socket Mode or signed HTTP events), the fast acknowledgement
and event dedupe (ack), bounded Web API lookups (lookup) and mrkdwn text (text). Imports only the vocabulary
and its own modules.
"""
