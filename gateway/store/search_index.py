"""The session_search index: its schema (store migrations 0003 and 0017) and its upkeep.

It indexes only what search can return, gives each row a `sid` token so FTS5 applies a user's
scope itself, and keeps the trigram index to text with CJK in it. Messages are indexed after the
transaction that wrote them, in batches (a turn's commit does no FTS5 work): by the writer's
connection a moment later (Database.index_soon), and by any search first (`index_before_search`),
so a search always sees every message stored before it began.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

log = logging.getLogger(__name__)

# Scripts written without spaces between words: their
# terms are substrings, found by the trigram index.
CJK_RANGES = (
    (0x2E80, 0x2FDF),
    (0x3040, 0x30FF),
    (0x3100, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
)
_CJK_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]*"

# Conditions on a messages row, `{r}` being m / new / old. The triggers must mirror the views
# exactly: an FTS5 'delete' for a row that was never indexed corrupts an external-content index.
_SEARCHABLE = "{r}.role IN ('user', 'assistant') AND {r}.kind = 'chat'"
_CJK_ROW = "{r}.content GLOB '" + _CJK_GLOB + "'"
SEARCH_INDEX_MIGRATION_SQL = f"""
DROP TRIGGER IF EXISTS messages_ai;
DROP TRIGGER IF EXISTS messages_ad;
DROP TRIGGER IF EXISTS messages_au;
DROP TABLE IF EXISTS messages_fts;
DROP TABLE IF EXISTS messages_fts_tri;
CREATE VIEW messages_search AS SELECT id, content, '<' || session_id || '>' AS sid FROM messages m
  WHERE {_SEARCHABLE.format(r="m")};
CREATE VIEW messages_search_cjk AS SELECT id, content, sid FROM messages_search s
  WHERE {_CJK_ROW.format(r="s")};
CREATE VIRTUAL TABLE messages_fts USING fts5(content, sid, content='messages_search',
  content_rowid='id', tokenize='porter unicode61');
CREATE VIRTUAL TABLE messages_fts_tri USING fts5(content, sid, content='messages_search_cjk',
  content_rowid='id', tokenize='trigram');
CREATE TRIGGER messages_search_ai AFTER INSERT ON messages WHEN {_SEARCHABLE.format(r="new")} BEGIN
  INSERT INTO messages_fts(rowid, content, sid)
    VALUES (new.id, new.content, '<' || new.session_id || '>');
  INSERT INTO messages_fts_tri(rowid, content, sid)
    SELECT new.id, new.content, '<' || new.session_id || '>' WHERE {_CJK_ROW.format(r="new")};
END;
CREATE TRIGGER messages_search_ad AFTER DELETE ON messages WHEN {_SEARCHABLE.format(r="old")} BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content, sid)
    VALUES ('delete', old.id, old.content, '<' || old.session_id || '>');
  INSERT INTO messages_fts_tri(messages_fts_tri, rowid, content, sid)
    SELECT 'delete', old.id, old.content, '<' || old.session_id || '>'
    WHERE {_CJK_ROW.format(r="old")};
END;
CREATE TRIGGER messages_search_au AFTER UPDATE OF content, role, kind, session_id ON messages BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content, sid)
    SELECT 'delete', old.id, old.content, '<' || old.session_id || '>'
    WHERE {_SEARCHABLE.format(r="old")};
  INSERT INTO messages_fts_tri(messages_fts_tri, rowid, content, sid)
    SELECT 'delete', old.id, old.content, '<' || old.session_id || '>'
    WHERE {_SEARCHABLE.format(r="old")} AND {_CJK_ROW.format(r="old")};
  INSERT INTO messages_fts(rowid, content, sid)
    SELECT new.id, new.content, '<' || new.session_id || '>' WHERE {_SEARCHABLE.format(r="new")};
  INSERT INTO messages_fts_tri(rowid, content, sid)
    SELECT new.id, new.content, '<' || new.session_id || '>'
    WHERE {_SEARCHABLE.format(r="new")} AND {_CJK_ROW.format(r="new")};
END;
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
INSERT INTO messages_fts_tri(messages_fts_tri) VALUES ('rebuild');
"""

# Migration 0017: messages are indexed after their transaction, in batches (`index_batch`), not by
# a trigger inside it. `search_state.upto` is the watermark: every searchable message with
# id <= upto is in the index, none above it. The delete and update triggers touch the index only at
# or below it (an FTS5 'delete' of a row never indexed corrupts an external-content index); a
# delete that removes the newest ids lowers it, since SQLite hands those ids out again
# (messages.id is a plain INTEGER PRIMARY KEY) and a reused id under the watermark would never be
# indexed. Both sit in one trigger: the index entry goes before the mark moves.
_INDEXED = "{r}.id <= (SELECT upto FROM search_state)"
_NEWEST = "(SELECT COALESCE(MAX(id), 0) FROM messages)"
_SID = "'<' || {r}.session_id || '>'"
BATCHED_INDEX_MIGRATION_SQL = f"""
CREATE TABLE search_state (upto INTEGER NOT NULL);
INSERT INTO search_state (upto) SELECT COALESCE(MAX(id), 0) FROM messages;
DROP TRIGGER messages_search_ai;
DROP TRIGGER messages_search_ad;
DROP TRIGGER messages_search_au;
CREATE TRIGGER messages_search_ad AFTER DELETE ON messages BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content, sid)
    SELECT 'delete', old.id, old.content, {_SID.format(r="old")}
    WHERE {_SEARCHABLE.format(r="old")} AND {_INDEXED.format(r="old")};
  INSERT INTO messages_fts_tri(messages_fts_tri, rowid, content, sid)
    SELECT 'delete', old.id, old.content, {_SID.format(r="old")}
    WHERE {_SEARCHABLE.format(r="old")} AND {_CJK_ROW.format(r="old")}
      AND {_INDEXED.format(r="old")};
  UPDATE search_state SET upto = {_NEWEST} WHERE upto > {_NEWEST};
END;
CREATE TRIGGER messages_search_au AFTER UPDATE OF content, role, kind, session_id ON messages
  WHEN {_INDEXED.format(r="old")} BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content, sid)
    SELECT 'delete', old.id, old.content, {_SID.format(r="old")}
    WHERE {_SEARCHABLE.format(r="old")};
  INSERT INTO messages_fts_tri(messages_fts_tri, rowid, content, sid)
    SELECT 'delete', old.id, old.content, {_SID.format(r="old")}
    WHERE {_SEARCHABLE.format(r="old")} AND {_CJK_ROW.format(r="old")};
  INSERT INTO messages_fts(rowid, content, sid)
    SELECT new.id, new.content, {_SID.format(r="new")} WHERE {_SEARCHABLE.format(r="new")};
  INSERT INTO messages_fts_tri(rowid, content, sid)
    SELECT new.id, new.content, {_SID.format(r="new")}
    WHERE {_SEARCHABLE.format(r="new")} AND {_CJK_ROW.format(r="new")};
END;
"""

BATCH_ROWS = 200  # messages per indexing transaction: a few milliseconds of the writer at most


def pending(conn: sqlite3.Connection) -> int:
    """How many message ids lie above the watermark (at least as many as messages waiting)."""
    upto, newest = conn.execute(f"SELECT upto, {_NEWEST} FROM search_state").fetchone()
    return max(0, int(newest) - int(upto))


def index_batch(conn: sqlite3.Connection, limit: int = BATCH_ROWS) -> int:
    """Index the next messages above the watermark, up to `limit` ids, inside the caller's write
    transaction (BEGIN IMMEDIATE: two writers never index the same rows); returns how many ids it
    covered."""
    upto, newest = conn.execute(f"SELECT upto, {_NEWEST} FROM search_state").fetchone()
    end = min(int(newest), int(upto) + limit)
    if end <= upto:
        return 0
    for table, view in (
        ("messages_fts", "messages_search"),
        ("messages_fts_tri", "messages_search_cjk"),
    ):
        conn.execute(
            f"INSERT INTO {table}(rowid, content, sid) SELECT id, content, sid FROM {view}"
            " WHERE id > ? AND id <= ?",
            (upto, end),
        )
    conn.execute("UPDATE search_state SET upto = ?", (end,))
    return end - int(upto)


def catch_up(conn: sqlite3.Connection, limit: int = BATCH_ROWS) -> int:
    """Index everything waiting, one short transaction per batch, on a connection of its own (a
    search about to run); returns how many ids it covered."""
    done = 0
    while pending(conn):
        conn.execute("BEGIN IMMEDIATE")
        try:
            covered = index_batch(conn, limit)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        if not covered:
            break
        done += covered
    return done


def index_before_search(reader: sqlite3.Connection, path: Path) -> None:
    """Before a search on `reader` (a read-only connection): index what is still waiting, on a
    short-lived writer of the caller's thread, so the search finds every message stored before it
    began (the one the user sent a minute ago in their previous session too)."""
    try:
        if not pending(reader):
            return
    except sqlite3.OperationalError:  # a database from before batched indexing: nothing waits
        return
    writer = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        catch_up(writer)
    except sqlite3.Error as exc:  # the lock held past the timeout, a full disk: search the index
        log.warning("session_search: the newest messages could not be indexed first (%s)", exc)
    finally:
        writer.close()


def rebuild(conn: sqlite3.Connection) -> None:
    """Index every message from scratch (rows loaded past the store, e.g. by a bench) and set the
    watermark."""
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    conn.execute("INSERT INTO messages_fts_tri(messages_fts_tri) VALUES ('rebuild')")
    conn.execute(f"UPDATE search_state SET upto = {_NEWEST}")
