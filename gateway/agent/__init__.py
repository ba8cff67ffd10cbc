"""The agent: one turn's model ⇄ tools loop (loop) and its tools (tools/: the registry and schema, a thin tool
over each piece of knowledge, the web tools and the MCP servers' tools). Imports llm, store, knowledge, mcp and net.
"""
