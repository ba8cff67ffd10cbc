"""A session's tool list: fixed when its prompt is first built, stored beside it, and sent byte for
byte on every later turn, flush and compression, across restarts. Together with the prompt it is the
provider's cached prefix, so a tool an MCP server adds or drops reaches only sessions that start
afterwards.

With tool search (gateway/agent/tools/deferred.py) the list has two parts, stored in one row: the
tools sent (core tools, tool_search, tool_call) and the deferred catalog the session may search and
call, frozen alike.

An admin-only tool (the shell: catalog.ADMIN_ONLY) is in a new session's list only when `admin`
says the session is an admin's own; with no `admin` check (a scheduled run's sessions) never.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from gateway.agent.tools.catalog import ADMIN_ONLY
from gateway.agent.tools.deferred import BRIDGE, DeferredCatalog, bind
from gateway.agent.tools.registry import ToolSpec
from gateway.store.database import Store
from gateway.store.rows import SessionRow

log = logging.getLogger("gateway.sessions.manager")
Specs = tuple[ToolSpec, ...]


class ToolSource(Protocol):
    """gateway/agent/tools/catalog.py's ToolCatalog, as a session sees it."""

    def current(self, platform: str) -> tuple[ToolSpec, ...]: ...

    def enabled(self, name: str, platform: str) -> bool: ...

    def split(self, specs: Sequence[ToolSpec], window: int) -> tuple[Specs, Specs]:
        """(sent, deferred): a new session's tools at the model's context window (tool search)."""


@dataclass(frozen=True, slots=True)
class SessionToolList:
    """`specs` is the tools array (with tool search: the core tools, tool_search and tool_call,
    bound to the `deferred` catalog); `names` are its names."""

    list_id: int
    specs: tuple[ToolSpec, ...]
    names: tuple[str, ...]
    deferred: DeferredCatalog | None = None

    def spec(self, name: str) -> ToolSpec | None:
        """A tool the session may call by its real name, sent or deferred (with its server and
        annotations)."""
        found = next((s for s in self.specs if s.name == name and name not in BRIDGE), None)
        return found or (self.deferred.get(name) if self.deferred is not None else None)

    def every(self) -> tuple[ToolSpec, ...]:
        """The session's real tools: those sent and those deferred, without the bridge."""
        sent = tuple(s for s in self.specs if s.name not in BRIDGE)
        return sent + (self.deferred.entries if self.deferred is not None else ())


def encode_specs(specs: Sequence[ToolSpec], deferred: Sequence[ToolSpec] = ()) -> str:
    """The stored form: a list of specs; with deferred tools {"tools": [...], "deferred": [...]}."""
    sent = [_encoded(s) for s in specs]
    whole: Any = {"tools": sent, "deferred": [_encoded(s) for s in deferred]} if deferred else sent
    return json.dumps(whole, ensure_ascii=False, separators=(",", ":"))


def decode_specs(text: str) -> tuple[tuple[ToolSpec, ...], tuple[ToolSpec, ...]]:
    """(sent, deferred) from the stored form."""
    whole = json.loads(text)
    if isinstance(whole, list):
        return tuple(_decoded(t) for t in whole), ()
    sent, deferred = whole["tools"], whole["deferred"]
    return tuple(_decoded(t) for t in sent), tuple(_decoded(t) for t in deferred)


def _encoded(spec: ToolSpec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
    }
    if spec.annotations:
        out["annotations"] = dict(spec.annotations)
    if spec.server:
        out["server"] = spec.server
    return out


def _decoded(t: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        t["name"],
        t["description"],
        t["parameters"],
        t.get("annotations") or {},
        t.get("server", ""),
    )


class SessionTools:
    def __init__(
        self,
        *,
        store: Store,
        catalog: ToolSource,
        clock: Callable[[], datetime],
        admin: Callable[[SessionRow], bool] | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.clock = clock
        self.admin = admin  # whether a session is an admin's own (its admin-only tools)
        # few distinct lists: sessions of a platform share one
        self._lists: dict[int, SessionToolList] = {}
        self._allowed: dict[tuple[int, str], frozenset[str]] = {}
        self._latest: dict[str, int | None] = {}  # platform → the list its newest session got
        self._refit: dict[int, int] = {}  # session → its list since a /model switch

    def fix(self, session: SessionRow, *, window: int | None = None) -> SessionToolList:
        """Give the session the tools a new session on its platform gets now, and store the choice.
        With the model's context `window`, tool search may defer its MCP tools (tools.search);
        without, all are sent."""
        specs = self.catalog.current(session.platform)
        if any(s.name in ADMIN_ONLY for s in specs) and not (self.admin and self.admin(session)):
            specs = tuple(s for s in specs if s.name not in ADMIN_ONLY)
        sent, deferred = self.catalog.split(specs, window) if window else (specs, ())
        list_id = self.store.tool_list_id(encode_specs(sent, deferred), now=self.clock())
        self._note_change(session.platform, list_id)
        self.store.fix_tool_list(session.id, list_id)
        self._refit.pop(session.id, None)
        return self._load(list_id)

    def refit(self, session: SessionRow, *, window: int) -> SessionToolList:
        """The session's own tools (never today's) split again for another model's context
        `window`: a model switch rebuilds the prompt, and tool search follows the new window.
        Stored, so every later turn and a restart send the new list byte for byte."""
        before = self.of(session)
        sent, deferred = self.catalog.split(before.every(), window)
        list_id = self.store.tool_list_id(encode_specs(sent, deferred), now=self.clock())
        if list_id != before.list_id:
            self.store.fix_tool_list(session.id, list_id)
            self._refit[session.id] = list_id  # the turn's row still names the old list
            log.info(
                "session=%s tools split again for a context window of %s: %s sent, %s "
                "behind tool search",
                session.id,
                window,
                len(sent),
                len(deferred),
            )
        return self._load(list_id)

    def of(self, session: SessionRow) -> SessionToolList:
        """The session's stored list; a session from before lists were stored gets today's, once."""
        list_id = self._refit.get(session.id)
        if list_id is not None and list_id == session.tool_list_id:
            del self._refit[session.id]  # the row has caught up
        list_id = list_id or session.tool_list_id or self.store.session(session.id).tool_list_id
        if list_id is None:
            log.info(
                "session=%s had no stored tool list (it "
                "started before they were stored); fixed now",
                session.id,
            )
            return self.fix(session)
        return self._load(list_id)

    def allowed(self, tools: SessionToolList, platform: str) -> frozenset[str]:
        """What may run: the session's tools (sent or deferred) that the policy still enables on its
        platform, by their real names, and tool_search / tool_call when the session has them."""
        key = (tools.list_id, platform)
        found = self._allowed.get(key)
        if found is None:
            enabled = self.catalog.enabled
            real = frozenset(s.name for s in tools.every() if enabled(s.name, platform))
            bridge = frozenset(BRIDGE) if tools.deferred is not None else frozenset()
            found = self._allowed[key] = real | bridge
        return found

    def _load(self, list_id: int) -> SessionToolList:
        found = self._lists.get(list_id)
        if found is None:
            specs, deferred = decode_specs(self.store.tool_list(list_id))
            catalog = DeferredCatalog(deferred) if deferred else None
            if catalog is not None:
                specs = bind(specs, catalog)
            names = tuple(s.name for s in specs)
            found = self._lists[list_id] = SessionToolList(list_id, specs, names, catalog)
        return found

    def _note_change(self, platform: str, list_id: int) -> None:
        """Log once when new sessions on a platform get a different list than the one before (an MCP
        server added or dropped a tool, the policy or the config changed)."""
        if platform not in self._latest:
            self._latest[platform] = self.store.latest_tool_list(platform)
        previous = self._latest[platform]
        self._latest[platform] = list_id
        if previous is None or previous == list_id:
            return
        before, after = self._load(previous), self._load(list_id)
        old, new = before.every(), after.every()
        added = sorted({s.name for s in new} - {s.name for s in old})
        dropped = sorted({s.name for s in old} - {s.name for s in new})
        changed = sorted(s.name for s in new if s.name in {o.name for o in old} and s not in old)
        deferred = len(after.deferred or ())
        search = f"; {deferred} behind tool search" if deferred else ""
        if deferred != len(before.deferred or ()) and not deferred:
            search = "; none behind tool search now"
        log.info(
            "tools for new %s sessions changed: added %s, dropped %s, changed %s%s; running "
            "sessions keep theirs",
            platform,
            added or "none",
            dropped or "none",
            changed or "none",
            search,
        )
