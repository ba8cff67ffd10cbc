"""How an MCP tool is named for the model:
`mcp_<server>_<tool>`, within what both model APIs accept.

Anthropic and OpenAI take tool names of 1-64 characters from [A-Za-z0-9_-]; anything else in a
server's tool name becomes `_`, and a name that would be too long keeps a short digest of the
original so two long names stay apart.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 64
PREFIX = "mcp_"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def exposed_name(server: str, tool: str) -> str:
    name = f"{PREFIX}{server}_{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def server_prefix(server: str) -> str:
    return f"{PREFIX}{server}_"


def is_mcp_name(name: str) -> bool:
    return name.startswith(PREFIX)
