"""What the agent knows, read by both the prompt builder and the tools: memory in scopes (memory:
the shared MEMORY.md, one profile per person, notes per chat), people and their linked identities
(people), forgetting a person (forget), the skills library (skills), full-text search over past
conversations (search), and safe file writes (files).
Imports the vocabulary and store; never agent/ or prompt/.
"""
