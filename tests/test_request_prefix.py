"""The prompt-cache contract under the kept wire form (History.memo, the wires' encoded_body): a
request built from a session's kept prefix and what follows is byte for byte the request built from
scratch, on every turn, across tool steps, pictures, a compression and a restart; and a turn's work
stops growing with its history."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.llm.anthropic_wire import AnthropicClient, PromptCache
from gateway.llm.http import encode_body
from gateway.llm.openai_wire import OpenAIClient
from gateway.llm.transport import WireSettings
from gateway.llm.types import ChatMessage, History
from gateway.store import history_cache
from gateway.store.database import Store
from gateway.store.transcript import session_history
from tests.fakes.llm import FakeLLM, Reply, ToolCall, ToolCalls
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config
from tests.lifecycle_support import FakeClock

NOW = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
SYSTEM = "You are the gateway's agent. " * 40


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


TOOLS = [Tool("memory", "Save durable facts"), Tool("session_search", "Search past conversations")]


def _clients() -> list[AnthropicClient | OpenAIClient]:
    common: dict[str, Any] = {
        "api_key": "k",
        "base_url": "http://127.0.0.1:9",
        "max_tokens": 1024,
        "timeout_s": 5,
        "max_retries": 0,
        "context_window": 200_000,
    }
    return [
        AnthropicClient(WireSettings(model="claude-test", **common)),
        AnthropicClient(
            WireSettings(model="claude-test", **common), cache=PromptCache(enabled=False)
        ),
        AnthropicClient(
            WireSettings(model="claude-test", vision=False, **common), cache=PromptCache(ttl="1h")
        ),
        OpenAIClient(WireSettings(model="gpt-test", **common)),
        OpenAIClient(WireSettings(model="gpt-test", vision=False, **common)),
    ]


def _turn(n: int) -> list[dict[str, Any]]:
    """A turn as the agent stores it; some with tool steps, odd text among them."""
    user = {
        "role": "user",
        "content": [f"question {n} ✓", "", "  ", "東京の天気 🌧", "x" * 3000][n % 5],
    }
    if n % 3:
        return [user, {"role": "assistant", "content": f"answer {n}"}]
    call = {
        "id": f"call_{n}",
        "name": "memory",
        "arguments": json.dumps({"action": "add", "content": f"fact {n}"}),
    }
    return [
        user,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": "saved", "is_error": n % 2 == 0},
        {"role": "assistant", "content": f"done {n}"},
    ]


def _same_bytes(clients: Sequence[AnthropicClient | OpenAIClient], convo: History) -> None:
    for client in clients:
        for stream in (False, True):
            kept = client.encoded_body(system=SYSTEM, messages=convo, tools=TOOLS, stream=stream)
            body = client.request_body(system=SYSTEM, messages=list(convo), tools=TOOLS)
            if stream:
                body = {**body, "stream": True}
                if isinstance(client, OpenAIClient):
                    body["stream_options"] = {"include_usage": True}
            assert kept == encode_body(body), (type(client).__name__, client.vision, stream)


def test_kept_prefix_gives_the_from_scratch_bytes_turn_after_turn_and_after_a_restart(
    tmp_path: Path,
) -> None:
    clients = _clients()
    store = Store(tmp_path / "state.db")
    sid = store.create_session(
        key="k",
        platform="cli",
        chat_type="dm",
        chat_id="c",
        thread_id=None,
        user_id="u",
        parent_id=None,
        model=None,
        provider=None,
        now=NOW,
    ).id
    store.add_messages(sid, _chat_messages(history_cache.MEMO_MESSAGES), now=NOW)  # kept from now
    grown = 0
    for n in range(24):
        if n == 12:  # a restart: nothing kept, everything read back from SQLite
            store.close()
            store = Store(tmp_path / "state.db")
        history = session_history(store, sid)
        assert history.memo is not None
        messages = _turn(n)
        convo = history.plus(messages[0])
        _same_bytes(clients, convo)
        for step in messages[1:]:  # the turn's later model calls see its own steps too
            convo.append(step)
            _same_bytes(clients, convo)
        store.complete_turn(sid, messages, [], None, now=NOW, turn_id=f"t{n}")
        grown = max(grown, max((len(p.data) for p in history.memo.prefixes.values()), default=0))
    assert (
        grown > 10_000
    )  # the prefix was kept and grew: the comparison above was not of two full builds
    store.close()


def test_a_history_the_turn_must_see_whole_is_not_kept(tmp_path: Path) -> None:
    """Pictures (their bytes come from the files each turn) and a tool call without its result
    (dropped from the request) send the history through the full build; the bytes are the same
    either way."""
    store = Store(tmp_path / "state.db")
    sid = store.create_session(
        key="k",
        platform="cli",
        chat_type="dm",
        chat_id="c",
        thread_id=None,
        user_id="u",
        parent_id=None,
        model=None,
        provider=None,
        now=NOW,
    ).id
    store.add_messages(
        sid,
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "lost", "name": "memory", "arguments": "{}"}],
            },
        ],
        now=NOW,
    )
    history = session_history(store, sid)
    assert history.memo is None and list(history) == [{"role": "user", "content": "hi"}]
    store.close()


def test_a_lone_surrogate_is_sent_as_before(tmp_path: Path) -> None:
    """orjson refuses it; the whole body then goes through the stdlib encoder, as it always did."""
    store = Store(tmp_path / "state.db")
    sid = store.create_session(
        key="k",
        platform="cli",
        chat_type="dm",
        chat_id="c",
        thread_id=None,
        user_id="u",
        parent_id=None,
        model=None,
        provider=None,
        now=NOW,
    ).id
    store.add_messages(
        sid, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], now=NOW
    )
    convo = session_history(store, sid).plus(
        {"role": "user", "content": "a \ud800 b"}
    )  # never stored: SQLite
    # refuses it (transcript.well_formed replaces it in a message); a tool's result may carry one
    client = _clients()[0]
    assert client.encoded_body(system=SYSTEM, messages=convo, tools=TOOLS) is None
    assert b"\\ud800" in encode_body(
        client.request_body(system=SYSTEM, messages=list(convo), tools=TOOLS)
    )
    store.close()


# ------------------------------------------------------ end to end, through the real HTTP transport
async def _conversation(
    home: Path, fake_llm: FakeLLM, *, kept: bool, monkeypatch: pytest.MonkeyPatch
) -> list[bytes]:
    """Nine turns (tool steps among them) with a restart after the fifth: the raw bodies the model
    received."""
    monkeypatch.setattr(history_cache, "MEMO_MESSAGES", 4)  # kept from the third turn on
    if not kept:
        monkeypatch.setattr(history_cache.HistoryCache, "view", lambda self, session_id: None)
    write_config(home, base_url=fake_llm.base_url)
    clock = FakeClock(NOW)
    before = len(fake_llm.anthropic_raw())
    for life in (range(5), range(5, 9)):
        adapter = RecordingAdapter("cli")
        gw = gateway_for(home, [adapter], clock=clock)
        try:
            for n in life:
                if n % 3 == 0:
                    fake_llm.script(
                        ToolCalls(
                            [
                                ToolCall(
                                    "memory",
                                    {"action": "add", "target": "memory", "content": f"fact {n}"},
                                    id=f"c{n}",
                                )
                            ]
                        ),
                        Reply(f"saved {n}"),
                    )
                await gw.sessions.submit(
                    inbound(f"message {n} 東京 🌧", message_id=f"m{n}", received_at=NOW)
                )
                await gw.sessions.wait_idle()
        finally:
            await gw.llm.close()
            gw.store.close()
    monkeypatch.undo()
    return fake_llm.anthropic_raw()[before:]


async def test_the_model_receives_the_same_bytes_with_and_without_the_kept_prefix(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    scratch = await _conversation(tmp_path / "a", fake_llm, kept=False, monkeypatch=monkeypatch)
    kept = await _conversation(tmp_path / "b", fake_llm, kept=True, monkeypatch=monkeypatch)
    assert len(kept) == len(scratch) == 12  # 9 turns, 3 of them with a tool step
    for n, (a, b) in enumerate(zip(scratch, kept, strict=True)):
        assert a == b, n


def _chat_messages(n: int) -> list[ChatMessage]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i} of an ordinary chat"}
        for i in range(n)
    ]


def test_a_turn_converts_only_what_is_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The work a request does on the stored history: with 500 messages kept, no more messages are
    converted to the wire than with 50."""
    from gateway.llm import anthropic_wire

    converted: list[int] = []
    original = anthropic_wire.anthropic_messages

    def counting(messages: Sequence[ChatMessage], *, vision: bool = True) -> list[dict[str, Any]]:
        converted.append(len(messages))
        return original(messages, vision=vision)

    monkeypatch.setattr(anthropic_wire, "anthropic_messages", counting)
    client = _clients()[0]
    per_turn = {}
    for size in (50, 500):
        store = Store(tmp_path / f"{size}.db")
        sid = store.create_session(
            key="k",
            platform="cli",
            chat_type="dm",
            chat_id="c",
            thread_id=None,
            user_id="u",
            parent_id=None,
            model=None,
            provider=None,
            now=NOW,
        ).id
        store.add_messages(sid, _chat_messages(size), now=NOW)
        for n in range(3):  # the first two requests fill the memo
            client.encoded_body(
                system=SYSTEM,
                messages=session_history(store, sid).plus({"role": "user", "content": f"new {n}"}),
                tools=TOOLS,
            )
            store.add_messages(
                sid,
                [{"role": "user", "content": f"new {n}"}, {"role": "assistant", "content": "ok"}],
                now=NOW,
            )
        converted.clear()
        client.encoded_body(
            system=SYSTEM,
            messages=session_history(store, sid).plus(
                {"role": "user", "content": "the measured turn"}
            ),
            tools=TOOLS,
        )
        per_turn[size] = sum(converted)
        store.close()
    assert per_turn[500] == per_turn[50] <= 8
