"""Queries on sessions' tool lists: one row per distinct list (by digest), each session pointing at its own."""

from __future__ import annotations

import hashlib
from datetime import datetime

from gateway.errors import StoreError
from gateway.store.connection import Database
from gateway.store.rows import iso


class ToolListQueries(Database):
    def tool_list_id(self, specs: str, *, now: datetime) -> int:
        """The id of the list whose JSON is exactly `specs`, stored now if it is new."""
        digest = hashlib.sha256(specs.encode()).hexdigest()
        self.execute("INSERT INTO tool_lists (digest, specs, created_at) VALUES (?, ?, ?) ON CONFLICT(digest) DO NOTHING",
                     (digest, specs, iso(now)))
        row = self.one("SELECT id FROM tool_lists WHERE digest = ?", (digest,))
        if row is None:
            raise StoreError("tool list vanished right after it was stored")
        return int(row["id"])

    def tool_list(self, list_id: int) -> str:
        row = self.one("SELECT specs FROM tool_lists WHERE id = ?", (list_id,))
        if row is None:
            raise StoreError(f"tool list {list_id} does not exist")
        return str(row["specs"])

    def fix_tool_list(self, session_id: int, list_id: int) -> None:
        self.execute("UPDATE sessions SET tool_list_id = ? WHERE id = ?", (list_id, session_id))

    def latest_tool_list(self, platform: str) -> int | None:
        """The list the newest session on `platform` got (for logging a change once, across restarts too)."""
        row = self.one("SELECT tool_list_id FROM sessions WHERE platform = ? AND tool_list_id IS NOT NULL"
                       " ORDER BY id DESC LIMIT 1", (platform,))
        return None if row is None else int(row["tool_list_id"])
