"""The agent's tools (memory, session search, skills) behind one registry with a stable order.

`build_registry` is the only place that decides which tools exist and in what order; the order is part of
the provider's cached prompt prefix, so it never depends on config or dict iteration.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from gateway.agent.tools.memory import memory_tool
from gateway.agent.tools.registry import ToolFunction, ToolRegistry
from gateway.agent.tools.search import session_search_tool
from gateway.agent.tools.skills import skill_tools
from gateway.knowledge.memory import MemoryStore
from gateway.knowledge.search import SessionSearch
from gateway.knowledge.skills import SkillLibrary

TOOL_ORDER = ("memory", "session_search", "skill_view", "skill_manage")
# What the pre-reset flush may run: it saves what the session learned, it must not search or reply.
MEMORY_TOOLS = frozenset({"memory", "skill_view", "skill_manage"})


def build_registry(home: Path, *, memory_char_limit: int = 2200, user_char_limit: int = 1375,
                   enabled: Collection[str] | None = None, memory: MemoryStore | None = None,
                   skills: SkillLibrary | None = None, search: SessionSearch | None = None) -> ToolRegistry:
    """All tools (or those in `enabled`) in TOOL_ORDER, over the memories and skills of `home`.

    Pass `memory` / `skills` to share the instances the prompt builder reads (one lock, one index cache),
    and `search` to close its connection on shutdown (otherwise it closes when the registry is collected).
    """
    memory = memory or MemoryStore(home / "memories", memory_char_limit, user_char_limit)
    skills = skills or SkillLibrary(home)
    search = search or SessionSearch()
    skill_view, skill_manage = skill_tools(skills)
    tools: dict[str, ToolFunction] = {"memory": memory_tool(memory), "session_search": session_search_tool(search),
                                      "skill_view": skill_view, "skill_manage": skill_manage}
    if enabled is not None:
        unknown = set(enabled) - set(tools)
        if unknown:
            raise ValueError(f"unknown tools: {', '.join(sorted(unknown))}; known: {', '.join(TOOL_ORDER)}")
    registry = ToolRegistry()
    for name in TOOL_ORDER:
        if enabled is None or name in enabled:
            registry.register(tools[name], name=name)
    return registry
