"""Session manager: keys, one turn at a time per session, sessions concurrent, write-ahead rows."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.events import ChatRef, SubmitOutcome
from gateway.llm.types import ChatMessage, LLMReply, TextSink, ToolDef, Usage
from gateway.sessions.keys import session_key
from tests.helpers import RecordingAdapter, gateway_for, inbound


class GatedLLM:
    """A contract fake: each call waits until the test opens the gate for that user text."""

    provider = "fake"
    model = "fake-1"
    context_window = 100_000

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []
        self.seen_history: list[list[str]] = []

    def gate(self, text: str) -> asyncio.Event:
        return self.gates.setdefault(text, asyncio.Event())

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        text = messages[-1]["content"]
        self.started.append(text)
        self.seen_history.append([m["content"] for m in messages])
        await self.gate(text).wait()
        return LLMReply(f"re: {text}", (), Usage(10, 2), self.model, self.provider)

    async def close(self) -> None:
        return None


def test_session_key_shapes() -> None:
    assert (
        session_key(ChatRef("telegram", "dm", "42"), "42", group_per_user=True) == "telegram:dm:42"
    )
    assert (
        session_key(ChatRef("telegram", "group", "-100"), "7", group_per_user=True)
        == "telegram:group:-100:7"
    )
    assert (
        session_key(ChatRef("telegram", "group", "-100"), "7", group_per_user=False)
        == "telegram:group:-100"
    )
    assert (
        session_key(ChatRef("slack", "channel", "C1", "171.5"), "U1", group_per_user=True)
        == "slack:channel:C1:171.5"
    )
    assert session_key(ChatRef("discord", "dm", ""), "99", group_per_user=True) == "discord:dm:99"


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    async def loop() -> None:
        while not predicate():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(loop(), timeout)


async def test_sessions_run_concurrently_while_one_session_stays_ordered(home: Path) -> None:
    llm = GatedLLM()
    web = RecordingAdapter("web")
    gw = gateway_for(home, [web], llm=llm)
    submit = gw.sessions.submit
    assert (
        await submit(inbound("a1", platform="web", chat_id="A"))
    ).outcome is SubmitOutcome.ACCEPTED
    await submit(inbound("a2", platform="web", chat_id="A"))
    await submit(inbound("b1", platform="web", chat_id="B"))
    await _until(lambda: set(llm.started) == {"a1", "b1"})
    assert "a2" not in llm.started  # a2 waits for a1 in the same session
    llm.gate("b1").set()  # B finishes while A is still blocked: sessions are independent
    await _until(lambda: web.texts("B") == ["re: b1"])
    assert web.texts("A") == [] or web.texts("A") == [
        "Still working on your previous message; I'll answer this one next."
    ]
    llm.gate("a1").set()
    await _until(lambda: "a2" in llm.started)
    llm.gate("a2").set()
    await gw.sessions.wait_idle()
    replies = [m.text for m in web.sent if m.chat.chat_id == "A" and m.kind.value == "reply"]
    assert replies == ["re: a1", "re: a2"]
    # the second turn saw the first exchange
    assert llm.seen_history[-1] == ["a1", "re: a1", "a2"]
    rows = gw.store.all("SELECT role, content FROM messages ORDER BY id")
    assert [(r[0], r[1]) for r in rows if r[1].startswith(("a", "re: a"))] == [
        ("user", "a1"),
        ("assistant", "re: a1"),
        ("user", "a2"),
        ("assistant", "re: a2"),
    ]
    assert {r[0] for r in gw.store.all("SELECT status FROM inbound")} == {"answered"}


async def test_redelivered_message_gets_no_second_answer(home: Path) -> None:
    llm = GatedLLM()
    llm.gate("hello").set()
    web = RecordingAdapter("web")
    gw = gateway_for(home, [web], llm=llm)
    msg = inbound("hello", platform="web", chat_id="A", message_id="same")
    assert (await gw.sessions.submit(msg)).outcome is SubmitOutcome.ACCEPTED
    assert (await gw.sessions.submit(msg)).outcome is SubmitOutcome.DUPLICATE
    await gw.sessions.wait_idle()
    assert web.texts() == ["re: hello"]


async def test_stored_inbound_without_answer_is_replayed_after_restart(home: Path) -> None:
    llm = GatedLLM()
    web = RecordingAdapter("web")
    gw = gateway_for(home, [web], llm=llm)
    await gw.sessions.submit(inbound("first", platform="web", chat_id="A"))
    await _until(lambda: llm.started == ["first"])
    await gw.sessions.cancel_all()  # the process "dies" mid-turn: the inbound row stays unfinished
    gw.store.close()
    llm2 = GatedLLM()
    llm2.gate("first").set()
    web2 = RecordingAdapter("web")
    gw2 = gateway_for(home, [web2], llm=llm2)
    resumed, expired = await gw2.sessions.replay()
    await gw2.sessions.wait_idle()
    assert (resumed, expired) == (1, 0)
    assert web2.texts() == ["re: first"]


async def test_llm_failure_gives_one_sentence_and_keeps_the_session(home: Path) -> None:
    from gateway.errors import LLMUnavailable

    class Down(GatedLLM):
        async def complete(self, **kw: Any) -> LLMReply:
            raise LLMUnavailable("fake: HTTP 529")

    web = RecordingAdapter("web")
    gw = gateway_for(home, [web], llm=Down())
    await gw.sessions.submit(inbound("hi", platform="web", chat_id="A"))
    await gw.sessions.wait_idle()
    assert web.texts() == [
        (
            "Sorry, I couldn't get an answer from the model just now (the model service is "
            "unavailable). Please try again in a moment."
        )
    ]
    assert gw.store.all("SELECT COUNT(*) FROM messages")[0][0] == 0  # nothing half-written stored
    assert gw.store.active_session("web:dm:A") is not None
