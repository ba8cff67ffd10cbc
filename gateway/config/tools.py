"""The tool settings: MCP servers (`mcp_servers`) and the built-in web tools and shell (`tools`).

Kept out of settings.py so the settings tree stays one screen per section; `Config` holds one field
for each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gateway.config.shell import ShellConfig
from gateway.config.yamlload import Secret

SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One MCP server: a command run over stdio (`command`, `args`, `env`, `cwd`) or a streamable
    HTTP `url`."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, Secret] = field(default_factory=dict)
    cwd: Path | None = None
    url: str | None = None
    headers: dict[str, Secret] = field(default_factory=dict)
    enabled: bool = True
    timeout_s: float = field(default=60.0, metadata={"positive": True})
    connect_timeout_s: float = field(default=30.0, metadata={"positive": True})
    # Which of its tools wait for a person's yes: `auto` those the server marks destructiveHint
    # (never those it marks readOnlyHint), `always` every one, `never` none (tools.approval.require
    # still names some).
    approval: Literal["auto", "always", "never"] = "auto"

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give either `command` (a server run over "
                "stdio) or `url` (streamable HTTP), not both"
            )
        if self.url is not None:
            if self.args or self.env or self.cwd is not None:
                raise ValueError(
                    "`args`, `env` and `cwd` are for a `command` "
                    "server; a `url` server takes `headers`"
                )
            if not re.match(r"https?://[^/\s]+", self.url):
                raise ValueError(f"`url` must be an http:// or https:// URL; got {self.url!r}")
        elif self.headers:
            raise ValueError("`headers` are for a `url` server; a `command` server takes `env`")

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


@dataclass(frozen=True, slots=True)
class WebFetchConfig:
    allow_private: bool = False
    max_bytes: int = field(default=2_000_000, metadata={"positive": True})
    max_chars: int = field(default=20_000, metadata={"positive": True})
    timeout_s: float = field(default=20.0, metadata={"positive": True})
    max_redirects: int = field(default=5, metadata={"min": 0, "max": 20})
    read_cpu_s: float = field(default=15.0, metadata={"positive": True})


@dataclass(frozen=True, slots=True)
class WebSearchConfig:
    provider: Literal["searxng", "brave", "tavily"]
    base_url: str | None = None
    api_key_env: str | None = None
    max_results: int = field(default=5, metadata={"min": 1, "max": 20})
    timeout_s: float = field(default=15.0, metadata={"positive": True})

    def __post_init__(self) -> None:
        if self.provider == "searxng" and not self.base_url:
            raise ValueError(
                "tools.web_search.base_url is required for searxng (your instance, e.g. "
                "http://127.0.0.1:8888)"
            )
        if self.provider in ("brave", "tavily") and not self.api_key_env:
            raise ValueError(
                f"tools.web_search.api_key_env is required for {self.provider} (the variable that "
                "holds the key)"
            )


@dataclass(frozen=True, slots=True)
class ApprovalConfig:
    """Calls that wait for a person's yes (docs/tools.md): `require` names tools (globs, on the real
    name) on top of what MCP servers mark destructive; a request nobody answers in `timeout_minutes`
    expires, unrun."""

    require: tuple[str, ...] = ()
    timeout_minutes: float = field(default=10.0, metadata={"min": 1})


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    web_fetch: WebFetchConfig = field(default_factory=WebFetchConfig)
    web_search: WebSearchConfig | None = None
    approval: ApprovalConfig = field(default_factory=ApprovalConfig)
    # MCP tools behind tool_search / tool_call (docs/tools.md): `auto` once their schemas would take
    # more than search_threshold of the model's context window.
    search: Literal["auto", "on", "off"] = "auto"
    search_threshold: float = field(default=0.1, metadata={"min": 0.0, "max": 1.0})
    # the agent's sandboxed shell (shell.py)
    shell: ShellConfig = field(default_factory=ShellConfig)
