"""Context compression: a small `model.context_window` against the fake LLM, through the real
gateway graph.

What must hold: the memory flush sees the dropped part first, the middle becomes one stored summary,
the first exchange and the recent turns stay, the prompt is rebuilt once with reason `compression`
(and picks up what the flush saved), the turn carries on, and the user sees nothing but their
answers.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.ops.wiring import Gateway
from gateway.sessions.compression import SUMMARY_HEADER, SUMMARY_SYSTEM, Cut, plan_cut, transcript
from gateway.store.rows import COMPRESSED, MessageRow
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config

FILLER = (
    "We talked it through at length, comparing options, costs and timing before settling anything. "
    * 4
)
SUMMARY = "The user is planning a move to Lisbon; they compared neighbourhoods and budgets."
MAINTENANCE = "[Automatic maintenance, not from the user]"
CAT_FACT = "The user's cat is called Miso."
KEY = "cli:dm:c1"


def write(home: Path, fake: FakeLLM, window: int = 6000) -> None:
    path = write_config(
        home,
        base_url=fake.base_url,
        extra=textwrap.dedent("""\
        session_reset:
          mode: none
        memory:
          flush_min_messages: 2
        agent:
          compress_at: 0.5
          keep_recent: 4
        schedule:
          enabled: false  # the small window is measured against the other tools' specs
        """),
    )
    path.write_text(
        path.read_text().replace(
            "  timeout_s: 10\n", f"  timeout_s: 10\n  context_window: {window}\n"
        )
    )


def system_text(body: dict[str, Any]) -> str:
    return "".join(b["text"] for b in body["system"])


def texts(message: dict[str, Any]) -> list[str]:
    return [b.get("text") or b.get("content") or "" for b in message["content"]]


def last_text(body: dict[str, Any]) -> str:
    return "\n".join(texts(body["messages"][-1]))


def kind_of(body: dict[str, Any]) -> str:
    if system_text(body) == SUMMARY_SYSTEM:
        return "summary"
    if any(MAINTENANCE in t for m in body["messages"] for t in texts(m)):
        return "flush"
    return "turn"


def responder(summary: Any = None, flush: Any = None) -> Any:
    """One scripted step per request: the summarizer gets SUMMARY, the flush saves the cat, a turn
    that asks to look something up calls session_search, everything else gets the fake's echo."""

    def step(body: dict[str, Any]) -> Any:
        kind = kind_of(body)
        last = last_text(body)
        if kind == "summary":
            return summary or Reply(SUMMARY)
        if kind == "flush" and MAINTENANCE in last:
            return flush or ToolCall(
                "memory", {"action": "add", "target": "user", "content": CAT_FACT}
            )
        if (
            kind == "turn"
            and last.startswith("Turn 2")
            and body["messages"][-1]["content"][-1]["type"] == "text"
        ):
            return ToolCall("session_search", {"query": "lisbon"})
        return None

    return step


class Chat:
    def __init__(self, home: Path, fake: FakeLLM) -> None:
        self.home = home
        self.fake = fake
        self.adapter = RecordingAdapter("cli")
        self.clock: Callable[[], datetime] = lambda: datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
        self.gw: Gateway = gateway_for(home, [self.adapter], clock=self.clock)

    async def say(self, text: str) -> None:
        await self.gw.sessions.submit(inbound(text, received_at=self.clock()))
        await self.gw.sessions.wait_idle()

    async def restart(self) -> None:
        await self.close()
        self.gw = gateway_for(self.home, [self.adapter], clock=self.clock)

    async def close(self) -> None:
        await self.gw.llm.close()
        self.gw.store.close()

    def session(self) -> Any:
        row = self.gw.store.active_session(KEY)
        assert row is not None
        return row

    def rows(self, *, active: bool | None = None) -> list[Any]:
        where = "" if active is None else (" AND active = 1" if active else " AND active != 1")
        return self.gw.store.all(
            f"SELECT * FROM messages WHERE session_id = ?{where} ORDER BY id", (self.session().id,)
        )

    def bodies(self) -> list[tuple[str, dict[str, Any]]]:
        return [(kind_of(b), b) for b in self.fake.anthropic_requests()]


def turn_text(n: int) -> str:
    extra = " By the way: my cat is called Miso." if n == 2 else ""
    return f"Turn {n}: {FILLER}{extra}"


async def talk_until_compressed(chat: Chat, limit: int = 12, **kw: Any) -> int:
    chat.fake.script(*[responder(**kw)] * 100)
    for n in range(1, limit + 1):
        await chat.say(turn_text(n))
        if any(kind == "summary" for kind, _ in chat.bodies()):
            return n
    raise AssertionError("no compression happened")


@pytest.fixture
async def chat(home: Path, fake_llm: FakeLLM) -> Any:
    write(home, fake_llm)
    c = Chat(home, fake_llm)
    yield c
    await c.close()


async def test_long_history_is_compressed_and_the_turn_continues(chat: Chat) -> None:
    n = await talk_until_compressed(chat)
    assert n >= 4
    before = chat.bodies()
    first_summary = next(i for i, (k, _) in enumerate(before) if k == "summary")
    kinds = [k for k, _ in before[first_summary:]]
    # The summary, then the flush (a tool call and its follow-up), then the user's turn.
    assert kinds == ["summary", "flush", "flush", "turn"]
    old_prompt = system_text(before[0][1])
    summary_body, flush_body, turn_body = (
        before[first_summary][1],
        before[first_summary + 1][1],
        before[-1][1],
    )

    # The flush request reuses the session's prompt
    # bytes and tool list, and carries the live memory.
    assert system_text(flush_body) == old_prompt
    assert [t["name"] for t in flush_body["tools"]] == [t["name"] for t in before[0][1]["tools"]]
    assert "Their profile as it is now:\n<user>\n(empty)\n</user>" in last_text(flush_body)
    # The summarizer saw the dropped turns only: not the first exchange, not the kept tail.
    summary_input = last_text(summary_body)
    assert "Turn 2:" in summary_input and "Miso" in summary_input
    assert "Turn 1:" not in summary_input and f"Turn {n - 1}:" not in summary_input
    assert 'assistant called session_search({"query": "lisbon"})' in summary_input
    assert "tool result: " in summary_input
    dropped = [k for k in range(2, n) if f"Turn {k}:" in summary_input]
    kept = [k for k in range(2, n) if k not in dropped]
    # one contiguous middle, something kept
    assert dropped == list(range(2, 2 + len(dropped))) and kept

    row = chat.session()
    assert (row.compressions, row.prompt_rebuild_reason, row.prompt_rebuilds) == (
        1,
        "compression",
        1,
    )
    new_prompt = row.system_prompt
    assert CAT_FACT not in old_prompt and CAT_FACT in new_prompt  # the memory snapshot was reloaded
    assert system_text(turn_body) == new_prompt

    # The turn request: first exchange, the summary, the last turns kept whole, the new message.
    msgs = turn_body["messages"]
    assert texts(msgs[0])[0].startswith("Turn 1:") and texts(msgs[1])[0].startswith("echo: Turn 1:")
    assert texts(msgs[2])[0].startswith("[Summary of ") and texts(msgs[2])[0].endswith(
        "]\n" + SUMMARY
    )
    user_turns = [
        t.split(":")[0]
        for m in msgs
        if m["role"] == "user"
        for t in texts(m)
        if t.startswith("Turn")
    ]
    assert user_turns == ["Turn 1", *[f"Turn {k}" for k in kept], f"Turn {n}"]

    # The user saw one answer per message and nothing of the flush or the summary.
    assert chat.adapter.texts() == [
        f"echo: {turn_text(i)} [users={_users(chat, i)}]" for i in range(1, n + 1)
    ]


def _users(chat: Chat, i: int) -> int:
    return next(
        int(t.rsplit("users=", 1)[1].rstrip("]"))
        for t in chat.adapter.texts()
        if t.startswith(f"echo: Turn {i}:")
    )


async def test_rows_after_compression(chat: Chat) -> None:
    n = await talk_until_compressed(chat)
    active = chat.rows(active=True)
    inactive = chat.rows(active=False)
    assert [r["kind"] for r in active].count("summary") == 1
    summary = next(r for r in active if r["kind"] == "summary")
    tail_originals = {(r["role"], r["content"]) for r in active if r["kind"] == "chat"}
    dropped = [r for r in inactive if (r["role"], r["content"]) not in tail_originals]
    assert (
        summary["role"] == "user"
        and summary["content"] == SUMMARY_HEADER.format(n=len(dropped)) + SUMMARY
    )
    # Order by id is the conversation: head, summary, the kept turns, this turn.
    starts = [
        r["content"].split(":")[0] if r["kind"] == "chat" else "summary"
        for r in active
        if r["role"] == "user"
    ]
    assert starts[:2] == ["Turn 1", "summary"] and starts[-1] == f"Turn {n}"
    assert [int(s.split()[1]) for s in starts[2:]] == list(range(n - len(starts) + 3, n + 1))
    # Nothing deleted: every original is still there, out of the context: the dropped ones marked
    # compressed (session_search still finds them), the tail's originals inactive (their copies are
    # in the context).
    assert {r["content"] for r in inactive if r["role"] == "user"} >= {turn_text(2), turn_text(3)}
    assert {r["active"] for r in dropped} == {COMPRESSED}
    assert all(r["active"] == 0 for r in inactive if r not in dropped)
    # Tool call and result stayed together (Turn 2 searched and was dropped as a whole).
    dropped_tools = [r for r in inactive if r["role"] == "tool"]
    assert len(dropped_tools) == 1 and not any(r["role"] == "tool" for r in active)
    kinds = [r["purpose"] for r in chat.gw.store.all("SELECT purpose FROM llm_calls ORDER BY id")]
    assert kinds.count("compression") == 1 and kinds.count("flush") == 2


async def test_later_turns_and_a_restart_reuse_the_rebuilt_prompt(chat: Chat) -> None:
    n = await talk_until_compressed(chat)
    rebuilt = chat.session().system_prompt
    await chat.say(turn_text(n + 1))
    await chat.restart()
    await chat.say(turn_text(n + 2))
    after = chat.bodies()[-2:]
    assert [k for k, _ in after] == ["turn", "turn"]
    assert [system_text(b) for _, b in after] == [rebuilt, rebuilt]
    last = after[-1][1]["messages"]
    assert texts(last[2])[0].endswith(SUMMARY)  # the summary is still in place after the restart
    assert chat.session().prompt_rebuilds == 1


async def test_the_flush_may_only_use_memory_and_skill_tools(chat: Chat) -> None:
    await talk_until_compressed(chat, flush=ToolCall("session_search", {"query": "cat"}))
    flushes = [b for k, b in chat.bodies() if k == "flush"]
    assert len(flushes) == 2
    [result] = [
        blk for blk in flushes[1]["messages"][-1]["content"] if blk["type"] == "tool_result"
    ]
    assert (
        result["is_error"] is True
        and "Tool not available right now: 'session_search'" in result["content"]
    )
    assert CAT_FACT not in chat.session().system_prompt
    assert not (chat.home / "memories" / "people").exists()


async def test_a_failed_summary_leaves_the_history_alone_and_the_turn_is_answered(
    home: Path, fake_llm: FakeLLM
) -> None:
    write(home, fake_llm)
    chat = Chat(home, fake_llm)
    try:
        fake_llm.script(*[responder(summary=Fault(500))] * 100)
        for n in range(1, 11):
            await chat.say(turn_text(n))
        row = chat.session()
        assert (
            row.compressions == 0 and row.prompt_rebuilds == 0 and row.prompt_rebuild_reason is None
        )
        assert not chat.rows(active=False)
        kinds = [k for k, _ in chat.bodies()]
        # no flush for a compression that failed
        assert kinds.count("summary") >= 1 and "flush" not in kinds
        # + the tool result's turn
        assert chat.adapter.texts()[-1] == f"echo: {turn_text(10)} [users=11]"
    finally:
        await chat.close()


async def test_no_compression_below_the_threshold(home: Path, fake_llm: FakeLLM) -> None:
    write(home, fake_llm, window=200_000)
    chat = Chat(home, fake_llm)
    try:
        for n in range(1, 6):
            await chat.say(turn_text(n))
        assert [k for k, _ in chat.bodies()] == ["turn"] * 5
        assert chat.session().compressions == 0
    finally:
        await chat.close()


# ---- where to cut --------------------------------------------------------------------------------


def row(
    i: int,
    role: str,
    content: str = "",
    *,
    calls: list[str] | None = None,
    call_id: str | None = None,
    kind: str = "chat",
) -> MessageRow:
    tool_calls = (
        json.dumps([{"id": c, "name": "memory", "arguments": "{}"} for c in calls])
        if calls
        else None
    )
    return MessageRow(
        id=i,
        session_id=1,
        role=role,
        content=content or f"{role} {i}",
        tool_calls=tool_calls,
        tool_call_id=call_id,
        user_id=None,
        user_name=None,
        platform_message_id=None,
        created_at="2026-05-04T10:00:00+00:00",
        active=1,
        kind=kind,
        turn_id=None,
    )


def exchange(start: int, n: int) -> list[MessageRow]:
    out = []
    for k in range(n):
        out += [row(start + 2 * k, "user"), row(start + 2 * k + 1, "assistant")]
    return out


def ids(cut: Cut) -> tuple[list[int], list[int], list[int]]:
    return [r.id for r in cut.head], [r.id for r in cut.dropped], [r.id for r in cut.tail]


def test_cut_keeps_the_first_exchange_and_the_last_messages() -> None:
    cut = plan_cut(exchange(1, 6), keep_recent=4)
    assert cut is not None and ids(cut) == ([1, 2], [3, 4, 5, 6, 7, 8], [9, 10, 11, 12])


def test_cut_keeps_more_rather_than_split_a_tool_call_from_its_result() -> None:
    rows = [
        *exchange(1, 2),
        row(5, "user"),
        row(6, "assistant", calls=["a", "b"]),
        row(7, "tool", call_id="a"),
        row(8, "tool", call_id="b"),
        row(9, "assistant"),
        *exchange(10, 1),
    ]
    cut = plan_cut(rows, keep_recent=4)  # the 4th message from the end is a tool result
    assert cut is not None and ids(cut) == ([1, 2], [3, 4], [5, 6, 7, 8, 9, 10, 11])


def test_cut_keeps_fewer_when_the_only_turn_boundary_is_later() -> None:
    rows = [
        *exchange(1, 1),
        row(3, "user"),
        *[
            r
            for k in range(5)
            for r in (
                row(4 + 2 * k, "assistant", calls=[f"c{k}"]),
                row(5 + 2 * k, "tool", call_id=f"c{k}"),
            )
        ],
        row(14, "assistant"),
        *exchange(15, 1),
    ]
    cut = plan_cut(rows, keep_recent=6)
    assert cut is not None and ids(cut) == ([1, 2], list(range(3, 15)), [15, 16])


def test_over_the_limit_something_goes_even_if_fewer_than_keep_recent_stay() -> None:
    # head + 4 = everything; a request that overflows just fails
    cut = plan_cut(exchange(1, 3), keep_recent=4)
    assert cut is not None and ids(cut) == ([1, 2], [3, 4], [5, 6])


def test_nothing_to_cut() -> None:
    assert plan_cut([row(1, "user")], keep_recent=2) is None  # no exchange yet
    assert plan_cut(exchange(1, 2), keep_recent=2) is None  # the first exchange and one turn
    assert (
        plan_cut(
            [
                *exchange(1, 1),
                row(3, "user"),
                row(4, "assistant", calls=["x"]),
                row(5, "tool", call_id="x"),
                row(6, "assistant"),
            ],
            keep_recent=2,
        )
        is None
    )


def test_a_second_cut_folds_the_earlier_summary_in() -> None:
    rows = [*exchange(1, 1), row(3, "user", "[Summary …] earlier", kind="summary"), *exchange(4, 4)]
    cut = plan_cut(rows, keep_recent=4)
    assert cut is not None and ids(cut) == ([1, 2], [3, 4, 5, 6, 7], [8, 9, 10, 11])
    assert transcript(cut.dropped).startswith(
        "(earlier summary) [Summary …] earlier\n\nuser: user 4"
    )
