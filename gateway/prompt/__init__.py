"""The system prompt: the pure three-tier builder (builder), platform hints from platform_hints.yaml
(hints), the inputs read from the home (inputs), and the stored session prompt and tool list, reused
byte for byte (session_prompt, session_tools).
Imports knowledge, agent, llm and store.
"""
