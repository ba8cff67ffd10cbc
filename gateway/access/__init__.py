"""Who gets an agent turn: the gate (allowlists, bot loops, pairing prompts; gate) and pairing codes
(pairing). Deny by default. Imports delivery, store and below; never sessions/ (its peer).
"""
