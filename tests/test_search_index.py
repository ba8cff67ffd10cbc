"""The session_search index is kept after the turn, in batches (gateway/store/search_index.py): a
turn's transaction writes no index entry; the writer's connection indexes a moment later, a search
first catches up, a start indexes what a killed daemon left; the index never holds a deleted or
changed message's old words."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.agent.tools.registry import ToolContext
from gateway.knowledge.search import SessionSearch
from gateway.store import connection
from gateway.store.database import Store
from gateway.store.search_index import pending
from tests.fakes.llm import FakeLLM
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config

NOW = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def _session(store: Store, key: str = "k", user: str = "a") -> int:
    return store.create_session(
        key=key,
        platform="telegram",
        chat_type="dm",
        chat_id=user,
        thread_id=None,
        user_id=user,
        parent_id=None,
        model=None,
        provider=None,
        now=NOW,
    ).id


def _matches(store: Store, word: str) -> list[int]:
    return [
        r[0]
        for r in store.conn.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid", (word,)
        )
    ]


def _sound(store: Store, *, caught_up: bool = True) -> None:
    """FTS5's own check: the index is well formed and (once caught up) holds exactly what the
    content holds, no entry missing, none extra, none stale."""
    for table in ("messages_fts", "messages_fts_tri"):
        store.conn.execute(
            f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', ?)", (int(caught_up),)
        )


def test_a_turns_transaction_writes_no_index_entry(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    sid = _session(store)
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    store.complete_turn(
        sid,
        [
            {"role": "user", "content": "walrus facts"},
            {"role": "assistant", "content": "Walruses sleep in water."},
        ],
        [],
        None,
        now=NOW,
        turn_id="t1",
    )
    store.conn.set_trace_callback(None)
    assert not [s for s in statements if "fts" in s]
    assert _matches(store, "walrus") == [] and pending(store.conn) == 2
    assert store.index_pending() == 2
    assert _matches(store, "walrus") == [1] and _matches(store, "walruses") == [
        2
    ]  # porter: both stems
    assert pending(store.conn) == 0
    _sound(store)
    store.close()


def test_a_batch_covers_many_turns_and_only_what_search_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "BATCH_ROWS", 3)
    store = Store(tmp_path / "state.db")
    sid = _session(store)
    ids = [
        store.add_message(sid, role, text, now=NOW, kind=kind)
        for role, text, kind in [
            ("user", "otter one", "chat"),
            ("tool", "otter tool output", "chat"),
            ("user", "otter flush", "flush"),
            ("assistant", "otter 東京の天気", "chat"),
            ("user", "otter five", "chat"),
        ]
    ]
    assert store.index_pending() == 5  # in batches of 3 ids
    assert _matches(store, "otter") == [ids[0], ids[3], ids[4]]  # no tool output, no flush turn
    assert [r[0] for r in store.conn.execute("SELECT rowid FROM messages_fts_tri")] == [ids[3]]
    _sound(store)
    store.close()


def test_changes_before_and_after_indexing_keep_the_index_sound(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    sid = _session(store)
    old = [store.add_message(sid, "user", f"heron {n}", now=NOW) for n in range(3)]
    store.index_pending()
    new = [store.add_message(sid, "user", f"ibis {n}", now=NOW) for n in range(3)]
    with store.tx() as conn:  # indexed rows and waiting rows, changed and deleted alike
        conn.execute(
            "UPDATE messages SET content = 'crane changed' WHERE id IN (?, ?)", (old[0], new[0])
        )
        conn.execute("DELETE FROM messages WHERE id IN (?, ?)", (old[1], new[1]))
    _sound(store, caught_up=False)
    store.index_pending()
    assert _matches(store, "crane") == [old[0], new[0]]
    assert _matches(store, "heron") == [old[2]] and _matches(store, "ibis") == [new[2]]
    _sound(store)
    store.close()


def test_ids_handed_out_again_after_the_newest_were_deleted_are_indexed(tmp_path: Path) -> None:
    """messages.id is a plain INTEGER PRIMARY KEY: SQLite gives the next row the highest id in use
    plus one. Had the watermark stayed above the deleted ids, the message that gets one of them
    again would never be found."""
    store = Store(tmp_path / "state.db")
    sid = _session(store)
    first = [store.add_message(sid, "user", f"secret {n}", now=NOW) for n in range(4)]
    store.index_pending()
    with store.tx() as conn:  # `gateway users forget`, say, erases the newest messages
        conn.execute("DELETE FROM messages WHERE id >= ?", (first[2],))
    again = store.add_message(sid, "user", "puffin arrives", now=NOW)
    assert again == first[2]  # the same id once more
    store.index_pending()
    assert _matches(store, "puffin") == [again]
    assert _matches(store, "secret") == first[:2]
    _sound(store)
    store.close()


def test_a_search_finds_a_message_stored_a_moment_ago(tmp_path: Path) -> None:
    """What a user expects: "what did I just say about the boat?" in a new session finds the last
    session's words, whether or not the background batch has run yet (the search indexes what is
    waiting first)."""
    store = Store(tmp_path / "state.db")
    earlier = _session(store, key="k1")
    store.add_message(earlier, "user", "the boat is moored at pier nine", now=NOW, user_id="a")
    current = _session(store, key="k2")
    assert pending(store.conn) == 1
    ctx = ToolContext(
        session_id=current,
        platform="telegram",
        chat_type="dm",
        user_id="a",
        home=tmp_path,
        db_path=tmp_path / "state.db",
        chat_id="a",
    )
    searcher = SessionSearch()
    try:
        hits = searcher.search_now(ctx, "boat")
        assert [(r.session_id, [h.snippet for h in r.hits]) for r in hits] == [
            (earlier, ["the «boat» is moored at pier nine"])
        ]
        assert pending(store.conn) == 0
        _sound(store)
    finally:
        searcher.close()
        store.close()


async def test_the_writer_indexes_a_moment_after_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "INDEX_DELAY_S", 0.01)
    store = Store(tmp_path / "state.db")
    sid = _session(store)
    store.add_message(sid, "user", "gannet", now=NOW)
    store.add_message(sid, "user", "gannet again", now=NOW)
    assert pending(store.conn) == 2  # nothing yet: the batch waits for more turns to join it
    deadline = asyncio.get_running_loop().time() + 30
    while pending(store.conn) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert _matches(store, "gannet") == [1, 2]
    store.close()


KILLED_WRITER = """
import os, sys
from datetime import UTC, datetime
from pathlib import Path
from gateway.store.database import Store
store = Store(Path(sys.argv[1]))
sid = store.create_session(key="k", platform="telegram", chat_type="dm", chat_id="a",
                           thread_id=None, user_id="a", parent_id=None, model=None, provider=None,
                           now=datetime.now(UTC)).id
store.complete_turn(sid, [{"role": "user", "content": "kittiwake colony"}], [], None,
                    now=datetime.now(UTC),
                    turn_id="t1")
os.kill(os.getpid(), 9)  # before the batch: no close, no cleanup
"""


async def test_what_a_killed_daemon_left_unindexed_is_indexed_at_the_next_start(
    home: Path, fake_llm: FakeLLM
) -> None:
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        KILLED_WRITER,
        str(home / "state.db"),
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert await writer.wait() == -9
    write_config(home, base_url=fake_llm.base_url)
    adapter = RecordingAdapter("cli")
    gw = gateway_for(home, [adapter])
    try:
        assert pending(gw.store.conn) == 0
        assert _matches(gw.store, "kittiwake") == [1]
        await gw.sessions.submit(inbound("hello", platform="cli", chat_id="c", user_id="c"))
        await adapter.wait_for(1)
        await gw.sessions.wait_idle()
    finally:
        await gw.llm.close()
        gw.store.close()
    again = gateway_for(
        home, [RecordingAdapter("cli")]
    )  # and a clean stop's leftovers at the next start
    try:
        assert pending(again.store.conn) == 0 and _matches(again.store, "hello") != []
        _sound(again.store)
    finally:
        await again.llm.close()
        again.store.close()


def test_a_forgotten_persons_words_leave_the_index(tmp_path: Path) -> None:
    """Indexed or still waiting, a deleted message's words are not in the index afterwards."""
    store = Store(tmp_path / "state.db")
    sid = _session(store)
    store.add_message(sid, "user", "my password is swordfish", now=NOW, user_id="a")
    store.index_pending()
    store.add_message(
        sid, "user", "and my pin is tarpon", now=NOW + timedelta(seconds=1), user_id="a"
    )
    with store.tx() as conn:
        conn.execute("DELETE FROM messages WHERE user_id = 'a'")
    store.index_pending()
    assert _matches(store, "swordfish") == [] and _matches(store, "tarpon") == []
    _sound(store)
    store.close()
