"""gateway tools list: every tool, where it comes from (built-in or which MCP server) and on which
platforms a new session gets it, and the MCP tools withheld because their description looks like a
prompt injection. MCP servers are started once to list their tools, then stopped. Tools a new
session would get behind tool search (tools.search) are marked "deferred"."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.cli.context import EXIT_ERROR, EXIT_OK, config_of, environ, setup_logging

if TYPE_CHECKING:
    from gateway.ops.wiring import Gateway

DEFERRED = "; deferred (tool search)"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tools = sub.add_parser("tools", help="the agent's tools")
    tools_sub = tools.add_subparsers(dest="tools_command", required=True)
    listing = tools_sub.add_parser(
        "list", help="every tool, where it comes from and the platforms it is on for"
    )
    listing.add_argument(
        "--no-mcp", action="store_true", help="do not start the MCP servers to list their tools"
    )
    listing.set_defaults(func=cmd_tools_list)


def cmd_tools_list(args: argparse.Namespace) -> int:
    import asyncio

    from gateway.ops.wiring import build_gateway

    config = config_of(args)
    setup_logging(args, config, environ(), level="ERROR")
    gateway = build_gateway(config, env=environ(), probe_ollama=False)

    async def main() -> tuple[list[str], bool]:
        try:
            if gateway.mcp is not None and not args.no_mcp:
                await gateway.mcp.start()
            down = gateway.mcp is not None and bool(gateway.mcp.not_up())
            return _rows(gateway), down
        finally:
            await gateway.close_tools()
            await gateway.llm.close()
            gateway.store.close()

    lines, down = asyncio.run(main())
    sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_ERROR if down else EXIT_OK


def _rows(gateway: Gateway) -> list[str]:
    from gateway.agent.tools.policy import TOOL_ORDER
    from gateway.events import PLATFORMS

    catalog = gateway.catalog
    assert catalog is not None
    registry = catalog.registry
    provided = registry.provider.specs() if registry.provider is not None else []
    names = [*registry.names(), *sorted(s.name for s in provided)]
    deferred = _deferred(gateway)
    rows = [
        (
            name,
            catalog.origin(name),
            _platforms([p for p in PLATFORMS if catalog.enabled(name, p)])
            + (DEFERRED if name in deferred else ""),
        )
        for name in names
    ]
    if "web_search" not in names:
        rows.insert(
            TOOL_ORDER.index("web_search"),
            ("web_search", "built-in", "off: tools.web_search is not set"),
        )
    if gateway.mcp is not None:
        rows += sorted(
            (name, f"mcp:{state.name}", f"withheld: {why}")
            for state in gateway.mcp.states.values()
            for name, why in state.withheld.items()
        )
    lines = _table(("TOOL", "FROM", "ON PLATFORMS"), rows)
    if gateway.mcp is not None:
        lines.append("")
        if deferred:
            search = gateway.config.tools.search
            lines.append(
                f"{len(deferred)} tools deferred: new sessions find them with tool_search "
                f"and call them with tool_call (tools.search: {search})"
            )
        for state in gateway.mcp.states.values():
            error = f": {state.error}" if state.error else ""
            withheld = f", {len(state.withheld)} withheld (see above)" if state.withheld else ""
            lines.append(
                f"mcp server {state.name} ({state.transport}): {state.state}{error}, "
                f"{len(state.tools)} tools{withheld}"
            )
    return lines


def _deferred(gateway: Gateway) -> set[str]:
    """The tools a new session on some platform would get behind tool search (model's window)."""
    from gateway.events import PLATFORMS

    catalog = gateway.catalog
    assert catalog is not None
    window = gateway.llm.context_window
    return {s.name for p in PLATFORMS for s in catalog.split(catalog.current(p), window)[1]}


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Columns as wide as their widest cell plus two spaces (the last one is not padded)."""
    widths = [max(len(row[i]) for row in (header, *rows)) + 2 for i in range(len(header) - 1)]
    return [
        "".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + row[-1]
        for row in (header, *rows)
    ]


def _platforms(found: list[str]) -> str:
    from gateway.events import PLATFORMS

    if len(found) == len(PLATFORMS):
        return "all"
    return ", ".join(found) if found else "none (agent.tools leaves it out)"
