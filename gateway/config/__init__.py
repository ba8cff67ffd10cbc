"""config.yaml → nested frozen dataclasses, validated once, errors located by file, line and key.

Holds the YAML loader (yamlload: strict types, `${VAR}` references, `Secret`), the settings tree
(settings), its `media:` section (media), its `schedule:` section (schedule), its `voice:` section
(voice), the MCP servers and web tools (tools), the shell tool (shell), the platforms' sections
with their bot accounts (platforms; accounts fills an account in from its section), the agents and
bindings resolved per message and per agent (agents), and the commented file `gateway init` writes
(starter). Imports only the vocabulary (events, errors); the only package that reads the
environment.
"""
