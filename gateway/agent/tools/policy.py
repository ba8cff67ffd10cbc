"""Which tools are on, per platform: `agent.tools` (an allow list of names and globs,
`mcp_github_*`) and `agent.tools_by_platform` (a platform's own list, replacing agent.tools there).
No list means every tool. And whether a new session's MCP tools are deferred behind tool search
(`tools.search`, `tools.search_threshold`).

Also the built-in tools' names and order (TOOL_ORDER) and the config check for those names: a name
must be a built-in tool, a glob that matches one, or point into a configured MCP server
(`mcp_<server>_…`); anything else is a typo that would silently turn a tool off. Light on purpose:
`gateway config check` runs it without importing the tools' libraries.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Literal

from gateway.config.settings import Config
from gateway.config.shell import home_problems
from gateway.config.tools import SERVER_NAME
from gateway.config.yamlload import locate
from gateway.errors import ConfigError, ConfigErrors
from gateway.mcp.names import server_prefix

if TYPE_CHECKING:  # `gateway config check` reads name_problems without the registry's imports
    from gateway.agent.tools.registry import ToolSpec

_GLOB = "*?["


CHARS_PER_TOKEN = 4  # as the compression estimate (gateway/sessions/compression.py)


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    allow: tuple[str, ...] | None = None
    by_platform: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    search: Literal["auto", "on", "off"] = "auto"
    search_threshold: float = 0.1

    @classmethod
    def of(cls, config: Config) -> ToolPolicy:
        by_platform = {str(k): v for k, v in config.agent.tools_by_platform.items()}
        tools = config.tools
        return cls(config.agent.tools, by_platform, tools.search, tools.search_threshold)

    def defers(self, deferrable: Sequence[ToolSpec], window: int) -> bool:
        """Whether these tools leave a new session's tools array for tool search: always with `on`,
        never with `off`; with `auto` when their schemas would take more than `search_threshold` of
        the context window."""
        if not deferrable or self.search == "off":
            return False
        return self.search == "on" or schema_tokens(deferrable) > self.search_threshold * window

    def enabled(self, name: str, platform: str) -> bool:
        patterns = self.by_platform.get(platform, self.allow)
        return patterns is None or any(fnmatchcase(name, p) for p in patterns)

    def platforms_for(self, name: str, platforms: Sequence[str]) -> list[str]:
        return [p for p in platforms if self.enabled(name, p)]


def schema_tokens(specs: Sequence[ToolSpec]) -> int:
    """About the tokens `specs` take in a request, from their JSON size (no tokenizer needed)."""
    wire = [
        {"name": s.name, "description": s.description, "input_schema": s.parameters} for s in specs
    ]
    size = sum(len(json.dumps(w, ensure_ascii=False, separators=(",", ":"))) for w in wire)
    return size // CHARS_PER_TOKEN


def name_problems(config: Config, builtin: Collection[str]) -> list[tuple[str, str]]:
    """(key path, message) for every tool name in agent.tools
    / agent.tools_by_platform that names nothing."""
    servers = sorted(config.mcp_servers)
    problems = [
        (f"mcp_servers.{n}", _bad_server(n)) for n in servers if not SERVER_NAME.fullmatch(n)
    ]
    problems += [
        (f"mcp_servers.{longer}", _overlap(shorter, longer))
        for shorter in servers
        for longer in servers
        if longer.startswith(server_prefix(shorter)[len("mcp_") :])
    ]
    for key, pattern in _patterns(config):
        if _known(pattern, builtin, servers):
            if pattern == "web_search" and config.tools.web_search is None:
                problems.append(
                    (key, "web_search needs tools.web_search (provider, base_url, api_key_env)")
                )
            continue
        mcp = (
            "; MCP tools are named mcp_<server>_<tool> for the "
            f"servers in mcp_servers ({', '.join(servers)})"
            if servers
            else "; MCP tools need a server in mcp_servers"
        )
        problems.append(
            (key, f"unknown tool {pattern!r} (built-in tools: {', '.join(builtin)}{mcp})")
        )
    return problems


def _patterns(config: Config) -> Iterator[tuple[str, str]]:
    for i, pattern in enumerate(config.agent.tools or ()):
        yield f"agent.tools[{i}]", pattern
    for platform, patterns in config.agent.tools_by_platform.items():
        for i, pattern in enumerate(patterns):
            yield f"agent.tools_by_platform.{platform}[{i}]", pattern


def _known(pattern: str, builtin: Collection[str], servers: Sequence[str]) -> bool:
    if any(fnmatchcase(name, pattern) for name in builtin):
        return True
    literal = pattern
    for i, ch in enumerate(pattern):
        if ch in _GLOB:
            literal = pattern[:i]
            break
    is_glob = literal != pattern
    for server in servers:
        prefix = server_prefix(server)
        if literal.startswith(prefix) and (is_glob or len(literal) > len(prefix)):
            return True
        if is_glob and prefix.startswith(literal):
            return True
    return False


def _overlap(shorter: str, longer: str) -> str:
    """Server `a` with tool `b_x` and server `a_b` with tool `x` would both be mcp_a_b_x (the model
    APIs refuse two tools of one name), and `mcp_a_*` would match the tools of both."""
    return (
        f"the server names {shorter!r} and {longer!r} overlap: tool names are mcp_<server>_<tool>, "
        f"so mcp_{longer}_… could belong to either; rename one (e.g. {longer.replace('_', '-')!r})"
    )


def _bad_server(name: str) -> str:
    return (
        f"{name!r} is not a usable MCP server name (letters, digits, '-' or '_', at most 32, "
        "starting with a letter or digit): it becomes part of tool names"
    )


# ------------------------------------------------------------------ the built-in names
TOOL_ORDER = (
    "memory",
    "session_search",
    "skill_view",
    "skill_manage",
    "web_fetch",
    "web_search",
    "schedule",
    "ask",
    "shell",
)


def check_tool_names(config: Config) -> None:
    """ConfigErrors, each with its file and line, for names in agent.tools / agent.tools_by_platform
    that name no tool (a typo there would silently turn a tool off), and for a shell workspace or
    mount that would show the gateway's home."""
    path = config.home / "config.yaml"
    problems = name_problems(config, TOOL_ORDER) + _agent_problems(config)
    if config.tools.shell.enabled:
        problems += home_problems(config.tools.shell, config.home)
    errors = [
        ConfigError(message, file=str(path), line=locate(path, key), key=key)
        for key, message in problems
    ]
    if errors:
        raise ConfigErrors(errors)


def _agent_problems(config: Config) -> list[tuple[str, str]]:
    """The same for each agent's own `tools` / `tools_by_platform` (agents.<name>.tools[2])."""
    found = []
    for name, spec in config.agents.items():
        if spec.tools is None and spec.tools_by_platform is None:
            continue
        own = replace(
            config,
            agent=replace(
                config.agent, tools=spec.tools, tools_by_platform=spec.tools_by_platform or {}
            ),
        )
        found += [
            (key.replace("agent.", f"agents.{name}.", 1), message)
            for key, message in name_problems(own, TOOL_ORDER)
            if key.startswith("agent.")
        ]
    return found
