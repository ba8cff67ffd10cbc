"""A turn may wait for a person: which tool calls wait (policy), the requests with their buttons and
texts (request), the stored requests (book), waiting and going on exactly once, across restarts
(waits) from the turn as it stood (checkpoint), the answers that come in through the gate
(answers), the request's message once answered (closing), what the session manager calls
(turns), and buttons that stand for a command: /model's list (menus). Imports delivery,
prompt, agent, store and below.
"""
