"""Getting answers to people exactly once: the outbox (stored chunks sent in order per chat; a reply
as rows and back: rows), rate limits
(ratelimit), chunking at the platform's limits (chunking) and markup per platform (markup/); and
live previews of an answer being written (stream), with their pacing (pacing), safe partial
rendering (partial) and the durable record of which message shows which part (previews), so the
outbox's answer replaces the preview; an answer's spoken copy, stored and sent after its text
(voice); and the shell's files for the chat, stored and sent the same way (files).
Imports config, prompt's platform facts, store, llm's types, telemetry, voice, the sandbox's files,
the agent's tool context and the vocabulary.
"""
