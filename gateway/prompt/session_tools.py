"""A session's tool list: fixed when its prompt is first built, stored beside it, and sent byte for byte on every
later turn, flush and compression, across restarts. Together with the prompt it is the provider's cached prefix,
so a tool an MCP server adds or drops reaches only sessions that start afterwards.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from gateway.agent.tools.registry import ToolSpec
from gateway.store.database import Store
from gateway.store.rows import SessionRow

log = logging.getLogger("gateway.sessions.manager")


class ToolSource(Protocol):
    """gateway/agent/tools/catalog.py's ToolCatalog, as a session sees it."""

    def current(self, platform: str) -> tuple[ToolSpec, ...]: ...

    def enabled(self, name: str, platform: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class SessionToolList:
    list_id: int
    specs: tuple[ToolSpec, ...]
    names: tuple[str, ...]


def encode_specs(specs: Sequence[ToolSpec]) -> str:
    return json.dumps([{"name": s.name, "description": s.description, "parameters": s.parameters} for s in specs],
                      ensure_ascii=False, separators=(",", ":"))


def decode_specs(text: str) -> tuple[ToolSpec, ...]:
    return tuple(ToolSpec(t["name"], t["description"], t["parameters"]) for t in json.loads(text))


class SessionTools:
    def __init__(self, *, store: Store, catalog: ToolSource, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.catalog = catalog
        self.clock = clock
        self._lists: dict[int, SessionToolList] = {}  # few distinct lists: sessions of a platform share one
        self._allowed: dict[tuple[int, str], frozenset[str]] = {}
        self._latest: dict[str, int | None] = {}  # platform → the list its newest session got

    def fix(self, session: SessionRow) -> SessionToolList:
        """Give the session the tools a new session on its platform gets now, and store the choice."""
        list_id = self.store.tool_list_id(encode_specs(self.catalog.current(session.platform)), now=self.clock())
        self._note_change(session.platform, list_id)
        self.store.fix_tool_list(session.id, list_id)
        return self._load(list_id)

    def of(self, session: SessionRow) -> SessionToolList:
        """The session's stored list; a session from before lists were stored gets today's, once."""
        list_id = session.tool_list_id or self.store.session(session.id).tool_list_id
        if list_id is None:
            log.info("session=%s had no stored tool list (it started before they were stored); fixed now",
                     session.id)
            return self.fix(session)
        return self._load(list_id)

    def allowed(self, tools: SessionToolList, platform: str) -> frozenset[str]:
        """What may run: the session's tools that the policy still enables on its platform."""
        key = (tools.list_id, platform)
        found = self._allowed.get(key)
        if found is None:
            found = self._allowed[key] = frozenset(n for n in tools.names if self.catalog.enabled(n, platform))
        return found

    def _load(self, list_id: int) -> SessionToolList:
        found = self._lists.get(list_id)
        if found is None:
            specs = decode_specs(self.store.tool_list(list_id))
            found = self._lists[list_id] = SessionToolList(list_id, specs, tuple(s.name for s in specs))
        return found

    def _note_change(self, platform: str, list_id: int) -> None:
        """Log once when new sessions on a platform get a different list than the one before (an MCP server
        added or dropped a tool, the policy or the config changed)."""
        if platform not in self._latest:
            self._latest[platform] = self.store.latest_tool_list(platform)
        previous = self._latest[platform]
        self._latest[platform] = list_id
        if previous is None or previous == list_id:
            return
        old, new = self._load(previous).specs, self._load(list_id).specs
        added = sorted({s.name for s in new} - {s.name for s in old})
        dropped = sorted({s.name for s in old} - {s.name for s in new})
        changed = sorted(s.name for s in new if s.name in {o.name for o in old} and s not in old)
        log.info("tools for new %s sessions changed: added %s, dropped %s, changed %s; running sessions keep "
                 "theirs", platform, added or "none", dropped or "none", changed or "none")
