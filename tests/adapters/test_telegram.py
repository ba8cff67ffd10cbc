"""The Telegram adapter end to end: real aiogram polling (or webhook) against the fake Bot API, the
whole gateway behind it and the fake LLM in front of the model; assertions are what a Telegram user
would see."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiogram.types import MessageEntity, User

from adapters.telegram.adapter import COMMANDS, TelegramAdapter, addressing
from gateway.config.settings import load_config
from gateway.errors import AdapterError, RateLimited, StoreError
from gateway.events import ChatRef, Inbound, OutboundMessage, SubmitOutcome, SubmitResult
from gateway.ops.daemon import Daemon
from gateway.ops.http_limits import serve as serve_http
from gateway.ops.wiring import Gateway, build_gateway, platform_adapters
from gateway.sessions.commands import START_TEXT
from tests.fakes.base import ConnectionReset, Delay
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import (
    BOT_ID,
    BOT_USERNAME,
    TOKEN,
    FakeTelegram,
    bad_request,
    make_update_entities,
    retry_after,
    server_error,
)
from tests.fakes.tg_markup import u16len
from tests.helpers import RecordingAdapter, inbound, write_config

ALICE, BOB, CAROL, STRANGER = 1001, 1002, 1003, 6666
GROUP, FORUM = -100500, -100700


ALLOWED = (str(ALICE), str(BOB), "@carol_t")


def telegram_yaml(
    fake: FakeTelegram, extra: str = "", token: str = TOKEN, allowed: tuple[str, ...] = ALLOWED
) -> str:
    users = ", ".join(f"'{u}'" for u in allowed)
    return (
        f"web:\n  enabled: false\n"
        f"telegram:\n  token: '{token}'\n  api_server: {fake.base_url}\n  polling_timeout: 1\n"
        f"  allowed_users: [{users}]\n{extra}"
    )


class VirtualTime:
    """Virtual time for the gateway's own waits: short ones (rate-limit windows, retry_after,
    backoff) pass at once and move the clock; long ones (background rounds every 30 s or more) never
    finish during a test."""

    SHORT = 10.0

    def __init__(self) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds > self.SHORT:
            await asyncio.Event().wait()
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)


@dataclass
class Running:
    daemon: Daemon
    adapter: TelegramAdapter
    time: VirtualTime

    @property
    def gw(self) -> Gateway:
        return self.daemon.gw

    def inbound_texts(self) -> list[str]:
        return [r["text"] for r in self.gw.store.all("SELECT text FROM inbound ORDER BY id")]


@asynccontextmanager
async def running(
    home: Path,
    llm: FakeLLM,
    tg: FakeTelegram,
    extra: str = "",
    *,
    typing_interval: float = 4.0,
    via_config: bool = False,
    time_: VirtualTime | None = None,
) -> AsyncIterator[Running]:
    write_config(home, provider="anthropic", base_url=llm.base_url, extra=telegram_yaml(tg, extra))
    config = load_config(home, env={})
    assert config.telegram is not None
    virtual = time_ or VirtualTime()
    # Telegram and the gateway share the virtual clock (previews are paced on it)
    tg.clock = virtual.monotonic
    if via_config:
        adapters: list[Any] = platform_adapters(config, monotonic=virtual.monotonic)
    else:
        adapters = [
            TelegramAdapter(
                config.telegram,
                typing_interval=typing_interval,
                submit_retry_delays=(),
                clock=virtual.monotonic,
                serve=serve_http,
            )
        ]
    adapter = next(a for a in adapters if isinstance(a, TelegramAdapter))
    gw = build_gateway(
        config,
        env={},
        adapters=adapters,
        probe_ollama=False,
        sleep=virtual.sleep,
        monotonic=virtual.monotonic,
    )
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    try:
        yield Running(daemon, adapter, virtual)
    finally:
        await daemon.stop()


def me() -> User:
    return User(id=BOT_ID, is_bot=True, first_name="Gateway Test Bot", username=BOT_USERNAME)


def entities(text: str) -> list[MessageEntity]:
    return [MessageEntity(**e) for e in make_update_entities(text)]


# ------------------------------------------------------------------------------------------ DMs
async def test_dm_round_trip_through_the_gateway(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram, via_config=True) as run:
        fake_telegram.inject_message(ALICE, "hello **there**")
        sent = await fake_telegram.wait_for_sent(ALICE)
        # rendered: plain text + a bold entity, no parse_mode
        assert sent.text == "echo: hello there [users=1]"
        assert (
            sent.entities == ({"type": "bold", "offset": 12, "length": 5},)
            and sent.parse_mode is None
        )
        assert sent.reply_to_message_id is None  # no quoting in a private chat
        fake_telegram.inject_message(ALICE, "again")
        second = await fake_telegram.wait_for_sent(ALICE, count=2)
        assert second.text == "echo: again [users=2]"
        names = fake_telegram.names()
        assert names[:3] == ["getme", "setmycommands", "deletewebhook"]
        delete = fake_telegram.calls_to("deletewebhook")[0].body
        # pending updates are never dropped
        assert delete.get("drop_pending_updates") in (False, None)
        assert "sendchataction" in names
        rows = run.gw.store.all(
            "SELECT user_id, user_name, chat_type, status FROM inbound ORDER BY id"
        )
        assert [tuple(r) for r in rows] == [(str(ALICE), "Alice", "dm", "answered")] * 2


async def test_aiogram_keeps_nothing_per_chat(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """aiogram's FSM storage is a dict that gains an entry for every chat and user it sees and
    never loses one; the gateway uses no FSM states, so a bot with many chats must not pay it."""
    async with running(home, fake_llm, fake_telegram) as run:
        for user in (ALICE, BOB):
            fake_telegram.inject_message(user, "hello")
            await fake_telegram.wait_for_sent(user)
        dispatcher = run.adapter._dp
        assert dispatcher is not None
        fsm = getattr(dispatcher, "fsm", None)
        assert fsm is None or not getattr(fsm.storage, "storage", None)


async def test_start_greets_a_known_user_and_pairs_a_stranger(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram) as run:
        fake_telegram.inject_message(ALICE, "/start")
        greeting = await fake_telegram.wait_for_sent(ALICE)
        assert greeting.text == START_TEXT
        fake_telegram.inject_message(
            STRANGER, "/start", user_id=STRANGER, username="mallory", first_name="Mal"
        )
        pairing = await fake_telegram.wait_for_sent(STRANGER)
        assert (
            pairing.text.startswith("I don't know you yet")
            and "gateway pairing approve" in pairing.text
        )
        assert fake_llm.anthropic_requests() == [] and run.inbound_texts() == ["/start"]


async def test_allowed_by_handle(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram):
        fake_telegram.inject_message(
            CAROL, "hi, it's me", user_id=CAROL, username="Carol_T", first_name="Carol"
        )
        assert (await fake_telegram.wait_for_sent(CAROL)).text == "echo: hi, it's me [users=1]"


async def test_set_my_commands_payload(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram):
        body = (await fake_telegram.wait_for_call("setmycommands")).body
        assert [c["command"] for c in body["commands"]] == [
            "new",
            "reset",
            "status",
            "usage",
            "stop",
            "retry",
            "undo",
            "jobs",
            "voice",
            "model",
            "link",
            "help",
        ]
        assert [c["description"] for c in body["commands"]] == [text for _, text in COMMANDS]
        assert "scope" not in body  # default scope: every chat


# ---------------------------------------------------------------------------------------- groups
async def test_group_mention_gating_and_quoting(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram) as run:
        fake_telegram.inject_message(GROUP, "just chatting among humans", chat_type="supergroup")
        mid = fake_telegram.inject_message(
            GROUP, "@gw_test_bot, what's up?", chat_type="supergroup", last_name="Smith"
        )
        mention_msg = fake_telegram.injected[mid]["message"]["message_id"]
        reply = await fake_telegram.wait_for_sent(GROUP)
        # updates are handled in order, so the unmentioned one was already dropped: one turn, one
        # stored row
        assert run.inbound_texts() == ["what's up?"]
        # display name in the user message
        assert reply.text == "echo: [Alice Smith] what's up? [users=1]"
        assert reply.reply_to_message_id == mention_msg  # quotes the triggering message
        fake_telegram.inject_message(
            GROUP, "tell me more", chat_type="supergroup", reply_to_message=reply.message_id
        )
        second = await fake_telegram.wait_for_sent(GROUP, count=2)
        assert second.text == "echo: [Alice] tell me more [users=2]"
        assert len(fake_llm.anthropic_requests()) == 2


async def test_group_without_require_mention_answers_everything(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram, "  require_mention: false\n"):
        fake_telegram.inject_message(GROUP, "anyone there?", chat_type="group")
        assert (
            await fake_telegram.wait_for_sent(GROUP)
        ).text == "echo: [Alice] anyone there? [users=1]"


async def test_command_for_another_bot_is_ignored(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram) as run:
        fake_telegram.inject_message(GROUP, "/status@other_bot", chat_type="supergroup")
        fake_telegram.inject_message(ALICE, "/help@other_bot")
        fake_telegram.inject_message(GROUP, "/status@gw_test_bot", chat_type="supergroup")
        await fake_telegram.wait_for_sent(GROUP)
        await run.gw.sessions.wait_idle()
        # ours, with our @name stripped; the other two never stored
        assert run.inbound_texts() == ["/status"]
        assert fake_telegram.sent_messages(ALICE) == []


async def test_forum_topics_are_separate_sessions(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram) as run:
        for thread, text in ((11, "one"), (22, "two"), (11, "three")):
            fake_telegram.inject_message(
                FORUM,
                f"@gw_test_bot {text}",
                chat_type="supergroup",
                is_topic=True,
                message_thread_id=thread,
                user_id=BOB if text == "three" else ALICE,
                first_name="Bob" if text == "three" else "Alice",
            )
        await fake_telegram.wait_for_sent(FORUM, count=3)
        by_thread = {(m.message_thread_id, m.text) for m in fake_telegram.sent_messages(FORUM)}
        # a topic is shared by its members: Bob's message continues topic 11's session
        assert by_thread == {
            (11, "echo: [Alice] one [users=1]"),
            (22, "echo: [Alice] two [users=1]"),
            (11, "echo: [Bob] three [users=2]"),
        }
        keys = {r["key"] for r in run.gw.store.all("SELECT key FROM sessions")}
        assert keys == {f"telegram:group:{FORUM}:11", f"telegram:group:{FORUM}:22"}


# --------------------------------------------------------------------------------- outbound weather
async def test_long_reply_is_split_into_valid_chunks(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    paragraphs = [
        f"Paragraph {i} 🙂 has **bold words** and `code` in it. " + "filler text " * 40
        for i in range(20)
    ]
    fake_llm.script(Reply("\n\n".join(paragraphs)))
    async with running(home, fake_llm, fake_telegram):
        fake_telegram.inject_message(ALICE, "write a lot")
        await fake_telegram.wait_until(
            lambda: "Paragraph 19" in "".join(fake_telegram.sent_texts(ALICE))
        )
        sent = fake_telegram.sent_messages(ALICE)
        assert len(sent) >= 3
        for message in sent:
            assert 0 < u16len(message.text) <= 4096
            assert all(e["offset"] + e["length"] <= u16len(message.text) for e in message.entities)
            assert any(e["type"] == "bold" for e in message.entities)
        joined = "\n".join(fake_telegram.sent_texts(ALICE))
        positions = [joined.index(f"Paragraph {i} ") for i in range(20)]
        assert positions == sorted(positions) and all(
            joined.count(f"Paragraph {i} ") == 1 for i in range(20)
        )


async def test_entity_parse_error_resends_plain(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    fake_llm.script(Reply("a **bold** claim"))
    fake_telegram.fail("sendMessage", bad_request())
    async with running(home, fake_llm, fake_telegram):
        fake_telegram.inject_message(ALICE, "hi")
        sent = await fake_telegram.wait_for_sent(ALICE)
        attempts = fake_telegram.calls_to("sendmessage")
        assert (
            len(attempts) == 2
            and attempts[0].body.get("entities")
            and not attempts[1].body.get("entities")
        )
        assert sent.text == "a bold claim" and sent.entities == ()


async def test_rate_limit_then_success(home: Path, fake_llm: FakeLLM) -> None:
    virtual = VirtualTime()
    tg = FakeTelegram(clock=virtual.monotonic)  # Telegram and the gateway share the virtual clock
    await tg.start()
    try:
        tg.fail("sendMessage", retry_after(3))
        async with running(home, fake_llm, tg, time_=virtual):
            tg.inject_message(ALICE, "hi")
            sent = await tg.wait_for_sent(ALICE)
            assert sent.text == "echo: hi [users=1]"
            # waited retry_after, not a moment less
            assert 3.0 in virtual.sleeps and tg.flood_violations == []
            assert len(tg.calls_to("sendmessage")) == 2
    finally:
        await tg.stop()


async def test_server_errors_and_resets_are_retried(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    fake_telegram.fail("sendMessage", server_error(502), ConnectionReset())
    async with running(home, fake_llm, fake_telegram):
        fake_telegram.inject_message(ALICE, "hi")
        assert (await fake_telegram.wait_for_sent(ALICE)).text == "echo: hi [users=1]"
        assert len(fake_telegram.calls_to("sendmessage")) == 3


async def test_blocked_user_is_logged_once_and_not_retried(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="adapters.telegram.adapter")
    async with running(home, fake_llm, fake_telegram) as run:
        fake_telegram.block_chat(ALICE)
        fake_telegram.inject_message(ALICE, "one")
        fake_telegram.inject_message(ALICE, "two")
        await fake_telegram.wait_for_call("sendmessage", count=2)
        await run.gw.sessions.wait_idle()
        # one attempt per reply, no retry loop
        assert len(fake_telegram.calls_to("sendmessage")) == 2
        statuses = [
            r["status"] for r in run.gw.store.all("SELECT status FROM outbound ORDER BY id")
        ]
        assert statuses == ["failed", "failed"]
        ours = [
            r
            for r in caplog.records
            if r.name == "adapters.telegram.adapter" and "cannot write" in r.getMessage()
        ]
        assert len(ours) == 1


async def test_typing_refreshed_while_the_turn_runs_and_stopped_after(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    fake_llm.script(Delay(0.5, Reply("done")))
    async with running(home, fake_llm, fake_telegram, typing_interval=0.02) as run:
        fake_telegram.inject_message(
            FORUM, "@gw_test_bot think", chat_type="supergroup", is_topic=True, message_thread_id=7
        )
        await fake_telegram.wait_for_sent(FORUM)
        await run.gw.sessions.wait_idle()
        assert run.adapter.typing_active == 0
        names = fake_telegram.names()
        actions = [c for c in fake_telegram.calls if c.name == "sendchataction"]
        assert len(actions) >= 3
        assert all(
            c.body["action"] == "typing" and c.body["message_thread_id"] == 7 for c in actions
        )
        assert names.index("sendmessage") > max(
            i for i, n in enumerate(names) if n == "sendchataction"
        )


# ------------------------------------------------------------------------------- inbound delivery
async def test_redelivered_update_is_answered_once(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram) as run:
        uid = fake_telegram.inject_message(ALICE, "once")
        fake_telegram.inject_update(fake_telegram.injected[uid])  # the same update_id again
        await fake_telegram.wait_for_sent(ALICE)
        # and once more after it was answered
        fake_telegram.inject_update(fake_telegram.injected[uid])
        fake_telegram.inject_message(ALICE, "after")
        await fake_telegram.wait_for_sent(ALICE, count=2)
        await run.gw.sessions.wait_idle()
        assert fake_telegram.sent_texts(ALICE) == ["echo: once [users=1]", "echo: after [users=2]"]
        assert len(fake_llm.anthropic_requests()) == 2


@asynccontextmanager
async def adapter_on_a_shared_clock(
    home: Path, llm: FakeLLM, tg: FakeTelegram, now: list[float]
) -> AsyncIterator[TelegramAdapter]:
    """The adapter alone (no gateway), started against the fake; both read the clock `now[0]`."""
    tg.clock = lambda: now[0]
    write_config(home, provider="anthropic", base_url=llm.base_url, extra=telegram_yaml(tg))
    config = load_config(home, env={})
    assert config.telegram is not None
    adapter = TelegramAdapter(
        config.telegram, typing_interval=0.01, submit_retry_delays=(), clock=lambda: now[0]
    )

    async def accept(message: Inbound) -> SubmitResult:
        return SubmitResult(SubmitOutcome.ACCEPTED)

    await adapter.start(accept)
    try:
        yield adapter
    finally:
        await adapter.stop()


def flood_checks(adapter: TelegramAdapter) -> list[str]:
    """Each chat the adapter checks for a flood wait
    from now on, in order (before every request)."""
    pacing = adapter._outbound.pacing
    asked: list[str] = []
    check = pacing.flood_left

    def flood_left(chat_id: str) -> float:
        asked.append(chat_id)
        return check(chat_id)

    pacing.flood_left = flood_left  # type: ignore[method-assign]
    return asked


async def typing_settled(adapter: TelegramAdapter, tg: FakeTelegram) -> None:
    """No typing request is in flight: what the typing loop decided has reached the fake."""
    await tg.wait_until(lambda: not adapter._outbound._typing_requests)


async def test_a_typing_429_holds_the_chats_sends_until_the_flood_wait_is_over(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Telegram's flood wait covers the chat, whichever method's 429 announced it."""
    now = [1000.0]
    fake_telegram.fail("sendchataction", retry_after(30))
    chat = ChatRef("telegram", "dm", str(ALICE))
    reply = OutboundMessage(chat, "hello", "hello")
    async with adapter_on_a_shared_clock(home, fake_llm, fake_telegram, now) as adapter:
        async with adapter.typing(chat):
            await fake_telegram.wait_until(
                lambda: len(fake_telegram.calls_to("sendchataction")) == 1
            )
            # the 429's answer reaches the adapter a moment after the fake recorded the call (later
            # on a busy machine)
            await fake_telegram.wait_until(
                lambda: adapter._outbound.pacing.flood_left(str(ALICE)) > 0,
                30,
                lambda: "the adapter never heard the typing 429",
            )
            await typing_settled(adapter, fake_telegram)  # it sits the wait out, sending nothing
            with pytest.raises(RateLimited) as refused:
                await adapter.send(reply)
        assert 29.0 < refused.value.retry_after <= 30.0
        assert fake_telegram.calls_to("sendmessage") == []
        assert len(fake_telegram.calls_to("sendchataction")) == 1
        now[0] += 30.5
        assert await adapter.send(reply)
        assert fake_telegram.sent_texts(ALICE) == ["hello"]
        assert fake_telegram.flood_violations == []


async def test_a_send_429_holds_typing_in_that_chat_too(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    fake_telegram.fail("sendmessage", retry_after(30))
    chat = ChatRef("telegram", "dm", str(ALICE))
    async with adapter_on_a_shared_clock(home, fake_llm, fake_telegram, [1000.0]) as adapter:
        with pytest.raises(RateLimited):
            await adapter.send(OutboundMessage(chat, "hello", "hello"))
        asked = flood_checks(adapter)
        async with adapter.typing(chat):
            # the user writes again inside the 30 s wait: the next turn "types"
            # it looked, inside the wait
            await fake_telegram.wait_until(lambda: str(ALICE) in asked)
        await typing_settled(adapter, fake_telegram)
        assert (
            fake_telegram.calls_to("sendchataction") == [] and fake_telegram.flood_violations == []
        )


async def test_offset_is_not_advanced_before_the_update_is_stored(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    write_config(
        home, provider="anthropic", base_url=fake_llm.base_url, extra=telegram_yaml(fake_telegram)
    )
    config = load_config(home, env={})
    assert config.telegram is not None
    received = asyncio.Event()

    async def never_stores(message: Inbound) -> SubmitResult:
        # the process "dies" between receive and store
        received.set()
        await asyncio.Event().wait()
        return SubmitResult(SubmitOutcome.ACCEPTED)

    first = TelegramAdapter(config.telegram)
    await first.start(never_stores)
    uid = fake_telegram.inject_message(ALICE, "do not lose me")
    await asyncio.wait_for(received.wait(), 5)
    await first.stop()
    offsets = [int(c.body.get("offset") or 0) for c in fake_telegram.calls_to("getupdates")]
    assert max(offsets) <= uid  # never confirmed to Telegram
    async with running(home, fake_llm, fake_telegram):  # the next run gets the same update again
        sent = await fake_telegram.wait_for_sent(ALICE)
        assert sent.text == "echo: do not lose me [users=1]"
        confirm = await fake_telegram.wait_for_call(
            lambda c: c.name == "getupdates" and int(c.body.get("offset") or 0) > uid
        )
        assert int(confirm.body["offset"]) == uid + 1


async def test_store_failure_keeps_the_update_and_retries(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    write_config(
        home, provider="anthropic", base_url=fake_llm.base_url, extra=telegram_yaml(fake_telegram)
    )
    config = load_config(home, env={})
    assert config.telegram is not None
    adapter = TelegramAdapter(config.telegram, submit_retry_delays=(0.0,))
    gw = build_gateway(config, env={}, adapters=[adapter], probe_ollama=False)
    attempts: list[str] = []

    async def flaky(message: Inbound) -> SubmitResult:
        attempts.append(message.text)
        if len(attempts) == 1:
            raise StoreError("cannot store inbound message: disk I/O error")
        return await gw.sessions.submit(message)

    await adapter.start(flaky)
    try:
        uid = fake_telegram.inject_message(ALICE, "keep me")
        assert (await fake_telegram.wait_for_sent(ALICE)).text == "echo: keep me [users=1]"
        assert attempts == ["keep me", "keep me"]
        confirm = await fake_telegram.wait_for_call(
            lambda c: c.name == "getupdates" and int(c.body.get("offset") or 0) > uid
        )
        assert int(confirm.body["offset"]) == uid + 1
    finally:
        await gw.sessions.wait_idle()
        await adapter.stop()
        await gw.llm.close()
        gw.store.close()


async def test_message_during_shutdown_is_left_for_the_next_run(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapters.telegram.adapter")
    async with running(home, fake_llm, fake_telegram) as run:
        run.gw.sessions.stop_accepting()  # what Daemon.stop does first, while adapters still run
        uid = fake_telegram.inject_message(ALICE, "late message")
        await fake_telegram.wait_until(
            lambda: any("stays with Telegram" in r.getMessage() for r in caplog.records)
        )
    assert max(int(c.body.get("offset") or 0) for c in fake_telegram.calls_to("getupdates")) <= uid
    async with running(home, fake_llm, fake_telegram):
        assert (await fake_telegram.wait_for_sent(ALICE)).text == "echo: late message [users=1]"


async def test_edits_and_other_bots_are_ignored_by_default(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram) as run:
        mid = fake_telegram.inject_message(ALICE, "first")
        await fake_telegram.wait_for_sent(ALICE)
        message_id = fake_telegram.injected[mid]["message"]["message_id"]
        fake_telegram.inject_message(ALICE, "first, edited", edited=True, message_id=message_id)
        fake_telegram.inject_message(
            GROUP,
            "@gw_test_bot beep",
            chat_type="supergroup",
            from_bot=True,
            user_id=777,
            username="some_bot",
        )
        fake_telegram.inject_update(
            {
                "message": {
                    "message_id": 99,
                    "date": int(time.time()),
                    "chat": {"id": GROUP, "type": "supergroup", "title": "G"},
                    "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
                    "new_chat_members": [{"id": BOB, "is_bot": False, "first_name": "Bob"}],
                }
            }
        )
        fake_telegram.inject_message(ALICE, "second")
        await fake_telegram.wait_for_sent(ALICE, count=2)
        assert run.inbound_texts() == ["first", "second"]
        assert fake_telegram.sent_messages(GROUP) == []


async def test_edits_answered_when_configured(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram, "  answer_edited: true\n") as run:
        mid = fake_telegram.inject_message(ALICE, "frist")
        await fake_telegram.wait_for_sent(ALICE)
        message_id = fake_telegram.injected[mid]["message"]["message_id"]
        fake_telegram.inject_message(ALICE, "first", edited=True, message_id=message_id)
        assert (await fake_telegram.wait_for_sent(ALICE, count=2)).text == "echo: first [users=2]"
        assert run.inbound_texts() == ["frist", "first"]


async def test_channel_posts_answered_when_configured(home: Path, fake_llm: FakeLLM) -> None:
    channel = -100900
    tg = FakeTelegram()
    await tg.start()
    try:
        write_config(
            home,
            provider="anthropic",
            base_url=fake_llm.base_url,
            extra=telegram_yaml(tg, "  answer_channel_posts: true\n", allowed=(str(channel),)),
        )
        config = load_config(home, env={})
        assert config.telegram is not None
        daemon = Daemon(
            build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
            install_signals=False,
        )
        await daemon.start()
        try:
            chat = {"id": channel, "type": "channel", "title": "News"}
            for i, text in enumerate(("morning post", "@gw_test_bot summarize this"), start=1):
                tg.inject_update(
                    {
                        "channel_post": {
                            "message_id": i,
                            "date": int(time.time()),
                            "chat": chat,
                            "sender_chat": chat,
                            "text": text,
                            "entities": make_update_entities(text),
                        }
                    }
                )
            sent = await tg.wait_for_sent(channel)
            # the unmentioned post was dropped
            assert sent.text == "echo: [News] summarize this [users=1]"
        finally:
            await daemon.stop()
    finally:
        await tg.stop()


# ---------------------------------------------------------------------------------------- webhook
async def test_webhook_checks_the_secret_and_stores_before_200(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    extra = (
        "  mode: webhook\n  webhook_url: https://bot.example.test/tg\n  secret_token: s3cret\n"
        "  listen_port: 0\n  path: /tg\n"
    )
    async with running(home, fake_llm, fake_telegram, extra) as run:
        hook = (await fake_telegram.wait_for_call("setwebhook")).body
        assert hook["url"] == "https://bot.example.test/tg" and hook["secret_token"] == "s3cret"
        assert not hook.get("drop_pending_updates")
        url = f"http://127.0.0.1:{run.adapter.webhook_port}/tg"
        update = {
            "update_id": 5000,
            "message": {
                "message_id": 1,
                "date": int(time.time()),
                "text": "via webhook",
                "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
                "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
            },
        }
        async with aiohttp.ClientSession() as http:
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}):
                async with http.post(url, json=update, headers=headers) as resp:
                    assert resp.status == 401
            assert run.inbound_texts() == []
            async with http.post(
                url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "s3cret"}
            ) as resp:
                assert resp.status == 200
                assert run.inbound_texts() == ["via webhook"]  # stored before Telegram got its 200
        sent = await fake_telegram.wait_for_sent(ALICE)
        assert sent.text == "echo: via webhook [users=1]"
        assert (
            fake_telegram.calls_to("getupdates") == []
            and fake_telegram.calls_to("deletewebhook") == []
        )


async def test_webhook_during_shutdown_answers_503_so_telegram_resends(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    extra = "  mode: webhook\n  webhook_url: https://bot.example.test/tg\n  listen_port: 0\n"
    async with running(home, fake_llm, fake_telegram, extra) as run:
        secret = (await fake_telegram.wait_for_call("setwebhook")).body["secret_token"]
        assert len(secret) >= 32  # no secret configured: a random one is set and checked
        run.gw.sessions.stop_accepting()
        update = {
            "update_id": 6000,
            "message": {
                "message_id": 1,
                "date": int(time.time()),
                "text": "too late",
                "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
                "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
            },
        }
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{run.adapter.webhook_port}/telegram/webhook"
            async with http.post(
                url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": secret}
            ) as resp:
                assert resp.status == 503
        assert run.inbound_texts() == []


# ---------------------------------------------------------------------------------------- startup
async def test_bad_token_is_a_clear_error_and_other_adapters_keep_running(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra=telegram_yaml(fake_telegram, token="4242:not-the-right-token"),
    )
    config = load_config(home, env={})
    assert config.telegram is not None
    with pytest.raises(AdapterError) as err:
        await TelegramAdapter(config.telegram).start(lambda m: None)  # type: ignore[arg-type,return-value]
    assert str(err.value) == "telegram: token rejected (401) — check TELEGRAM_BOT_TOKEN"

    cli = RecordingAdapter("cli")
    daemon = Daemon(
        build_gateway(
            config, env={}, adapters=[*platform_adapters(config), cli], probe_ollama=False
        ),
        install_signals=False,
    )
    await daemon.start()
    try:
        logged = [r for r in caplog.records if "token rejected (401)" in r.getMessage()]
        assert logged and logged[0].exc_info is None  # a sentence, not a stack trace
        await cli.submit(inbound("still here?"))
        await cli.wait_for(1)
        assert cli.texts() == ["echo: still here? [users=1]"]
    finally:
        await daemon.stop()


# ------------------------------------------------------------------------------- pure translation
@pytest.mark.parametrize(
    ("text", "expected", "mentioned", "command", "other"),
    [
        ("@gw_test_bot hello", "hello", True, False, False),
        ("@GW_Test_Bot: hello", "hello", True, False, False),
        ("🙂 hey @gw_test_bot what now", "🙂 hey what now", True, False, False),
        ("ask @someone_else please", "ask @someone_else please", False, False, False),
        ("/new@gw_test_bot", "/new", False, True, False),
        ("/new", "/new", False, True, False),
        ("/new@other_bot", "/new@other_bot", False, False, True),
        ("see /new later", "see /new later", False, False, False),
    ],
)
def test_addressing(text: str, expected: str, mentioned: bool, command: bool, other: bool) -> None:
    said = addressing(text, entities(text), me())
    assert (said.text, said.mentioned, said.command, said.for_other_bot) == (
        expected,
        mentioned,
        command,
        other,
    )


async def test_webhook_garbage_gets_401_or_400_never_500(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    extra = (
        "  mode: webhook\n  webhook_url: https://bot.example.test/tg\n  secret_token: s3cret\n"
        "  listen_port: 0\n  path: /tg\n"
    )
    async with running(home, fake_llm, fake_telegram, extra) as run:
        await fake_telegram.wait_for_call("setwebhook")
        answers = []
        # not even UTF-8
        for head, body in (
            (b"X-Telegram-Bot-Api-Secret-Token: \xff\xfe\r\n", b"{}"),
            (b"X-Telegram-Bot-Api-Secret-Token: s3cret\r\n", b"{not json"),
            (b"X-Telegram-Bot-Api-Secret-Token: s3cret\r\n", b"\xff\xfe"),
            (b"X-Telegram-Bot-Api-Secret-Token: s3cret\r\n", b'{"update_id": "x"}'),
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", run.adapter.webhook_port)
            writer.write(
                b"POST /tg HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: "
                b"application/json\r\n"
                + head
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            answers.append((await asyncio.wait_for(reader.read(), 10))[:12])
            writer.close()
        assert answers == [b"HTTP/1.1 401", b"HTTP/1.1 400", b"HTTP/1.1 400", b"HTTP/1.1 400"]
        assert run.inbound_texts() == []
