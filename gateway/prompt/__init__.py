"""The system prompt: the pure three-tier builder (builder), platform hints from platform_hints.yaml (hints),
the inputs read from the home (inputs), and the stored session prompt reused byte for byte (session_prompt).
Imports knowledge, agent, llm and store.
"""
