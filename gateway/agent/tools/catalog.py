"""Which tools exist, in what order, and which a platform's new session gets.

`build_registry` is the only place that decides which built-in tools exist and in what order (TOOL_ORDER);
MCP tools follow, sorted by name. A new session's list (`ToolCatalog.current`) is part of the provider's cached
prompt prefix, so it never depends on dict iteration; the policy (agent.tools, agent.tools_by_platform) picks
from it per platform, and `split` sets its MCP tools apart for tool search (tools.search;
deferred.py). The built-in tools are the core: never deferred.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.agent.tools.deferred import bridge_specs
from gateway.agent.tools.memory import memory_tool
from gateway.agent.tools.policy import ToolPolicy, name_problems
from gateway.agent.tools.registry import ToolFunction, ToolRegistry, ToolSpec
from gateway.agent.tools.schedule import JobBook, schedule_tool
from gateway.agent.tools.search import session_search_tool
from gateway.agent.tools.skills import skill_tools
from gateway.agent.tools.web_fetch import web_fetch_tool
from gateway.agent.tools.web_search import web_search_tool
from gateway.config.settings import Config
from gateway.config.yamlload import locate
from gateway.errors import ConfigError, ConfigErrors
from gateway.knowledge.memory import MemoryStore
from gateway.knowledge.search import SessionSearch
from gateway.knowledge.skills import SkillLibrary
from gateway.net.fetch import WebClient
from gateway.net.pages import PageCache
from gateway.net.search import WebSearch

Specs = tuple[ToolSpec, ...]
TOOL_ORDER = ("memory", "session_search", "skill_view", "skill_manage", "web_fetch", "web_search", "schedule")
# What the pre-reset flush may run: it saves what the session learned, it must not search or reply.
MEMORY_TOOLS = frozenset({"memory", "skill_view", "skill_manage"})


@dataclass(frozen=True, slots=True)
class WebTools:
    """The web tools' clients (gateway/net/); `search` is None until tools.web_search is configured."""

    client: WebClient
    max_chars: int = 20_000
    search: WebSearch | None = None
    search_results: int = 5
    pages: PageCache | None = None  # pages web_fetch read a moment ago (gateway/net/pages.py)


def build_registry(home: Path, *, memory_char_limit: int = 2200, user_char_limit: int = 1375,
                   enabled: Collection[str] | None = None, memory: MemoryStore | None = None,
                   skills: SkillLibrary | None = None, search: SessionSearch | None = None,
                   web: WebTools | None = None, jobs: JobBook | None = None) -> ToolRegistry:
    """All built-in tools (or those in `enabled`) in TOOL_ORDER, over the memories and skills of `home`.

    Pass `memory` / `skills` to share the instances the prompt builder reads (one lock, one index cache),
    `search` to close its connection on shutdown (otherwise it closes when the registry is collected),
    `web` for web_fetch (and web_search when a provider is configured), and `jobs` for schedule (scheduling on).
    """
    memory = memory or MemoryStore(home / "memories", memory_char_limit, user_char_limit)
    skills = skills or SkillLibrary(home)
    search = search or SessionSearch()
    skill_view, skill_manage = skill_tools(skills)
    tools: dict[str, ToolFunction] = {"memory": memory_tool(memory), "session_search": session_search_tool(search),
                                      "skill_view": skill_view, "skill_manage": skill_manage}
    if web is not None:
        tools["web_fetch"] = web_fetch_tool(web.client, max_chars=web.max_chars, pages=web.pages)
        if web.search is not None:
            tools["web_search"] = web_search_tool(web.search, default_count=web.search_results)
    if jobs is not None:
        tools["schedule"] = schedule_tool(jobs)
    if enabled is not None:
        unknown = set(enabled) - set(TOOL_ORDER)
        if unknown:
            raise ValueError(f"unknown tools: {', '.join(sorted(unknown))}; known: {', '.join(TOOL_ORDER)}")
    registry = ToolRegistry()
    for name in TOOL_ORDER:
        if name in tools and (enabled is None or name in enabled):
            registry.register(tools[name], name=name)
    return registry


def check_tool_names(config: Config) -> None:
    """ConfigErrors, each with its file and line, for names in agent.tools / agent.tools_by_platform that name no
    tool: a typo there would silently turn a tool off."""
    path = config.home / "config.yaml"
    errors = [ConfigError(message, file=str(path), line=locate(path, key), key=key)
              for key, message in name_problems(config, TOOL_ORDER)]
    if errors:
        raise ConfigErrors(errors)


class ToolCatalog:
    """The registry's built-in tools plus its provider's (MCP) tools, seen through the policy."""

    def __init__(self, registry: ToolRegistry, policy: ToolPolicy | None = None) -> None:
        self.registry = registry
        self.policy = policy or ToolPolicy()

    def current(self, platform: str) -> tuple[ToolSpec, ...]:
        """What a new session on `platform` gets: built-ins in TOOL_ORDER, then MCP tools sorted by name."""
        provided = self.registry.provider.specs() if self.registry.provider is not None else []
        return tuple(s for s in [*self.registry.specs(), *sorted(provided, key=lambda s: s.name)]
                     if self.policy.enabled(s.name, platform))

    def enabled(self, name: str, platform: str) -> bool:
        return self.policy.enabled(name, platform)

    def split(self, specs: Sequence[ToolSpec], window: int) -> tuple[Specs, Specs]:
        """(sent, deferred): with tool search on for these tools at this context window, the MCP
        tools are deferred and the sent list ends with tool_search and tool_call; otherwise
        everything is sent."""
        core = set(self.registry.names())
        deferrable = tuple(s for s in specs if s.name not in core)
        if not self.policy.defers(deferrable, window):
            return tuple(specs), ()
        return (*(s for s in specs if s.name in core), *bridge_specs(deferrable)), deferrable

    def origin(self, name: str) -> str:
        if name in self.registry.names():
            return "built-in"
        provider = self.registry.provider
        return (provider.origin(name) if provider is not None else None) or "unknown"
