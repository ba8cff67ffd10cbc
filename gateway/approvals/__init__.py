"""A turn may wait for a person: which tool calls wait (policy), the requests with their buttons and
texts (request), the stored requests (book), waiting and going on exactly once, across restarts
(waits) from the turn as it stood (checkpoint), the answers that come in through the gate
(answers), the request's message once answered (closing) and what the session manager calls
(turns). Imports delivery, prompt, agent, store and below.
"""
