"""`gateway users forget` while that person's turn is running: the turn ends quietly, whichever
comes first.

The model is held open (a slow fake model over real HTTP) while the CLI forgets the person from its
own connection to the database, the way an operator would run it beside the daemon. Either the turn
finishes first (its answer is not stored, not sent, no error), or the daemon notices the erasure
first and stops it. No one sees "something went wrong", and no row, usage record or profile of the
forgotten person is left behind.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.cli import users
from gateway.cli.main import build_parser
from gateway.config.settings import load_config
from gateway.errors import ToolError
from gateway.llm.types import ChatMessage, LLMReply, TextSink, ToolDef, Usage
from gateway.ops.access_watch import AccessWatch
from gateway.ops.wiring import Gateway
from tests.delivery import TELEGRAM_CONFIG, PreviewAdapter, StreamingLLM, gateway_on, write_home
from tests.fakeclock import FakeClock
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config


class HeldLLM(FakeLLM):
    """The fake model, except that the request after `hold()` waits until `release()`."""

    def __init__(self) -> None:
        super().__init__()
        self._hold = False
        self.arrived = asyncio.Event()
        self._released = asyncio.Event()

    def hold(self) -> None:
        self._hold = True
        self.arrived.clear()
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    async def _step(self, request: web.Request, body: dict[str, Any], wire: str) -> tuple[Any, Any]:
        if self._hold:
            self._hold = False
            self.arrived.set()
            await self._released.wait()
        return await super()._step(request, body, wire)


@pytest.fixture
async def held_llm() -> AsyncIterator[HeldLLM]:
    fake = HeldLLM()
    await fake.start()
    yield fake
    fake.release()
    await fake.stop()


@asynccontextmanager
async def gateway(
    home: Path, llm: FakeLLM
) -> AsyncIterator[tuple[Gateway, RecordingAdapter, AccessWatch]]:
    write_config(
        home,
        base_url=llm.base_url,
        extra="web:\n  enabled: false\ntelegram:\n  token: t\n  allowed_users: ['1', '2']\n",
    )
    tg = RecordingAdapter("telegram")
    gw = gateway_for(home, [tg])
    # The daemon's watch, polled by hand here so the test
    # decides whether it notices before the turn ends.
    watch = AccessWatch(
        store=gw.store, outbox=gw.outbox, sessions=gw.sessions, memory=gw.memory, clock=gw.clock
    )
    try:
        yield gw, tg, watch
    finally:
        await gw.outbox.wait_background()
        await gw.sessions.cancel_all()
        await gw.llm.close()
        gw.store.close()


def forget(home: Path, who: str) -> None:
    """`gateway users forget WHO --yes`, in-process but on
    its own connection to state.db, as from a terminal."""
    out = io.StringIO()
    args = build_parser().parse_args(["--home", str(home), "users", "forget", who, "--yes"])
    assert users.run(args, load_config(home, env={}), stdin=io.StringIO(), out=out) == 0, (
        out.getvalue()
    )


async def say(gw: Gateway, tg: RecordingAdapter, text: str, user: str) -> None:
    before = len(tg.sent)
    await gw.sessions.submit(inbound(text, platform="telegram", chat_id=user, user_id=user))
    await tg.wait_for(before + 1)
    await gw.sessions.wait_idle()


def left_of(gw: Gateway, user: str) -> dict[str, int]:
    """What the database still holds of a Telegram user (chat id = user id in a DM), and rows
    pointing at deleted sessions."""
    counts = {
        "inbound": ("SELECT COUNT(*) FROM inbound WHERE user_id = ?", (user,)),
        "outbound": ("SELECT COUNT(*) FROM outbound WHERE chat_id = ?", (user,)),
        "sessions": ("SELECT COUNT(*) FROM sessions WHERE user_id = ?", (user,)),
        "messages": (
            (
                "SELECT COUNT(*) FROM messages WHERE user_id = ? "
                "OR session_id NOT IN (SELECT id FROM sessions)"
            ),
            (user,),
        ),
        "usage": (
            "SELECT COUNT(*) FROM llm_calls WHERE session_id NOT IN (SELECT id FROM sessions)",
            (),
        ),
        "previews": ("SELECT COUNT(*) FROM previews WHERE chat_id = ?", (user,)),
    }
    out = {}
    for name, (sql, args) in counts.items():
        row = gw.store.one(sql, args)
        out[name] = int(row[0]) if row else -1
    return out


NOTHING = {"inbound": 0, "outbound": 0, "sessions": 0, "messages": 0, "usage": 0, "previews": 0}


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("gateway")
    ]


async def test_a_turn_that_ends_after_its_person_was_forgotten_stores_and_sends_nothing(
    home: Path, held_llm: HeldLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with gateway(home, held_llm) as (gw, tg, watch):
        await say(gw, tg, "hello, I'm one", "1")
        await say(gw, tg, "hello, I'm two", "2")
        person = gw.people.find("telegram:1")
        assert person is not None
        sent_before = len(tg.sent)

        held_llm.hold()
        await gw.sessions.submit(
            inbound("remember that I like green tea", platform="telegram", chat_id="1", user_id="1")
        )
        await asyncio.wait_for(held_llm.arrived.wait(), 10)
        forget(home, "telegram:1")  # while the model is still answering
        # The model goes on: it saves the fact to the person's profile (the file the CLI just
        # deleted), then answers.
        held_llm.script(
            ToolCall("memory", {"action": "add", "target": "user", "content": "Likes green tea"}),
            Reply("Noted: green tea."),
        )
        held_llm.release()
        await gw.sessions.wait_idle()

        assert tg.sent[sent_before:] == []  # no answer, and no "something went wrong"
        assert left_of(gw, "1") == NOTHING
        assert not any(
            "green tea" in str(r[0]) for r in gw.store.all("SELECT content FROM messages")
        )
        assert errors(caplog) == []
        assert any(
            r.getMessage().startswith("turn dropped platform=telegram turn=t")
            for r in caplog.records
        )

        # The daemon then notices the erasure: the profile the turn wrote after the CLI deleted it
        # goes for good.
        profile = gw.memory.profile(person.id)
        assert profile.entries() == ("Likes green tea",)
        assert watch.handle() == 1
        assert not profile.path.exists()
        with pytest.raises(ToolError, match="belongs to a person who was forgotten"):
            profile.add("Likes black tea")
        assert not profile.path.exists()

        # Everyone else is served as before.
        await say(gw, tg, "still there?", "2")
        assert tg.texts("2")[-1].startswith("echo: still there?")


async def test_the_daemon_stops_a_forgotten_persons_running_turn_quietly(
    home: Path, held_llm: HeldLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with gateway(home, held_llm) as (gw, tg, watch):
        await say(gw, tg, "hello, I'm one", "1")
        person = gw.people.find("telegram:1")
        assert person is not None
        held_llm.hold()
        await gw.sessions.submit(
            inbound("a long question", platform="telegram", chat_id="1", user_id="1")
        )
        await asyncio.wait_for(held_llm.arrived.wait(), 10)
        await gw.sessions.submit(
            inbound("and a second one", platform="telegram", chat_id="1", user_id="1")
        )
        await gw.outbox.wait_background()
        # the busy notice for the second message went out before the forget
        sent_before = len(tg.sent)
        assert tg.texts("1")[-1].startswith("Still working on your previous message")

        forget(home, "1")
        assert watch.handle() == 1  # the turn is cancelled; the queued message finds its row gone
        await gw.sessions.wait_idle()
        held_llm.release()

        assert tg.sent[sent_before:] == []
        assert left_of(gw, "1") == NOTHING
        assert errors(caplog) == []
        assert any(
            r.getMessage() == "access: telegram:1 forgotten; 1 running turn(s) stopped"
            for r in caplog.records
        )
        assert gw.people.find("telegram:1") is None
        # Writing again later is a new person, with nothing of the old one.
        await say(gw, tg, "hi again", "1")
        again = gw.people.find("telegram:1")
        assert again is not None and again.id != person.id  # ids are never reused
        assert gw.memory.profile(again.id).entries() == ()


async def test_in_a_shared_conversation_a_forgotten_persons_turn_leaves_nothing(
    home: Path, held_llm: HeldLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """A topic of a group is one session for everyone in it: it stays, and the turn of the person
    forgotten while it ran adds nothing to it, neither their words nor an answer to them."""
    caplog.set_level(logging.INFO)
    async with gateway(home, held_llm) as (gw, tg, _):
        topic: dict[str, Any] = {
            "platform": "telegram",
            "chat_type": "group",
            "chat_id": "-100",
            "thread_id": "7",
        }
        await gw.sessions.submit(inbound("two here, hello topic", user_id="2", **topic))
        await tg.wait_for(1)
        await gw.sessions.wait_idle()
        held_llm.hold()
        await gw.sessions.submit(
            inbound("one here: my passport number is X123", user_id="1", **topic)
        )
        await asyncio.wait_for(held_llm.arrived.wait(), 10)
        forget(home, "telegram:1")
        held_llm.release()
        await gw.sessions.wait_idle()

        assert tg.texts("-100") == ["echo: two here, hello topic [users=1]"]
        shared = gw.store.active_session("telegram:group:-100:7")
        assert shared is not None
        texts = [
            str(r[0])
            for r in gw.store.all("SELECT content FROM messages WHERE session_id = ?", (shared.id,))
        ]
        assert not any("X123" in t for t in texts) and len(texts) == 2  # two's turn only
        assert errors(caplog) == []


class ForgottenMidway(StreamingLLM):
    """Writes its answer piece by piece; after the second piece of its second answer, the operator
    runs `gateway users forget` for the person it is answering."""

    def __init__(self, clock: FakeClock, home: Path) -> None:
        super().__init__(clock, ["Your passport ", "number is ", "on page ", "two."], every=1.5)
        self.home = home
        self.answers = 0

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        self.answers += 1
        for i, piece in enumerate(self.pieces):
            if stream is not None:
                stream.text(piece)
            await self.clock.sleep(self.every)
            if self.answers == 2 and i == 1:
                forget(self.home, "telegram:u1")
        return LLMReply("".join(self.pieces), (), Usage(10, 2), self.model, self.provider)


async def test_the_live_preview_of_a_forgotten_persons_answer_comes_down(home: Path) -> None:
    write_home(home, TELEGRAM_CONFIG + "streaming:\n  mode: edit\n")
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    gw = gateway_on(clock, home, [tg], ForgottenMidway(clock, home))
    try:
        for text in ("hi", "where is my passport number?"):
            await clock.run(
                gw.sessions.submit(inbound(text, platform="telegram", chat_id="100", user_id="u1"))
            )
            await clock.run(gw.sessions.wait_idle())
        second = {p.platform_message_id for _, p in tg.shows[4:]} - {None}
        # the second answer was growing in its own message when the person was forgotten
        assert second == {"p2"}
        # it came down; nothing was sent, no error either
        assert tg.dropped == ["p2"] and tg.sent == []
        assert tg.view() == [("Your passport number is on page two.", ())]  # the first answer stays
        assert gw.store.all("SELECT * FROM previews") == []
        assert left_of(gw, "u1") == NOTHING
    finally:
        gw.store.close()
