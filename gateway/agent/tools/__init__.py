"""The tools the model can call: the registry that checks arguments and turns errors into tool
results (registry, schema), each tool (memory, search, skills, schedule, ask; web: web_fetch and
web_search; mcp: the MCP servers' tools), the policy that says which are on per platform and which
are deferred (policy, with the built-in names and their order), tool search over the deferred ones
with its bridge (deferred) and the catalog that builds them (catalog). Imports knowledge, mcp, net,
store and the vocabulary; never the agent loop.
"""
