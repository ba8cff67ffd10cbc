"""The tools the model can call: the registry that checks arguments and turns errors into tool results
(registry, schema), each tool (memory, search, skills) and the catalog that fixes their order (catalog).
Imports knowledge, store and the vocabulary; never the agent loop.
"""
