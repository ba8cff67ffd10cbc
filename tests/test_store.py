"""Store: migrations apply once on an empty and an
existing file; bad rows are errors, never 'no session'.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.errors import StoreError
from gateway.store.database import Store
from gateway.store.schema import MIGRATIONS

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _session(store: Store, key: str = "cli:dm:1") -> int:
    return store.create_session(
        key=key,
        platform="cli",
        chat_type="dm",
        chat_id="1",
        thread_id=None,
        user_id="u",
        parent_id=None,
        model="m",
        provider="p",
        now=NOW,
    ).id


def test_migrations_on_empty_file(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    assert store.applied == [name for name, _ in MIGRATIONS]
    mode = store.one("PRAGMA journal_mode")
    assert mode is not None and mode[0] == "wal"
    tables = {r[0] for r in store.all("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {
        "sessions",
        "messages",
        "messages_fts",
        "inbound",
        "outbound",
        "schema_migrations",
    } <= tables
    store.close()


def test_migrations_on_existing_file_apply_only_new_ones(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    sid = _session(store)
    store.add_message(sid, "user", "keep me", now=NOW)
    store.close()
    extra = ("9999_test_extra", "CREATE TABLE extra (id INTEGER PRIMARY KEY);")
    again = Store(path, migrations=[*MIGRATIONS, extra])
    assert again.applied == ["9999_test_extra"]
    assert [m.content for m in again.history(sid)] == ["keep me"]
    assert again.migrations_done()[-1] == "9999_test_extra"
    again.close()
    assert Store(path, migrations=[*MIGRATIONS, extra]).applied == []


def test_failed_migration_rolls_back_and_says_which(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store(path).close()
    broken = ("9998_broken", "CREATE TABLE half (id INTEGER);\nTHIS IS NOT SQL;")
    with pytest.raises(StoreError, match="migration 9998_broken failed"):
        Store(path, migrations=[*MIGRATIONS, broken])
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchone() is None
    assert (
        conn.execute(
            "SELECT COUNT(*) FROM schema_migrations WHERE name = '9998_broken'"
        ).fetchone()[0]
        == 0
    )


def test_one_active_session_per_key_and_end_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    sid = _session(store)
    with pytest.raises(StoreError, match=r"UNIQUE constraint failed: sessions\.key"):
        _session(store)
    assert store.end_session(sid, reason="idle", now=NOW, flush_state="pending") is True
    assert store.end_session(sid, reason="command", now=NOW, flush_state="pending") is False
    assert store.session(sid).end_reason == "idle"
    assert store.active_session("cli:dm:1") is None


def test_unreadable_row_is_an_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    with pytest.raises(StoreError, match="session 42 does not exist"):
        store.session(42)
    store.conn.execute("ALTER TABLE sessions RENAME COLUMN model TO model_old")
    _ = store.all("SELECT 1")
    store.conn.execute(
        "INSERT INTO sessions (key, platform, chat_type, chat_id, created_at) "
        "VALUES ('k', 'cli', 'dm', '1', '2026-01-01')"
    )
    with pytest.raises(StoreError, match="unreadable SessionRow"):
        store.active_session("k")


def test_inbound_dedupe_and_fts(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    kw = {
        "platform": "telegram",
        "chat_type": "dm",
        "chat_id": "7",
        "thread_id": None,
        "platform_message_id": "99",
        "user_id": "7",
        "user_name": None,
        "text": "hi",
        "payload": "{}",
        "received_at": NOW,
    }
    first = store.insert_inbound(**kw)  # type: ignore[arg-type]
    assert first is not None
    assert store.insert_inbound(**kw) is None  # type: ignore[arg-type]
    assert [r.id for r in store.unfinished_inbound()] == [first]
    sid = _session(store)
    store.add_message(sid, "user", "the quick brown fox, 東京の天気", now=NOW)
    store.index_pending()  # indexed after its transaction (tests/test_search_index.py)
    words = store.one("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'fox'")
    trigrams = store.one(
        "SELECT COUNT(*) FROM messages_fts_tri WHERE messages_fts_tri MATCH '東京の'"
    )
    assert words is not None and words[0] == 1
    assert trigrams is not None and trigrams[0] == 1


def test_two_processes_share_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    a, b = Store(path), Store(path)
    sid = _session(a)
    b.add_message(sid, "user", "from b", now=NOW)
    assert [m.content for m in a.history(sid)] == ["from b"]


def test_a_chats_next_chunk_is_found_without_walking_other_chats(tmp_path: Path) -> None:
    """The outbox asks for a chat's oldest unsent chunk twice per message; with a chunk in flight in
    each of many chats, the lookup must seek that chat, not walk every chat's unsent chunks."""
    store = Store(tmp_path / "state.db")
    rows = [
        {
            "turn_id": f"t{n}",
            "chunk_index": 0,
            "chunk_count": 1,
            "platform": "web",
            "chat_type": "dm",
            "chat_id": f"c{n % 200}",
            "thread_id": None,
            "kind": "reply",
            "text": "x",
            "plain": "x",
        }
        for n in range(400)
    ]
    store.insert_outbound(rows, now=NOW)
    plan = " ".join(
        r[3]
        for r in store.conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM outbound WHERE status = 'pending' AND platform = ?"
            " AND account = ? AND chat_id = ? ORDER BY id LIMIT 1",
            ("web", "default", "c7"),
        )
    )
    assert "outbound_pending_chat (platform=? AND account=? AND chat_id=?)" in plan
    found = store.next_pending_outbound("web", "default", "c7")
    assert found is not None and found.turn_id == "t7"
    assert [r.turn_id for r in store.pending_outbound()] == [f"t{n}" for n in range(400)]
    store.close()
