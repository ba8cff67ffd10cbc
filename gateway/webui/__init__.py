"""What the owner sees in a browser besides the chat: the dashboard (panels: the model, adapters'
health, sessions, memory flushes, pairing requests, scheduled jobs; series: messages and the
prompt-cache hit ratio over time, read from SQLite; routes: the page, its data, live updates over
server-sent events, the owner's pairing decisions) and the web chat's stored history after a reload,
failed messages included (chat_history).

Imports scheduling, sessions, access and everything below them; only ops/ builds it (the daemon
attaches its routes, behind the web guard). Static files (static/) ship in the package: no CDN, no
third-party script.
"""
