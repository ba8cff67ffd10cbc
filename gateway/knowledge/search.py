"""Full-text search over past conversations, scoped to the person asking.

Reads the store through its own read-only connection (never the daemon's writer); messages stored
but not yet indexed are indexed first, on a short-lived writer of its own. Scope is the privacy
boundary: a user finds their own DMs and the group sessions they spoke in, never someone else's DMs.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import sqlite3
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gateway.errors import ToolError
from gateway.store.search_index import CJK_RANGES, index_before_search


class Asker(Protocol):
    """Who is searching (gateway/agent/tools/registry.py's ToolContext is one): the scope is derived
    from it."""

    @property
    def session_id(self) -> int: ...
    @property
    def platform(self) -> str: ...
    @property
    def chat_type(self) -> str: ...
    @property
    def user_id(self) -> str | None: ...
    @property
    def chat_id(self) -> str | None: ...
    @property
    def accounts(self) -> tuple[tuple[str, str | None], ...]: ...
    @property
    def db_path(self) -> Path: ...
    @property
    def agent(self) -> str: ...


DEFAULT_LIMIT = 5
MAX_LIMIT = 10
HITS_PER_SESSION = 3
# A scope of up to this many sessions is listed and handed to the query; a larger one is applied
# while walking the newest matches, where a good share of matches is in scope anyway.
_SMALL_SCOPE_SESSIONS = 250
_MAX_SPOKE_SESSIONS = 2000  # sessions a user spoke in, listed to find the part inside the scope
# Without the index's `sid` column, a query with few matches is filtered match by match, and one
# with many is checked against each message of a small scope (one index seek apiece).
_FEW_MATCHES = 5000
_PROBE_MAX_MESSAGES = 2500
_MAX_CANDIDATES = 20_000  # matches walked in a large scope before answering with what was found
_SNIPPET_CHARS = 160
_QUERY_ERRORS = ("fts5:", "unterminated string", "unknown special query", "no such column")
# active 1: in the context; 2: compressed out of it (still the conversation); 0: undone or
# superseded by a copy
_CHAT = "m.role IN ('user', 'assistant') AND m.active IN (1, 2) AND m.kind = 'chat'"

_CJK = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]")


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
    """Whose sessions may be searched: the person asking owns the session or spoke in it, under any
    of their linked identities (`accounts`: platform and user id; user id None for a platform whose
    every user is the local owner).

    `chat` set means only sessions of that group chat: asked in a group, the answer is read by the
    whole group, so the asker's DMs and other groups stay out of it.
    """

    accounts: tuple[tuple[str, str | None], ...]
    chat: tuple[str, str] | None
    exclude_session: int
    agent: str = "main"  # only this agent's sessions: one agent never reads another's conversations

    @classmethod
    def of(cls, ctx: Asker) -> Scope:
        accounts = tuple(ctx.accounts)
        if not ctx.user_id or not accounts:
            raise ToolError("Search is unavailable here: the person asking is unknown.")
        chat = None if ctx.chat_type == "dm" else (ctx.platform, ctx.chat_id or "")
        return cls(accounts, chat, ctx.session_id, ctx.agent)

    def predicate(self) -> tuple[str, dict[str, object]]:
        """SQL on `s` (sessions): true for sessions in scope."""
        args: dict[str, object] = {"current": self.exclude_session, "agent": self.agent}
        anyone = []
        for n, (platform, user) in enumerate(self.accounts):
            args[f"p{n}"] = platform
            if user is None:
                anyone.append(f"s.platform = :p{n}")
                continue
            args[f"u{n}"] = user
            anyone.append(
                f"(s.platform = :p{n} AND (s.user_id = :u{n} OR EXISTS "
                f"(SELECT 1 FROM messages x WHERE x.user_id = :u{n} AND x.session_id = s.id)))"
            )
        where = f"s.id != :current AND s.agent = :agent AND ({' OR '.join(anyone)})"
        if self.chat is not None:
            where += (
                " AND s.platform = :chat_platform AND s.chat_id = :chat AND s.chat_type != 'dm'"
            )
            args["chat_platform"], args["chat"] = self.chat
        return where, args

    def sessions(self, conn: sqlite3.Connection, cap: int) -> list[int] | None:
        """The scope's session ids, or None when there are more than `cap`."""
        where, args = self.predicate()
        found: set[int] = set()
        for platform, user in self.accounts:
            mine = "s.platform = :mp" + ("" if user is None else " AND s.user_id = :mu")
            owned = [
                r[0]
                for r in conn.execute(
                    f"SELECT s.id FROM sessions s WHERE {mine} AND {where} LIMIT :cap",
                    {**args, "mp": platform, "mu": user, "cap": cap + 1},
                )
            ]
            found.update(owned)
            if len(found) > cap:
                return None
            spoke = self._spoke(conn, user, cap) if user is not None else []
            if spoke is None:
                return None
            rows = conn.execute(
                f"SELECT s.id FROM sessions s WHERE s.id IN (SELECT value FROM json_each(:ids)) "
                f"AND {where}",
                {**args, "ids": json.dumps(spoke)},
            )
            found.update(r[0] for r in rows)
        ids = sorted(found)
        return ids if len(ids) <= cap else None

    def _spoke(self, conn: sqlite3.Connection, user: str, cap: int) -> list[int] | None:
        """Distinct sessions the user spoke in: one index seek each, not a scan of all their
        messages. In a group most of them are elsewhere, so more are listed before giving up on a
        small scope."""
        most = cap if self.chat is None else _MAX_SPOKE_SESSIONS
        spoke = [
            r[0]
            for r in conn.execute(
                "WITH RECURSIVE spoke(sid) AS (SELECT (SELECT min(session_id) FROM messages WHERE "
                "user_id = :u) UNION ALL SELECT (SELECT min(session_id) FROM messages WHERE "
                "user_id = :u AND session_id > sid) FROM spoke WHERE sid IS NOT NULL LIMIT :cap) "
                "SELECT sid FROM spoke WHERE sid IS NOT NULL",
                {"u": user, "cap": most + 1},
            )
        ]
        return None if len(spoke) > most else spoke


@dataclass(frozen=True, slots=True)
class _Query:
    """How one query runs: an FTS table and its MATCH
    text (None: no index can help), plus LIKE terms."""

    table: str
    match: str | None
    like: tuple[str, ...] = ()
    highlight: tuple[str, ...] = ()  # terms marked in Python, where FTS5 snippets cannot (CJK)

    @classmethod
    def parse(cls, query: str) -> _Query:
        if not _CJK.search(query):
            return cls("messages_fts", query)
        # Most CJK words are two characters, shorter than a trigram: those are checked with LIKE.
        terms = tuple(
            t for t in (w.strip('"') for w in query.split()) if t and t not in ("AND", "OR", "NOT")
        )
        long = [t.replace('"', '""') for t in terms if len(t) >= 3]
        return cls(
            "messages_fts_tri",
            " ".join(f'"{t}"' for t in long) or None,
            tuple(t for t in terms if len(t) < 3),
            terms,
        )

    def where(self, sessions: list[int] | None = None) -> tuple[str, dict[str, object]]:
        """Conditions on `m` (and the FTS table); `sessions`
        narrows the MATCH itself (needs `sid`)."""
        sql = "".join(f" AND m.content LIKE :like{i} ESCAPE '\\'" for i in range(len(self.like)))
        args: dict[str, object] = {
            f"like{i}": f"%{_escape_like(t)}%" for i, t in enumerate(self.like)
        }
        if self.match is not None:
            # The user's query is confined to the content column. It was parsed on its own first, so
            # it cannot close the parenthesis and widen the match (the SQL checks the scope again
            # anyway).
            match = f"content : ({self.match})"
            if sessions is not None:
                # The token is '<id>': unicode61 keeps the digits, the trigram index needs the
                # brackets so that <12> is not found inside <123>.
                token = '"<{}>"' if self.table == "messages_fts_tri" else "{}"
                match += " AND sid : (" + " OR ".join(token.format(int(s)) for s in sessions) + ")"
            sql = f" AND {self.table} MATCH :match" + sql
            args["match"] = match
        return sql, args


class SessionSearch:
    """Runs searches on one thread over one read-only connection that stays open.

    A fresh connection starts with an empty page cache and re-reads every index page it touches;
    kept open, the hot pages of the index stay in memory (measured: ~10 ms vs ~0.5 ms for a common
    word).
    """

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="session-search")
        self._conn: sqlite3.Connection | None = None
        self._path: Path | None = None

    async def search(
        self, ctx: Asker, query: str, *, limit: int = DEFAULT_LIMIT
    ) -> list[SessionHits]:
        call = functools.partial(self.search_now, ctx, query, limit=limit)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def search_now(
        self, ctx: Asker, query: str, *, limit: int = DEFAULT_LIMIT
    ) -> list[SessionHits]:
        """Newest sessions first, each with up to three newest matching messages (blocking)."""
        scope = Scope.of(ctx)
        query = query.strip()
        if not query:
            raise ToolError("The search query is empty.")
        plan = _Query.parse(query)
        conn = self._connection(ctx.db_path)
        index_before_search(conn, ctx.db_path)  # what was stored a moment ago is found too
        try:
            if plan.match is not None:  # parse the query on its own first, see _Query.where
                conn.execute(
                    f"SELECT 1 FROM {plan.table} WHERE {plan.table} MATCH ? LIMIT 1", (plan.match,)
                ).fetchall()
            return _Search(conn, scope, plan, max(1, min(limit, MAX_LIMIT))).run()
        except sqlite3.OperationalError as e:
            if str(e).startswith(_QUERY_ERRORS) or "syntax error" in str(e):
                raise ToolError(
                    f"Search query {query!r} is not valid full-text "
                    f"syntax ({e}). Use plain words (all must "
                    'match), "exact phrases" in double quotes, OR '
                    "between alternatives, NOT to exclude, word* "
                    "for a prefix; put words with punctuation "
                    'such as e-mail in double quotes: "e-mail", '
                    '"3.11".'
                ) from None
            self._drop()
            raise
        except sqlite3.Error:
            self._drop()  # the next call starts from a fresh connection
            raise

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._drop()

    def _connection(self, path: Path) -> sqlite3.Connection:
        if self._conn is not None and self._path == path:
            return self._conn
        self._drop()
        if not path.exists():
            raise ToolError("There is no conversation history yet.")
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
        )
        conn.execute("PRAGMA busy_timeout = 2000")
        conn.execute("PRAGMA cache_size = -32000")  # 32 MB: the hot part of a million-message index
        self._conn, self._path = conn, path
        return conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = self._path = None


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _id_list(ids: list[int]) -> str:
    # Inlined integers, not json_each: with a literal list the planner seeks the session index.
    return ",".join(str(int(i)) for i in ids) or "NULL"


# session id -> [(message id, role, created_at)], newest first
Found = dict[int, list[tuple[int, str, str]]]


class _Search:
    def __init__(self, conn: sqlite3.Connection, scope: Scope, query: _Query, limit: int) -> None:
        self.conn, self.scope, self.query, self.limit = conn, scope, query, limit

    def run(self) -> list[SessionHits]:
        found = self._collect(self._rows())
        if not found:
            return []
        snippets = self._snippets(found)
        info: dict[int, tuple[str, str, str | None]] = {
            sid: (chat_type, created, ended)
            for sid, chat_type, created, ended in self.conn.execute(
                "SELECT id, chat_type, created_at, ended_at FROM sessions "
                f"WHERE id IN ({_id_list(list(found))})"
            )
        }
        return [
            SessionHits(
                sid,
                info[sid][0],
                info[sid][1],
                info[sid][2],
                tuple(Hit(m, role, at, snippets.get(m, "")) for m, role, at in hits),
            )
            for sid, hits in found.items()
        ]

    def _rows(self) -> Iterable[tuple[Any, ...]]:
        sessions = self.scope.sessions(self.conn, _SMALL_SCOPE_SESSIONS)
        if sessions is None:
            return self._newest_matches()
        if not sessions:
            return ()
        if self.query.match is None:
            return self._in_sessions(sessions, probe=False)
        if self.has_sid or self._matches_at_most(_FEW_MATCHES):
            return self._scoped_matches(sessions, narrow=self.has_sid)
        if self._size(sessions) <= _PROBE_MAX_MESSAGES:
            return self._in_sessions(sessions, probe=True)
        return self._newest_matches()

    @functools.cached_property
    def has_sid(self) -> bool:
        """Whether the index carries session tokens (the
        proposed migration) so FTS5 can apply a scope."""
        return any(
            row[1] == "sid" for row in self.conn.execute(f"PRAGMA table_info({self.query.table})")
        )

    def _matches_at_most(self, n: int) -> bool:
        cond, args = self.query.where()
        table = self.query.table
        row = self.conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {table} CROSS JOIN messages m ON "
            f"m.id = {table}.rowid WHERE 1{cond} LIMIT {n + 1})",
            args,
        ).fetchone()
        return int(row[0]) <= n

    def _size(self, sessions: list[int]) -> int:
        row = self.conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM messages WHERE session_id IN "
            f"({_id_list(sessions)}) LIMIT ?)",
            (_PROBE_MAX_MESSAGES + 1,),
        ).fetchone()
        return int(row[0])

    def _scoped_matches(self, sessions: list[int], *, narrow: bool) -> sqlite3.Cursor:
        """Matches inside the listed sessions. With `narrow` FTS5 intersects the query with the
        sessions' tokens, so the cost follows the answer; without, every match is looked at (few,
        see _rows)."""
        table = self.query.table
        cond, args = self.query.where(sessions if narrow else None)
        return self.conn.execute(
            f"SELECT m.id, m.session_id, m.role, m.created_at FROM {table} CROSS JOIN messages m "
            f"ON m.id = {table}.rowid WHERE m.session_id IN ({_id_list(sessions)}) AND "
            f"{_CHAT}{cond} ORDER BY {table}.rowid DESC",
            args,
        )

    def _in_sessions(self, sessions: list[int], *, probe: bool) -> sqlite3.Cursor:
        """The scope's own messages, each checked by LIKE or by an index seek on its rowid."""
        cond, args = self.query.where()
        table = self.query.table
        join = f"CROSS JOIN {table} ON {table}.rowid = m.id" if probe else ""
        return self.conn.execute(
            f"SELECT m.id, m.session_id, m.role, m.created_at FROM messages m {join} "
            f"WHERE m.session_id IN ({_id_list(sessions)}) AND {_CHAT}{cond} ORDER BY m.id DESC",
            args,
        )

    def _newest_matches(self) -> sqlite3.Cursor:
        """Newest matches first, each flagged in scope or not (filtered while collecting)."""
        cond, args = self.query.where()
        where, scope_args = self.scope.predicate()
        table = self.query.table
        source, order = (
            (f"{table} CROSS JOIN messages m ON m.id = {table}.rowid", f"{table}.rowid")
            if self.query.match is not None
            else ("messages m", "m.id")
        )
        return self.conn.execute(
            f"SELECT m.id, m.session_id, m.role, m.created_at, {_CHAT} AND {where} FROM {source} "
            f"CROSS JOIN sessions s ON s.id = m.session_id WHERE 1{cond} ORDER BY {order} DESC",
            {**args, **scope_args},
        )

    def _collect(self, rows: Iterable[tuple[Any, ...]]) -> Found:
        found: Found = {}
        for walked, (mid, sid, role, at, *in_scope) in enumerate(rows, 1):
            if walked > _MAX_CANDIDATES:
                break
            if in_scope and not in_scope[0]:
                continue
            if sid not in found:
                if len(found) == self.limit:
                    break
                found[sid] = []
            if len(found[sid]) < HITS_PER_SESSION:
                found[sid].append((mid, role, at))
        return found

    def _snippets(self, found: Found) -> dict[int, str]:
        ids = [m for hits in found.values() for m, _, _ in hits]
        if self.query.highlight or self.query.match is None:
            rows = self.conn.execute(
                f"SELECT id, content FROM messages WHERE id IN ({_id_list(ids)})"
            )
            return {mid: _highlight(text, self.query.highlight) for mid, text in rows}
        table = self.query.table
        if self.has_sid:
            # one pass over the found sessions' matches, not one index lookup per message
            cond, args = self.query.where(list(found))
            pick = f"m.id IN ({_id_list(ids)})"
        else:
            cond, args = self.query.where()
            pick = f"{table}.rowid IN ({_id_list(ids)})"
        rows = self.conn.execute(
            f"SELECT m.id, snippet({table}, 0, '«', '»', '…', 24) FROM {table} "
            f"CROSS JOIN messages m ON m.id = {table}.rowid WHERE {pick}{cond}",
            args,
        )
        return {mid: " ".join(text.split()) for mid, text in rows}


def _highlight(text: str, terms: tuple[str, ...]) -> str:
    """Mark every term (case-insensitively) and cut a window around the first one."""
    text = " ".join(text.split())
    if not terms:
        return text[:_SNIPPET_CHARS]
    pattern = re.compile(
        "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True)), re.IGNORECASE
    )
    first = pattern.search(text)
    start = max(0, (first.start() if first else 0) - _SNIPPET_CHARS // 3)
    window = text[start : start + _SNIPPET_CHARS]
    marked = pattern.sub(lambda m: f"«{m.group(0)}»", window)
    return ("…" if start else "") + marked + ("…" if start + _SNIPPET_CHARS < len(text) else "")
