"""Who gets an agent turn: the gate (allowlists, bot loops, pairing prompts, one approval per
person; gate), pairing codes (pairing), who is an admin and what a caller may write to memory
(roles), and the in-chat /link of two identities (linking). Deny by default. Imports delivery, store
and below; never sessions/ (its peer).
"""
