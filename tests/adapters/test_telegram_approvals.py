"""Approvals and questions on Telegram end to end: real aiogram polling against the fake Bot API
(inline keyboards, callback queries that must be answered with answerCallbackQuery), the whole
daemon behind it, a real MCP server whose `delete_file` is annotated destructive and records each
run in a file, and the fake LLM. Assertions are what each Telegram user saw (the buttons, their
answers, the edited message) and how often the tool really ran."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from adapters.telegram.adapter import TelegramAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.adapters.test_telegram import ALICE, BOB, GROUP, VirtualTime, telegram_yaml
from tests.approvals_support import DELETE, mcp_yaml, result_of, runs
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.telegram import FakeTelegram, SentMessage
from tests.helpers import write_config
from tests.lifecycle_support import FakeClock

APPROVAL_BUTTONS = ["Allow once", "Allow for this session", "Deny"]


@asynccontextmanager
async def daemon(
    home: Path,
    llm: FakeLLM,
    tg: FakeTelegram,
    folder: Path,
    clock: FakeClock | None = None,
    extra: str = "",
) -> AsyncIterator[Gateway]:
    """One life of the daemon, as `gateway run` builds it; stopped (drained) after."""
    write_config(home, base_url=llm.base_url, extra=telegram_yaml(tg, mcp_yaml(folder) + extra))
    config = load_config(home, env={})
    assert config.telegram is not None
    virtual = VirtualTime()
    tg.clock = virtual.monotonic
    adapter = TelegramAdapter(config.telegram, submit_retry_delays=(), clock=virtual.monotonic)
    gw = build_gateway(
        config,
        env={},
        adapters=[adapter],
        probe_ollama=False,
        clock=clock or FakeClock(),
        sleep=virtual.sleep,
        monotonic=virtual.monotonic,
    )
    running = Daemon(gw, install_signals=False)
    await running.start()
    try:
        yield gw
    finally:
        await running.stop()


async def request_in(tg: FakeTelegram, chat: int, count: int = 1) -> SentMessage:
    """The count-th message in the chat with buttons under it."""
    await tg.wait_until(lambda: len([m for m in tg.sent_messages(chat) if m.reply_markup]) >= count)
    return [m for m in tg.sent_messages(chat) if m.reply_markup][count - 1]


async def edited_away(tg: FakeTelegram, chat: int, message_id: int) -> SentMessage:
    """The request once its keyboard is gone (the edit that shows its outcome)."""
    await tg.wait_until(
        lambda: not tg.buttons(chat, message_id), describe=lambda: "the keyboard stayed"
    )
    return next(m for m in tg.sent_messages(chat) if m.message_id == message_id)


async def test_in_a_group_only_the_asker_can_allow_and_allow_once_runs_once(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    tg = fake_telegram
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/report.txt"}), Reply("Deleted the report."))
    async with daemon(home, fake_llm, tg, tmp_path) as gw:
        tg.inject_message(GROUP, "@gw_test_bot delete the report", chat_type="supergroup")
        request = await request_in(tg, GROUP)
        assert tg.buttons(GROUP, request.message_id) == APPROVAL_BUTTONS
        assert "mcp_fake_delete_file" in request.text and "/srv/report.txt" in request.text
        assert "(asked by Alice)" in request.text and "/approve" not in request.text
        assert any(e["type"] == "code" for e in request.entities)  # the argument as Telegram code

        bobs = tg.tap(
            GROUP, request.message_id, "Allow once", user_id=BOB, username="bob", first_name="Bob"
        )
        refused = await tg.wait_for_answer(bobs)
        assert refused["text"] == "Only Alice (who asked) or an admin can answer this."
        assert tg.buttons(GROUP, request.message_id) == APPROVAL_BUTTONS and runs(tmp_path) == []

        alices = tg.tap(GROUP, request.message_id, "Allow once")
        # answered (the spinner stops), no toast
        assert "text" not in await tg.wait_for_answer(alices)
        reply = await tg.wait_for_sent(GROUP, count=2)
        assert reply.text == "Deleted the report."
        shown = await edited_away(tg, GROUP, request.message_id)
        assert shown.text.endswith("✅ Allowed once by Alice.") and "/srv/report.txt" in shown.text

        # A second device still showing the old keyboard taps again: nothing runs twice.
        again = tg.inject_callback(
            GROUP,
            request.message_id,
            request.reply_markup["inline_keyboard"][0][0]["callback_data"],
        )
        second = await tg.wait_for_answer(again)
        assert second["text"].startswith("Already answered. ✅ Allowed once by Alice")
        await gw.sessions.wait_idle()
    assert runs(tmp_path) == ["delete_file /srv/report.txt"]
    assert set(tg.callback_answers) == set(tg.callback_queries)  # every tap's spinner was stopped


async def test_deny_runs_nothing_and_the_model_says_so(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    tg = fake_telegram
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/a"}), Reply("All right, I left /srv/a alone."))
    async with daemon(home, fake_llm, tg, tmp_path):
        tg.inject_message(ALICE, "delete /srv/a")
        request = await request_in(tg, ALICE)
        query = tg.tap(ALICE, request.message_id, "Deny")
        assert "text" not in await tg.wait_for_answer(query)
        assert (await tg.wait_for_sent(ALICE, count=2)).text == "All right, I left /srv/a alone."
        shown = await edited_away(tg, ALICE, request.message_id)
    assert shown.text.endswith("🚫 Denied by Alice. Nothing was run.")
    assert runs(tmp_path) == []
    assert "denied" in str(result_of(fake_llm)["content"])


async def test_a_restart_while_pending_then_allow_completes_the_turn_once(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    tg, clock = fake_telegram, FakeClock()
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/b"}), Reply("Deleted /srv/b."))
    async with daemon(home, fake_llm, tg, tmp_path, clock):
        tg.inject_message(ALICE, "delete /srv/b")
        request = await request_in(tg, ALICE)
    clock.advance(minutes=4)
    async with daemon(home, fake_llm, tg, tmp_path, clock) as gw:
        assert gw.waits is not None and len(gw.waits.pending()) == 1
        query = tg.tap(ALICE, request.message_id, "Allow once")  # the same buttons, in the new life
        assert "text" not in await tg.wait_for_answer(query)
        assert (await tg.wait_for_sent(ALICE, count=2)).text == "Deleted /srv/b."
        await edited_away(tg, ALICE, request.message_id)
    assert runs(tmp_path) == ["delete_file /srv/b"]
    assert len(fake_llm.anthropic_requests()) == 2  # the stopped step was not asked again
    assert len(tg.sent_messages(ALICE)) == 2  # the request was not sent twice


async def test_an_expired_request_runs_nothing(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    tg, clock = fake_telegram, FakeClock()
    fake_llm.script(
        ToolCall(DELETE, {"path": "/srv/c"}), Reply("Nobody allowed it, so /srv/c stays.")
    )
    async with daemon(home, fake_llm, tg, tmp_path, clock) as gw:
        assert gw.waits is not None
        tg.inject_message(ALICE, "delete /srv/c")
        request = await request_in(tg, ALICE)
        clock.advance(minutes=10)
        # what its timer does once the injected clock says it is time
        assert gw.waits.expire_due() == 1
        answer = await tg.wait_for_sent(ALICE, count=2)
        assert answer.text == "Nobody allowed it, so /srv/c stays."
        shown = await edited_away(tg, ALICE, request.message_id)
    assert shown.text.endswith("⌛ Expired: nobody answered within 10 minutes. Nothing was run.")
    assert runs(tmp_path) == []


async def test_ask_with_two_options_returns_the_tapped_one(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    tg = fake_telegram
    fake_llm.script(
        ToolCall("ask", {"question": "Tea or coffee?", "options": ["Tea", "Coffee"]}),
        Reply("Coffee it is."),
    )
    async with daemon(home, fake_llm, tg, tmp_path):
        tg.inject_message(ALICE, "make me a drink")
        request = await request_in(tg, ALICE)
        assert request.text.rstrip() == "❓ Tea or coffee?\n1. Tea\n2. Coffee"
        assert tg.buttons(ALICE, request.message_id) == ["Tea", "Coffee", "Something else"]
        query = tg.tap(ALICE, request.message_id, "Coffee")
        assert "text" not in await tg.wait_for_answer(query)
        assert (await tg.wait_for_sent(ALICE, count=2)).text == "Coffee it is."
        shown = await edited_away(tg, ALICE, request.message_id)
    assert shown.text.endswith("💬 Alice answered: Coffee")
    assert result_of(fake_llm)["content"] == "The user answered: Coffee"


async def test_an_admin_may_answer_and_a_button_cannot_be_carried_into_another_chat(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    """Bob asks in the group; his button's data replayed in Alice's DM matches no request there;
    Alice, an admin, allows it for the session in the group; the same tool then runs unasked."""
    tg = fake_telegram
    fake_llm.script(
        ToolCall(DELETE, {"path": "/srv/g1"}),
        Reply("Deleted g1."),
        ToolCall(DELETE, {"path": "/srv/g2"}),
        Reply("Deleted g2."),
    )
    admins = f"access:\n  admins: ['telegram:{ALICE}']\n"
    async with daemon(home, fake_llm, tg, tmp_path, extra=admins) as gw:
        tg.inject_message(
            GROUP,
            "@gw_test_bot delete g1",
            chat_type="supergroup",
            user_id=BOB,
            username="bob",
            first_name="Bob",
        )
        request = await request_in(tg, GROUP)
        assert "(asked by Bob)" in request.text
        tg.inject_message(ALICE, "/status")
        status = await tg.wait_for_sent(ALICE, count=1)
        data = request.reply_markup["inline_keyboard"][0][0]["callback_data"]
        carried = tg.inject_callback(ALICE, status.message_id, data)
        answer = await tg.wait_for_answer(carried)
        assert answer["text"] == "This request is no longer waiting for an answer."
        assert gw.waits is not None and len(gw.waits.pending()) == 1 and runs(tmp_path) == []

        query = tg.tap(GROUP, request.message_id, "Allow for this session")
        assert "text" not in await tg.wait_for_answer(query)
        assert (await tg.wait_for_sent(GROUP, count=2)).text == "Deleted g1."
        shown = await edited_away(tg, GROUP, request.message_id)
        assert shown.text.endswith("✅ Allowed for this session by Alice.")
        tg.inject_message(
            GROUP,
            "@gw_test_bot delete g2",
            chat_type="supergroup",
            user_id=BOB,
            username="bob",
            first_name="Bob",
        )
        assert (await tg.wait_for_sent(GROUP, count=3)).text == "Deleted g2."
        await gw.sessions.wait_idle()
    assert runs(tmp_path) == ["delete_file /srv/g1", "delete_file /srv/g2"]
