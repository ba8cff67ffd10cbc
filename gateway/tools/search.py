"""session_search: full-text search over past conversations, scoped to the person asking.

Reads the store through its own read-only connection (never the daemon's writer). Scope is the privacy
boundary: a user finds their own DMs and the group sessions they spoke in, never someone else's DMs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from gateway.errors import ToolError
from gateway.tools.registry import ToolContext, ToolFunction

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 5
MAX_LIMIT = 10
HITS_PER_SESSION = 3
_MAX_SCANNED_HITS = 400  # in-scope hits read before giving up on finding more sessions
_CJK = re.compile(r"[\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
                  r"\uf900-\ufaff\uff66-\uff9f]")


@dataclass(frozen=True, slots=True)
class Hit:
    message_id: int
    role: str
    created_at: str
    snippet: str


@dataclass(frozen=True, slots=True)
class SessionHits:
    session_id: int
    chat_type: str
    started_at: str
    ended_at: str | None
    hits: tuple[Hit, ...]


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose sessions may be searched. `chat_id` set means: only sessions of that group chat."""

    platform: str
    user_id: str
    chat_id: str | None
    exclude_session: int

    @classmethod
    def of(cls, ctx: ToolContext) -> Scope:
        if not ctx.user_id:
            raise ToolError("Search is unavailable here: the person asking is unknown.")
        # Asked in a group, the answer is read by the whole group: search only that chat, never DMs.
        chat_id = None if ctx.chat_type == "dm" else (ctx.chat_id or "")
        return cls(ctx.platform, ctx.user_id, chat_id, ctx.session_id)

    def sql(self) -> tuple[str, dict[str, object]]:
        """A predicate on `s` (sessions): the asker owns the session or spoke in it."""
        where = ("s.platform = :platform AND s.id != :current AND (s.user_id = :user OR EXISTS "
                 "(SELECT 1 FROM messages x WHERE x.user_id = :user AND x.session_id = s.id))")
        args: dict[str, object] = {"platform": self.platform, "user": self.user_id,
                                   "current": self.exclude_session}
        if self.chat_id is not None:
            where += " AND s.chat_id = :chat AND s.chat_type != 'dm'"
            args["chat"] = self.chat_id
        return where, args


def search_sessions(ctx: ToolContext, query: str, *, limit: int = DEFAULT_LIMIT) -> list[SessionHits]:
    """Newest sessions first, each with up to three newest matching messages."""
    scope = Scope.of(ctx)
    query = query.strip()
    if not query:
        raise ToolError("The search query is empty.")
    limit = max(1, min(limit, MAX_LIMIT))
    conn = _connect(ctx.db_path)
    try:
        if _CJK.search(query):
            return _Search(conn, scope, limit, "messages_fts_tri", _trigram_query(query)).run()
        return _Search(conn, scope, limit, "messages_fts", query).run()
    except sqlite3.OperationalError as e:
        if _is_query_error(e):
            raise ToolError(
                f"Search query {query!r} is not valid full-text syntax ({e}). Use plain words (all must match), "
                '"exact phrases" in double quotes, OR between alternatives, NOT to exclude, word* for a '
                "prefix; put words with punctuation such as e-mail in double quotes.") from None
        raise
    finally:
        conn.close()


def _connect(path: Path) -> sqlite3.Connection:
    if not path.exists():
        raise ToolError("There is no conversation history yet.")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 2000")
    return conn


def _is_query_error(e: sqlite3.OperationalError) -> bool:
    text = str(e)
    return text.startswith("fts5:") or "syntax error" in text or text.startswith("no such column")


def _trigram_query(query: str) -> str:
    """CJK has no spaces between words, so each term becomes a substring phrase for the trigram index."""
    terms = [t.replace('"', "") for t in query.split()]
    return " ".join(f'"{t}"' for t in terms if t)


class _Search:
    def __init__(self, conn: sqlite3.Connection, scope: Scope, limit: int, table: str, match: str) -> None:
        self.conn, self.scope, self.limit, self.table, self.match = conn, scope, limit, table, match

    def run(self) -> list[SessionHits]:
        found = self._newest_hits()
        if not found:
            return []
        snippets = self._snippets([m for ids in found.values() for m, _, _ in ids])
        info = self._sessions(list(found))
        return [SessionHits(sid, info[sid][0], info[sid][1], info[sid][2],
                            tuple(Hit(m, role, at, snippets.get(m, "")) for m, role, at in hits))
                for sid, hits in found.items()]

    def _newest_hits(self) -> dict[int, list[tuple[int, str, str]]]:
        scope_sql, args = self.scope.sql()
        sql = (f"SELECT m.id, m.session_id, m.role, m.created_at FROM {self.table} f "
               "CROSS JOIN messages m ON m.id = f.rowid CROSS JOIN sessions s ON s.id = m.session_id "
               f"WHERE {self.table} MATCH :match AND m.role IN ('user', 'assistant') AND m.active = 1 "
               f"AND m.kind = 'chat' AND {scope_sql} ORDER BY f.rowid DESC")
        found: dict[int, list[tuple[int, str, str]]] = {}
        scanned = 0
        for mid, sid, role, at in self.conn.execute(sql, {**args, "match": self.match}):
            scanned += 1
            if sid not in found:
                if len(found) == self.limit:
                    break
                found[sid] = []
            if len(found[sid]) < HITS_PER_SESSION:
                found[sid].append((mid, role, at))
            if scanned >= _MAX_SCANNED_HITS:
                break
        return found

    def _snippets(self, ids: list[int]) -> dict[int, str]:
        marks = ",".join("?" * len(ids))
        sql = (f"SELECT rowid, snippet({self.table}, 0, '«', '»', '…', 24) FROM {self.table} "
               f"WHERE {self.table} MATCH ? AND rowid IN ({marks})")
        return {rowid: " ".join(text.split()) for rowid, text in self.conn.execute(sql, (self.match, *ids))}

    def _sessions(self, ids: list[int]) -> dict[int, tuple[str, str, str | None]]:
        marks = ",".join("?" * len(ids))
        rows = self.conn.execute(f"SELECT id, chat_type, created_at, ended_at FROM sessions WHERE id IN ({marks})",
                                 ids)
        return {sid: (chat_type, created, ended) for sid, chat_type, created, ended in rows}


def format_results(query: str, results: list[SessionHits]) -> str:
    if not results:
        return f"No past conversations match {query!r}."
    lines = [f"Past conversations matching {query!r}, newest first:"]
    for r in results:
        where = "DM" if r.chat_type == "dm" else r.chat_type
        lines.append(f"\n{r.started_at[:10]} ({where}, session {r.session_id}):")
        lines.extend(f"  [{h.created_at[:16].replace('T', ' ')} {h.role}] {h.snippet}" for h in r.hits)
    return "\n".join(lines)


def session_search_tool() -> ToolFunction:
    async def session_search(
        ctx: ToolContext,
        query: Annotated[str, 'words to find (all must match); "exact phrase", a OR b, NOT word, prefix*'],
        limit: Annotated[int, f"how many conversations to return (1-{MAX_LIMIT})"] = DEFAULT_LIMIT,
    ) -> str:
        """Search the user's past conversations with you (earlier sessions, not this one) by keywords.
        Returns matching snippets grouped by conversation with dates, newest first. Use it when the user
        refers to something discussed before that is not in your memory.
        """
        results = await asyncio.to_thread(search_sessions, ctx, query, limit=limit)
        return format_results(query, results)

    return session_search
