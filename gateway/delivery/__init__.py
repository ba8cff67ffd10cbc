"""Getting answers to people exactly once: the outbox (stored chunks sent in order per chat), rate limits
(ratelimit), chunking at the platform's limits (chunking) and markup per platform (markup/).
Imports prompt's platform facts, store, telemetry and the vocabulary.
"""
