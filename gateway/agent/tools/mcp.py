"""MCP tools as the registry sees them: the hub's current tools as specs, and calls whose results are untrusted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.agent.tools.registry import ToolContext, ToolResult, ToolSpec
from gateway.errors import ToolError
from gateway.mcp.hub import McpHub
from gateway.mcp.names import is_mcp_name
from gateway.scan import mark_untrusted

MAX_DESCRIPTION = 4000


class McpTools:
    """A ToolProvider over the hub: names `mcp_<server>_<tool>`, JSON schemas as the servers gave them."""

    def __init__(self, hub: McpHub) -> None:
        self.hub = hub

    def specs(self) -> list[ToolSpec]:
        return [ToolSpec(t.exposed, _description(t.description, t.server), _object_schema(t.schema))
                for t in self.hub.tools()]

    def origin(self, name: str) -> str | None:
        tool = self.hub.tool(name)
        return f"mcp:{tool.server}" if tool is not None else None

    def claims(self, name: str) -> bool:
        return is_mcp_name(name)

    async def call(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            text, is_error = await self.hub.call(name, arguments)
        except ToolError as exc:
            return ToolResult(str(exc), is_error=True)
        return ToolResult(mark_untrusted(text, source=f"the MCP tool {name}"), is_error=is_error)


def _description(text: str, server: str) -> str:
    text = " ".join(text.split()) or f"A tool of the {server} MCP server."
    return text if len(text) <= MAX_DESCRIPTION else text[:MAX_DESCRIPTION - 1] + "…"


def _object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Both model APIs want an object schema with properties; a server may leave either out."""
    out = dict(schema) if isinstance(schema, Mapping) else {}
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    return out
