"""The built-in tools' names and order, and the config check of names that name no tool: apart
from the catalog so `gateway config check` reads them without importing every tool's libraries."""

from __future__ import annotations

from dataclasses import replace

from gateway.agent.tools.policy import name_problems
from gateway.config.settings import Config
from gateway.config.shell import home_problems
from gateway.config.yamlload import locate
from gateway.errors import ConfigError, ConfigErrors

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
