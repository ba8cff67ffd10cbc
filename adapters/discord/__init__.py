"""Discord through discord.py 2: the adapter (gateway websocket + REST), message text and errors (text), slash
commands (commands) and the catch-up after a reconnect (catchup). Imports only the vocabulary and its own modules.
"""
