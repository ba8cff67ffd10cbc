"""The SQLite connection under the Store: opening (WAL, pragmas), migrations, transactions and the generic
one/all/execute helpers. The per-table queries build on it (session_queries, message_queries, delivery_queries).

Calls are synchronous and short (WAL + synchronous=NORMAL: no fsync per commit), so the event loop may call them
directly. A query that fails raises StoreError.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from gateway.errors import StoreError
from gateway.store.history_cache import HistoryCache
from gateway.store.rows import iso, utcnow
from gateway.store.schema import MIGRATIONS, Migration


class Database:
    """One connection to state.db. Open once in the composition root (as a Store); close on shutdown."""

    def __init__(self, path: Path, *, migrations: Sequence[Migration] = MIGRATIONS) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open {path}: {exc}") from exc
        conn.row_factory = sqlite3.Row
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        try:
            conn.execute("PRAGMA busy_timeout=5000")
            self.db.enable_wal()
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:  # not a database, damaged, read-only: the caller says which, in one line
            conn.close()
            raise StoreError(f"cannot open {path}: {exc}") from exc
        self.applied = self._migrate(migrations)
        self.history_cache = HistoryCache()
        self._data_version = self._read_data_version()

    def checkpoint_off_loop(self, *, safety_pages: int = 10_000) -> None:
        """Leave WAL checkpoints to `checkpoint()` (the daemon runs it in a thread). SQLite's own runs inside
        whichever commit fills the WAL past 1,000 pages, a turn's commit on the event loop, copying and syncing
        for milliseconds; `safety_pages` keeps it as a backstop should the background ones stop."""
        self.conn.execute(f"PRAGMA wal_autocheckpoint={int(safety_pages)}")

    def checkpoint(self) -> None:
        """Copy the WAL into the database from a connection of its own (safe from any thread); PASSIVE never
        waits for the daemon's writers or readers, it takes what it can and the next round the rest."""
        conn = sqlite3.connect(self.path, timeout=5)
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def close(self) -> None:
        try:
            self.conn.execute("PRAGMA optimize")
        except sqlite3.Error:
            pass
        self.conn.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One small write transaction (BEGIN IMMEDIATE so a second process waits instead of failing)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.history_cache.rollback()
            self.conn.execute("ROLLBACK")
            raise
        else:
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                self.history_cache.rollback()
                raise
            self.history_cache.commit()

    def _migrate(self, migrations: Sequence[Migration]) -> list[str]:
        self.conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        done = {r[0] for r in self.conn.execute("SELECT name FROM schema_migrations")}
        applied = []
        for name, run in migrations:
            if name in done:
                continue
            try:
                if isinstance(run, str):
                    # executescript commits any open transaction first, so the BEGIN goes inside the script.
                    stamp = iso(utcnow())
                    self.conn.executescript(f"BEGIN IMMEDIATE;\n{run}\nINSERT INTO schema_migrations VALUES"
                                            f" ('{name}', '{stamp}');\nCOMMIT;")
                else:
                    self.conn.execute("BEGIN IMMEDIATE")
                    run(self.conn)
                    self.conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (name, iso(utcnow())))
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
            raise StoreError(f"query failed: {exc}") from exc
        return row

    def all(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"query failed: {exc}") from exc

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one write statement in its own transaction; return lastrowid."""
        if "messages" in sql:  # not a path messages are written by; should one ever be, no cached history lies
            self.history_cache.clear()
        try:
            with self.tx() as conn:
                cur = conn.execute(sql, args)
                return int(cur.lastrowid or 0)
        except sqlite3.Error as exc:
            raise StoreError(f"write failed: {exc}") from exc

    def _read_data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])
