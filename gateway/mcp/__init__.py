"""MCP servers the agent's tools reach, on the official `mcp` SDK: tool names as the model sees them
(names), a tool result as text (content), a tool's description and schema scanned before the model
reads them (vet), one live connection (link: the only module that imports `mcp`, and only the hub
imports it, when `mcp_servers` is configured) and every server kept running with restarts (hub).
Imports the vocabulary, config and scan.
"""
