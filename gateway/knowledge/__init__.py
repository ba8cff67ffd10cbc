"""What the agent knows, read by both the prompt builder and the tools: MEMORY.md / USER.md (memory), the
skills library (skills), full-text search over past conversations (search), and safe file writes (files).
Imports the vocabulary and store; never agent/ or prompt/.
"""
