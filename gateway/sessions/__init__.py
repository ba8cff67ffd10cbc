"""Conversations over time: the session manager (manager) with its per-session lanes (lanes), the
session key (keys), what a turn says besides the answer (turn_text), reset policies (lifecycle) and
their timers (timers), the pre-reset memory flush (flush), compression (compression), the in-chat
commands (commands), the missed-message catch-up and the replay after a restart (catchup), session
reports (report) and what the manager does while the database takes no writes (outage). Imports
approvals, delivery, prompt, agent, llm, store and below; never access/ (its peer).
"""
