"""The agent: one turn's model ⇄ tools loop (loop) and its tools (tools/: the registry and schema, and a
thin tool over each piece of knowledge). Imports llm, store and knowledge.
"""
