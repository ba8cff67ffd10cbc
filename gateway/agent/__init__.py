"""The agent: one turn's model ⇄ tools loop (loop), where it stops for a person and goes on (holds),
and its tools (tools/: the registry and schema, a thin tool over each piece of knowledge, the web
tools and the MCP servers' tools). Imports llm, store, knowledge, mcp and net.
"""
