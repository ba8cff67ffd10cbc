"""The SQLite connection under the Store: opening (WAL, pragmas), migrations, transactions and the
generic one/all/execute helpers. The per-table queries build on it (session_queries,
message_queries, delivery_queries).

Calls are synchronous and short (WAL + synchronous=NORMAL: no fsync per commit), so the event loop
may call them directly. A query that fails raises StoreError; one that fails for a reason that can
pass (another process's write lock held past the short busy timeout, a full disk, a read-only file,
I/O) raises StoreUnavailable, and StoreHealth (one per Database, `store.health`) keeps whether
writes work and waits, without blocking the loop, until they do.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from gateway.errors import StoreError, StoreUnavailable
from gateway.store.history_cache import HistoryCache
from gateway.store.rows import iso, utcnow
from gateway.store.schema import MIGRATIONS, Migration
from gateway.store.search_index import BATCH_ROWS, index_batch

log = logging.getLogger("gateway.store")

T = TypeVar("T")
INDEX_DELAY_S = 0.5  # messages wait this long for the search index: many turns share one batch
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 2.0
Sleep = Callable[[float], Awaitable[None]]


class StoreHealth:
    """The state of one database's writes: `problem` is None while they work, else why they fail."""

    def __init__(
        self,
        *,
        sleep: Sleep = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        max_pause: float = MAX_PAUSE_S,
    ) -> None:
        self.sleep = sleep
        self.monotonic = monotonic
        self.max_pause = max_pause
        self.problem: str | None = None
        self.reason: str | None = None  # busy | full | readonly | io
        self.since: float | None = None
        # counts each time writes stopped working; a caller can tell one outage from the next
        self.outages = 0

    def failed(self, exc: StoreUnavailable) -> None:
        if self.problem is None:
            self.outages += 1
            self.since = self.monotonic()
            if exc.reason != "busy":
                # a lock held by another process is routine; the rest is an outage
                log.error(
                    "the database takes no writes (%s); messages that cannot be stored are "
                    "refused, turns wait until it works again",
                    exc,
                )
        self.problem, self.reason = str(exc), exc.reason

    def ok(self) -> None:
        if self.problem is not None:
            if self.reason != "busy":
                log.warning(
                    "the database takes writes again (it failed for %.0f s)",
                    self.monotonic() - (self.since or self.monotonic()),
                )
            self.problem = self.reason = self.since = None

    @property
    def writable(self) -> bool:
        return self.problem is None

    async def write(self, call: Callable[[], T], *, deadline: float | None = None) -> T:
        """`call()` (a synchronous store write), tried again after a pause while the store is
        unavailable. With a `deadline` it gives up (StoreUnavailable) after that many seconds of a
        held lock, and at once for any other reason; without one it tries until it works or is
        cancelled."""
        started = self.monotonic()
        pause = FIRST_PAUSE_S
        while True:
            try:
                return call()
            except StoreUnavailable as exc:
                # With a deadline (a sender waiting for its ack), only a lock is worth waiting for:
                # a full or broken disk does not come back in seconds.
                if deadline is not None and (
                    exc.reason != "busy" or self.monotonic() - started + pause > deadline
                ):
                    raise
            await self.sleep(pause)
            pause = min(pause * 2, self.max_pause)

    async def pause(self, attempt: int) -> None:
        """The wait before attempt `attempt` (1, 2, …) of
        something bigger than one write (a whole turn)."""
        await self.sleep(min(FIRST_PAUSE_S * 2 ** max(attempt - 1, 0), self.max_pause))


# SQLite's primary result codes for failures that can pass, by what they mean for a caller.
UNAVAILABLE = {
    sqlite3.SQLITE_BUSY: "busy",
    sqlite3.SQLITE_LOCKED: "busy",
    sqlite3.SQLITE_FULL: "full",
    sqlite3.SQLITE_READONLY: "readonly",
    sqlite3.SQLITE_IOERR: "io",
}


# A new database's pages, by its migrations, once this process has made one: the next new database
# (a bench's seed, a test's home, the pairing notices' table) is copied in ~2 ms instead of running
# every migration's DDL again (~50 ms). One entry per migration list, ~330 KB.
_NEW_DATABASES: dict[tuple[tuple[str, str], ...], bytes] = {}


class Database:
    """One connection to state.db. Open once in the
    composition root (as a Store); close on shutdown."""

    def __init__(
        self,
        path: Path,
        *,
        migrations: Sequence[Migration] = MIGRATIONS,
        busy_timeout_ms: int = 5000,
    ) -> None:
        self.path = path
        self.health = StoreHealth()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open {path}: {exc}") from exc
        conn.row_factory = sqlite3.Row
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            self.db.enable_wal()
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            # not a database, damaged, read-only: the caller says which, in one line
            conn.close()
            raise StoreError(f"cannot open {path}: {exc}") from exc
        self.applied = self._migrate(migrations)
        self.history_cache = HistoryCache()
        counted = self.conn.execute("SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL")
        self.active_count = int(counted.fetchone()[0])  # the history cache's size follows it
        self.history_cache.size_for(self.active_count)
        self._data_version = self._read_data_version()
        self._looked: int | None = None  # data_version inside one_look()
        self._indexing: asyncio.Handle | None = None

    def checkpoint_off_loop(self, *, safety_pages: int = 10_000) -> None:
        """Leave WAL checkpoints to `checkpoint()` (the daemon runs it in a thread). SQLite's own
        runs inside whichever commit fills the WAL past 1,000 pages, a turn's commit on the event
        loop, copying and syncing for milliseconds; `safety_pages` keeps it as a backstop should the
        background ones stop."""
        self.conn.execute(f"PRAGMA wal_autocheckpoint={int(safety_pages)}")

    def checkpoint(self) -> None:
        """Copy the WAL into the database from a connection of its own (safe from any thread);
        PASSIVE never waits for the daemon's writers or readers, it takes what it can and the next
        round the rest."""
        conn = sqlite3.connect(self.path, timeout=5)
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def set_busy_timeout(self, busy_timeout_ms: int) -> None:
        """How long a statement waits for another process's write lock (the daemon's start-up may
        wait longer than its event loop later may)."""
        self.conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")

    def close(self) -> None:
        if self._indexing is not None:
            self._indexing.cancel()
            self._indexing = None
        try:
            self.conn.execute("PRAGMA optimize")
        except sqlite3.Error:
            pass
        self.conn.close()  # messages not indexed yet are indexed by the next start or search

    # ------------------------------------------------------ the search index, after the fact
    def index_soon(self) -> None:
        """Messages were written: index them a moment from now, with whatever else is written
        meanwhile (one batch for many turns). Without a running loop nothing is armed: the next
        start or search does it."""
        if self._indexing is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._indexing = loop.call_later(INDEX_DELAY_S, self._index_step)

    def index_pending(self) -> int:
        """Index every message still waiting (at start); returns how many ids it covered."""
        done = 0
        while covered := self._index_once():
            done += covered
        return done

    def _index_once(self) -> int:
        with self.tx() as conn:
            return index_batch(conn, BATCH_ROWS)

    def _index_step(self) -> None:
        """One batch on the event loop; more waiting goes next round: turns run in between."""
        self._indexing = None
        try:
            covered = self._index_once()
        except (StoreError, sqlite3.Error) as exc:  # locked, full, closed: the next write tries
            log.debug("search index batch deferred: %s", exc)
            return
        if covered >= BATCH_ROWS:
            self._indexing = asyncio.get_running_loop().call_soon(self._index_step)

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One small write transaction (BEGIN IMMEDIATE: it waits for another process's lock up to
        the busy timeout). A failure that can pass (busy, full, read-only, I/O) is StoreUnavailable,
        and store.health hears of every failure and every commit."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._raise_unavailable(exc)
            raise
        try:
            yield self.conn
        except BaseException as exc:
            self.history_cache.rollback()
            self._rollback()
            if isinstance(exc, sqlite3.Error):
                self._raise_unavailable(exc)
            raise
        try:
            self.conn.execute("COMMIT")
        except BaseException as exc:
            self.history_cache.rollback()
            self._rollback()
            if isinstance(exc, sqlite3.Error):
                self._raise_unavailable(exc)
            raise
        self.history_cache.commit()
        self.health.ok()

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            # SQLite may have rolled back already (some I/O and full errors do)
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _raise_unavailable(self, exc: sqlite3.Error) -> None:
        """StoreUnavailable (health told) when `exc` is
        a failure that can pass; otherwise nothing."""
        reason = UNAVAILABLE.get(getattr(exc, "sqlite_errorcode", 0) & 0xFF)
        if reason is not None:
            error = StoreUnavailable(reason, f"{exc} ({reason})")
            self.health.failed(error)
            raise error from exc

    def probe(self) -> None:
        """A small write that needs new pages, removed again in the same transaction: does a write
        work now?"""
        with self.tx() as conn:
            conn.execute("INSERT INTO store_probe (filler) VALUES (zeroblob(16384))")
            conn.execute("DELETE FROM store_probe")

    def _migrate(self, migrations: Sequence[Migration]) -> list[str]:
        new = self.conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None
        key = tuple(
            (name, run if isinstance(run, str) else f"{run.__module__}.{run.__qualname__}")
            for name, run in migrations
        )
        if new and key in _NEW_DATABASES:
            return self._copy_new(_NEW_DATABASES[key])
        applied = self._run(migrations)
        if new:
            image = bytearray(self.conn.serialize())
            image[18:20] = b"\x01\x01"  # as a rollback-journal file: a copy may live in memory
            _NEW_DATABASES[key] = bytes(image)
        return applied

    def _copy_new(self, image: bytes) -> list[str]:
        """A new database as a copy of one this process made with the same migrations."""
        source = sqlite3.connect(":memory:")
        try:
            source.deserialize(image)
            source.backup(self.conn)
        finally:
            source.close()
        self.conn.execute("UPDATE schema_migrations SET applied_at = ?", (iso(utcnow()),))
        return [
            r[0] for r in self.conn.execute("SELECT name FROM schema_migrations ORDER BY rowid")
        ]

    def _run(self, migrations: Sequence[Migration]) -> list[str]:
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        done = {r[0] for r in self.conn.execute("SELECT name FROM schema_migrations")}
        applied = []
        for name, run in migrations:
            if name in done:
                continue
            try:
                if isinstance(run, str):
                    # executescript commits any open transaction
                    # first, so the BEGIN goes inside the script.
                    stamp = iso(utcnow())
                    self.conn.executescript(
                        f"BEGIN IMMEDIATE;\n{run}\nINSERT INTO schema_migrations VALUES"
                        f" ('{name}', '{stamp}');\nCOMMIT;"
                    )
                else:
                    self.conn.execute("BEGIN IMMEDIATE")
                    run(self.conn)
                    self.conn.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?)", (name, iso(utcnow()))
                    )
                    self.conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise StoreError(f"migration {name} failed: {exc}") from exc
            applied.append(name)
        return applied

    def migrations_done(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT name FROM schema_migrations ORDER BY name")]

    def one(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Row | None:
        try:
            row: sqlite3.Row | None = self.conn.execute(sql, args).fetchone()
        except sqlite3.Error as exc:
            raise _query_error(exc) from exc
        return row

    def all(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise _query_error(exc) from exc

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one write statement in its own transaction; return lastrowid."""
        if "messages" in sql:
            # not a path messages are written by; should one ever be, no cached history lies
            self.history_cache.clear()
        try:
            with self.tx() as conn:
                cur = conn.execute(sql, args)
                return int(cur.lastrowid or 0)
        except sqlite3.Error as exc:
            raise StoreError(f"write failed: {exc}") from exc

    def _read_data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def data_version(self) -> int:
        """Changes when another connection (a CLI command, another process) commits; never on this
        connection's own commits. What is cached from rows others may change is checked against
        it."""
        if self._looked is not None:
            return self._looked
        return self._read_data_version()

    @contextmanager
    def one_look(self) -> Iterator[None]:
        """One read of `data_version` for a synchronous block (no await inside): every cache asked
        in it (the history, the people, the roles) checks against the same look, as if they had
        asked at its start."""
        if self._looked is not None:
            yield
            return
        self._looked = self._read_data_version()
        try:
            yield
        finally:
            self._looked = None


def _query_error(exc: sqlite3.Error) -> StoreError:
    reason = UNAVAILABLE.get(getattr(exc, "sqlite_errorcode", 0) & 0xFF)
    return (
        StoreUnavailable(reason, f"query failed: {exc}")
        if reason
        else StoreError(f"query failed: {exc}")
    )
