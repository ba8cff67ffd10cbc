"""The decoded history kept between turns (Store.chat_history): after every kind of write it equals
what a fresh read of the rows gives, it never keeps what a failed transaction wrote, it notices
another connection's writes, and it stays within its byte budget."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.llm.types import WirePrefix
from gateway.store import history_cache
from gateway.store.database import Store
from gateway.store.history_cache import HistoryCache
from gateway.store.rows import chat_view

NOW = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


def fresh(store: Store, session_id: int) -> list[dict[str, Any]]:
    """What the rows say, read past the cache."""
    return [
        chat_view(r.role, r.content, r.tool_calls, r.tool_call_id)
        for r in store.history(session_id)
    ]


def new_session(store: Store, key: str = "cli:dm:c1") -> int:
    return store.create_session(
        key=key,
        platform="cli",
        chat_type="dm",
        chat_id=key.rsplit(":", 1)[-1],
        thread_id=None,
        user_id="u1",
        parent_id=None,
        model="m",
        provider="p",
        now=NOW,
    ).id


def exchange(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {n}", "user_id": "u1"},
        {"role": "assistant", "content": f"answer {n}"},
    ]


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def test_it_follows_every_write_to_the_history(store: Store) -> None:
    sid = new_session(store)
    assert store.chat_history(sid) == []
    store.add_messages(sid, exchange(1), now=NOW, turn_id="t1")
    # read once, now kept: the checks below run against the cache
    assert len(store.history_cache) == 1
    assert (
        store.chat_history(sid)
        == fresh(store, sid)
        == [{"role": "user", "content": "question 1"}, {"role": "assistant", "content": "answer 1"}]
    )

    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "memory", "arguments": "{}"}],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "saved", "is_error": False}
    store.complete_turn(
        sid, [exchange(2)[0], call, result, exchange(2)[1]], [], None, now=NOW, turn_id="t2"
    )
    assert store.chat_history(sid) == fresh(store, sid)
    assert store.chat_history(sid)[3]["tool_calls"] == call["tool_calls"]

    # not model input
    store.add_message(sid, "user", "a memory flush instruction", now=NOW, kind="flush")
    assert store.chat_history(sid) == fresh(store, sid) and len(store.chat_history(sid)) == 6

    store.add_messages(sid, exchange(3), now=NOW, turn_id="t3")
    rows = store.history(sid)
    store.compress_history(
        sid, dropped=[r.id for r in rows[2:6]], tail=rows[6:], summary="the gist", now=NOW
    )
    assert store.chat_history(sid) == fresh(store, sid)
    assert [m["content"] for m in store.chat_history(sid)] == [
        "question 1",
        "answer 1",
        "the gist",
        "question 3",
        "answer 3",
    ]

    store.deactivate_messages([r.id for r in store.history(sid)[-2:]])  # /undo
    assert [m["content"] for m in store.chat_history(sid)] == ["question 1", "answer 1", "the gist"]
    assert store.chat_history(sid) == fresh(store, sid)


def test_a_failed_turn_transaction_leaves_nothing_behind(store: Store) -> None:
    sid = new_session(store)
    store.add_messages(sid, exchange(1), now=NOW)
    before = store.chat_history(sid)
    with pytest.raises(KeyError):  # a reply chunk row without its fields: the whole turn rolls back
        store.complete_turn(sid, exchange(2), [{"turn_id": "t2"}], None, now=NOW, turn_id="t2")
    assert store.chat_history(sid) == before == fresh(store, sid)
    store.add_messages(sid, exchange(3), now=NOW)
    assert [m["content"] for m in store.chat_history(sid)] == [
        "question 1",
        "answer 1",
        "question 3",
        "answer 3",
    ]


def test_writes_from_another_connection_are_seen(tmp_path: Path) -> None:
    daemon, other = Store(tmp_path / "state.db"), Store(tmp_path / "state.db")
    try:
        sid = new_session(daemon)
        daemon.add_messages(sid, exchange(1), now=NOW)
        assert len(daemon.chat_history(sid)) == 2
        other.add_messages(sid, exchange(2), now=NOW)
        assert [m["content"] for m in daemon.chat_history(sid)] == [
            "question 1",
            "answer 1",
            "question 2",
            "answer 2",
        ]
        other.deactivate_messages([r.id for r in other.history(sid)])
        assert daemon.chat_history(sid) == []
    finally:
        daemon.close()
        other.close()


def test_a_restart_reads_the_rows(tmp_path: Path) -> None:
    first = Store(tmp_path / "state.db")
    sid = new_session(first)
    first.add_messages(sid, exchange(1), now=NOW)
    first.chat_history(sid)
    first.close()
    second = Store(tmp_path / "state.db")
    try:
        assert second.chat_history(sid) == fresh(second, sid) and len(second.chat_history(sid)) == 2
    finally:
        second.close()


def test_callers_get_copies(store: Store) -> None:
    sid = new_session(store)
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "memory", "arguments": "{}"}],
    }
    store.add_messages(
        sid, [*exchange(1), call, {"role": "tool", "tool_call_id": "c1", "content": "ok"}], now=NOW
    )
    store.chat_history(sid)
    got = store.chat_history(sid)
    got[0]["content"] = "changed by a client"
    got[2]["tool_calls"][0]["arguments"] = '{"changed": true}'
    got[2]["tool_calls"].append({"id": "c2", "name": "x", "arguments": "{}"})
    got.append({"role": "user", "content": "appended by a client"})
    assert store.chat_history(sid) == fresh(store, sid)


def test_an_ended_session_leaves_the_cache(store: Store) -> None:
    sid = new_session(store)
    store.add_messages(sid, exchange(1), now=NOW)
    store.chat_history(sid)
    assert len(store.history_cache) == 1
    store.end_session(sid, reason="command", now=NOW, flush_state=None)
    assert len(store.history_cache) == 0 and store.history_cache.bytes == 0


def test_bounded_by_bytes_least_recently_used_first() -> None:
    def history(n: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": "x" * 100} for _ in range(n)]

    long = history_cache.SHORT_MESSAGES  # long enough to take another session's place
    probe = HistoryCache()
    probe.put(1, history(long))
    one = probe.bytes
    cache = HistoryCache(budget_bytes=3 * one)
    for sid in (1, 2, 3):
        cache.put(sid, history(long))
    assert cache.get(1) is not None  # 1 is now the most recently used
    cache.put(4, history(long))
    assert cache.get(2) is None and all(cache.get(s) is not None for s in (1, 3, 4))
    cache.stage(3, history(5))
    cache.commit()  # 3 grows past the budget: the least recently used (1) goes
    assert cache.get(1) is None and cache.bytes <= cache.budget_bytes
    cache.put(
        5, history(4 * long)
    )  # bigger than the whole budget: not kept, nothing evicted for it
    assert cache.get(5) is None and len(cache) == 2


def test_short_histories_take_only_spare_room() -> None:
    """A short history is one cheap read away: it is kept while the cache holds less than the least
    budget, and never pushes a longer one out (10,000 sessions of 20 messages must not fill the
    cache's most: bench/memory.py)."""
    short = [{"role": "user", "content": "x" * 100}] * 10
    long = [{"role": "user", "content": "x" * 100}] * history_cache.SHORT_MESSAGES
    cache = HistoryCache(budget_bytes=3 * history_cache.DEFAULT_BUDGET_BYTES)
    sid = 0
    while len(cache) == sid:  # until one is turned away
        sid += 1
        cache.put(sid, short)
    shorts = len(cache)
    assert shorts > 1_000 and cache.bytes > history_cache.DEFAULT_BUDGET_BYTES - 10_000
    for extra in range(1, 50):
        cache.put(sid + extra, short)  # no room to spare: not kept, nobody evicted
    assert len(cache) == shorts and cache.get(1) is not None
    assert cache.get(sid + 1) is None and cache.bytes <= history_cache.DEFAULT_BUDGET_BYTES
    for n in range(1, 200):  # longer ones fill the rest of the budget
        cache.put(-n, long)
    assert cache.get(-199) is not None and cache.get(-1) is not None
    assert history_cache.DEFAULT_BUDGET_BYTES < cache.bytes <= cache.budget_bytes


def test_many_sessions_stay_within_the_budget(store: Store) -> None:
    store.history_cache = HistoryCache(budget_bytes=200_000)
    for n in range(2_000):
        sid = new_session(store, key=f"cli:dm:c{n}")
        store.add_messages(sid, exchange(n) * 5, now=NOW)
        store.chat_history(sid)
    assert store.history_cache.bytes <= 200_000 and 0 < len(store.history_cache) < 2_000


def test_large_tool_arguments_and_non_ascii_text_count_against_the_budget() -> None:
    """A memory or skill tool call can carry a long argument; the budget must see it, or 200 such
    sessions would hold ~20 MB while the cache believed it held 0.15 MB."""
    cache = HistoryCache(budget_bytes=1_000_000)
    for sid in range(200):
        cache.put(
            sid,
            [
                {"role": "user", "content": "save this"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": f"t{sid}", "name": "memory", "arguments": "x" * 100_000}],
                },
            ],
        )
    assert cache.bytes <= 1_000_000 and len(cache) <= 10
    wide = HistoryCache()
    wide.put(1, [{"role": "user", "content": "日本語" * 1000}])
    narrow = HistoryCache()
    narrow.put(1, [{"role": "user", "content": "abc" * 1000}])
    assert wide.bytes > 3 * (narrow.bytes - 200)


@pytest.mark.parametrize(
    ("messages", "text"),
    [(1, 40), (3, 0), (20, 5), (20, 92), (110, 92), (20, 2000), (200, 40), (2000, 92)],
)
def test_the_counted_bytes_are_at_least_what_python_allocates(messages: int, text: int) -> None:
    """The budget is a bound on real memory (the daemon's RSS goal rests on it): what the kept
    histories allocate, entries and order included, is no more than the bytes counted, and not far
    below them either (a count far above would waste the room)."""
    rows = [
        {"role": ("user", "assistant")[m % 2], "content": "x" * text + f" #{m}"}
        for m in range(messages)
    ]
    cache = HistoryCache(budget_bytes=10**10)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for sid in range(300):
            cache.put(sid, [dict(row) for row in rows])
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.6 * cache.bytes <= allocated <= cache.bytes


def test_the_kept_tool_calls_are_not_the_callers_list() -> None:
    calls = [{"id": "t1", "name": "memory", "arguments": "{}"}]
    cache = HistoryCache()
    cache.put(1, [{"role": "assistant", "content": "", "tool_calls": calls}])
    calls.clear()
    calls.append({"id": "changed"})
    got = cache.get(1)
    assert got is not None and got[0]["tool_calls"] == [
        {"id": "t1", "name": "memory", "arguments": "{}"}
    ]


def test_the_budget_follows_the_active_sessions(tmp_path: Path) -> None:
    """Room for every active session's history (its wire form too), between the least and the most:
    the most keeps 10,000 active sessions within the daemon's memory goal (bench/memory.py)."""
    store = Store(tmp_path / "state.db")
    assert store.history_cache.budget_bytes == history_cache.DEFAULT_BUDGET_BYTES
    ids = [new_session(store, key=f"cli:dm:c{n}") for n in range(150)]
    budget = store.history_cache.budget_bytes
    assert budget == 150 * history_cache.SESSION_BYTES > history_cache.DEFAULT_BUDGET_BYTES
    ids += [new_session(store, key=f"cli:dm:c{n}") for n in range(150, 400)]
    budget = store.history_cache.budget_bytes
    assert budget == history_cache.MAX_BUDGET_BYTES < 400 * history_cache.SESSION_BYTES
    for sid in ids[:350]:
        store.end_session(sid, reason="command", now=NOW, flush_state=None)
    assert store.history_cache.budget_bytes == history_cache.DEFAULT_BUDGET_BYTES  # 50 left
    store.close()
    reopened = Store(tmp_path / "state.db")  # counted again at open
    assert reopened.active_count == 50
    reopened.close()


def test_what_the_wires_keep_counts_against_the_budget(store: Store) -> None:
    sid = new_session(store)
    store.add_messages(sid, exchange(1) * 20, now=NOW)
    store.chat_history(sid)  # cached, without a memo yet
    before = store.history_cache.bytes
    view = store.history_view(sid)
    assert view is not None and view.memo is not None
    assert store.history_cache.bytes == before + history_cache.MEMO_BYTES  # the memo's own
    before = store.history_cache.bytes
    view.memo.keep("wire", WirePrefix(10, b"x" * 50_000))
    assert store.history_cache.bytes == before + 50_000
    store.history_cache.drop(sid)
    assert store.history_cache.bytes == 0
    view.memo.keep("wire", WirePrefix(12, b"x" * 60_000))  # a request still building: not counted
    assert store.history_cache.bytes == 0
