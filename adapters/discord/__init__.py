"""Discord through discord.py 2: the adapter (gateway websocket, messages → `Inbound`), sending and
"is typing…" (outbound), live previews of an answer being written (preview), the threads
`thread_replies: auto` opens (threads), message text and errors (text), slash commands (commands),
buttons and their clicks (buttons), the catch-up after a reconnect (catchup), attachments streamed
from Discord's CDN (files), voice replies as voice messages (voice) and sharding over several
gateway sessions (shards). Imports only the vocabulary and its own modules.
"""
