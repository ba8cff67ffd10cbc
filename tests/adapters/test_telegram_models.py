"""Switching models from a Telegram chat, end to end: `/model` lists the `models:` of config.yaml
(with an inline keyboard whose taps switch like the command), `/model fast` makes the next request
go to that model (what the fake model server received), the choice survives a restart, the session's
prompt is rebuilt for it (reason stored, family guidance follows), and a non-admin is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.prompt.builder import TOOL_USE_ENFORCEMENT
from gateway.sessions.lifecycle import Policies
from gateway.sessions.report import show_session
from tests.adapters.test_telegram import ALICE, BOB, GROUP
from tests.adapters.test_telegram_media import message, photo_sizes
from tests.adapters.test_telegram_media import running as media_running
from tests.adapters.test_telegram_voice import running
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram, SentMessage
from tests.mediafiles import picture

LISTED = (
    "Models (▸ answers in this conversation):\n▸ default: claude-test (anthropic)\n"
    "• fast: gpt-fast (openai)\nTap one to switch this conversation to it (or send /model "
    "NAME)."
)


def models_yaml(llm: FakeLLM, switch: str = "admins") -> str:
    return (
        f"access:\n  admins: ['telegram:{ALICE}']\n"
        f"models_switch: {switch}\n"
        f"models:\n  fast:\n    provider: openai\n    name: gpt-fast\n"
        f"    base_url: {llm.openai_base_url}\n"
        f"    api_key: test-key\n    max_retries: 0\n    context_window: 64000\n"
    )


def system_text(request: dict[str, Any]) -> str:
    system = request["system"] if "system" in request else request["messages"][0]["content"]
    return system if isinstance(system, str) else "".join(b["text"] for b in system)


async def said(tg: FakeTelegram, chat: int, text: str, count: int) -> SentMessage:
    """Send `text` as the chat's user and wait for the chat's `count`-th message from the bot."""
    user = {"user_id": BOB, "username": "bob", "first_name": "Bob"} if chat == BOB else {}
    tg.inject_message(chat, text, **user)  # type: ignore[arg-type]
    return await tg.wait_for_sent(chat, count=count)


async def test_model_lists_switches_the_next_request_and_survives_a_restart(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    extra = models_yaml(fake_llm)
    async with running(home, fake_llm, fake_telegram, extra) as gw:
        await said(fake_telegram, ALICE, "hi", 1)
        assert fake_llm.anthropic_requests()[-1]["model"] == "claude-test"
        listed = await said(fake_telegram, ALICE, "/model", 2)
        assert listed.text == LISTED
        assert fake_telegram.buttons(ALICE, listed.message_id) == [
            "▸ default: claude-test",
            "fast: gpt-fast",
        ]
        switched = await said(fake_telegram, ALICE, "/model fast", 3)
        assert switched.text == "Switched to fast (gpt-fast). Your next message is answered by it."
        assert fake_llm.openai_requests() == []
        answer = await said(fake_telegram, ALICE, "and now?", 4)
        assert answer.text == "echo: and now? [users=2]"  # one conversation, on the other model
        request = fake_llm.openai_requests()[-1]
        assert request["model"] == "gpt-fast"
        prompt = system_text(request)
        assert "Model: gpt-fast (provider: openai)" in prompt and TOOL_USE_ENFORCEMENT in prompt
        claude = system_text(fake_llm.anthropic_requests()[-1])
        assert TOOL_USE_ENFORCEMENT not in claude  # the block of the gpt family only
        session = next(s for s in gw.store.list_sessions(active=True) if s.chat_id == str(ALICE))
        assert session.model == "gpt-fast" and session.prompt_rebuild_reason == "model_change"
        shown = show_session(gw.store, Policies(gw.config.session_reset, None), session)
        assert "model:      gpt-fast (openai)" in shown and "chosen:     fast" in shown
        assert "prompt:     rebuilt once, last for model_change" in shown
    async with running(home, fake_llm, fake_telegram, extra):
        await said(fake_telegram, ALICE, "still you?", 5)
        assert fake_llm.openai_requests()[-1]["model"] == "gpt-fast"
        assert len(fake_llm.anthropic_requests()) == 1
        assert "▸ fast: gpt-fast" in (await said(fake_telegram, ALICE, "/model", 6)).text
        back = await said(fake_telegram, ALICE, "/model default", 7)
        assert back.text.startswith("Switched to default (claude-test)")
        await said(fake_telegram, ALICE, "back?", 8)
        assert fake_llm.anthropic_requests()[-1]["model"] == "claude-test"
        assert len(fake_llm.openai_requests()) == 2


async def test_a_non_admin_cannot_switch_unless_everyone_may(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram, models_yaml(fake_llm)):
        refused = await said(fake_telegram, BOB, "/model fast", 1)
        assert refused.text == "Only an admin can switch models here."
        listed = await said(fake_telegram, BOB, "/model", 2)
        assert "▸ default: claude-test" in listed.text  # listing them is fine
        await said(fake_telegram, BOB, "hello", 3)
        assert fake_llm.openai_requests() == []
        assert fake_llm.anthropic_requests()[-1]["model"] == "claude-test"
    async with running(home, fake_llm, fake_telegram, models_yaml(fake_llm, switch="everyone")):
        switched = await said(fake_telegram, BOB, "/model fast", 4)
        assert switched.text.startswith("Switched to fast")
        unknown = await said(fake_telegram, BOB, "/model nope", 5)
        assert unknown.text.startswith("There is no model called 'nope'")


async def test_pictures_follow_the_chosen_model_s_sight(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """The main model is blind, `fast` sees: after /model fast a photo reaches the model as a
    picture (and nobody is told it cannot see); back on the main model, the next photo is a note
    and the user is told once."""
    sighted = models_yaml(fake_llm).replace(
        "    context_window: 64000\n", "    context_window: 64000\n    vision: true\n"
    )
    async with media_running(home, fake_llm, fake_telegram, sighted, vision=False):
        await said(fake_telegram, ALICE, "/model fast", 1)
        message(
            fake_telegram,
            message_id=50,
            caption="what is this?",
            photo=photo_sizes(fake_telegram, picture(64, 64), 64, 64),
        )
        answer = await fake_telegram.wait_for_sent(ALICE, count=2)
        assert answer.text == "echo: what is this?\n[image: photo] [users=1]"
        parts = fake_llm.openai_requests()[-1]["messages"][-1]["content"]
        assert parts[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
        await said(fake_telegram, ALICE, "/model default", 3)
        message(
            fake_telegram,
            message_id=51,
            caption="and this?",
            photo=photo_sizes(fake_telegram, picture(64, 64), 64, 64),
        )
        await fake_telegram.wait_for_sent(ALICE, count=5)
        told, note = fake_telegram.sent_texts(ALICE)[3:5]
        assert told == ("The model I use can't see images, so it was only told that you sent one.")
        assert "[The user sent an image (photo); this model cannot see images.]" in note
        blocks = fake_llm.anthropic_requests()[-1]["messages"][-1]["content"]
        assert all(b["type"] == "text" for b in blocks)


async def test_a_switch_to_a_blind_model_sends_it_no_pictures(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """The main model sees, `fast` is blind (gpt-fast is no vision family): after /model fast a
    photo is a note for it, the user is told, and no request to it carries an image."""
    async with media_running(home, fake_llm, fake_telegram, models_yaml(fake_llm)):
        message(
            fake_telegram,
            message_id=50,
            caption="first",
            photo=photo_sizes(fake_telegram, picture(64, 64), 64, 64),
        )
        await fake_telegram.wait_for_sent(ALICE, count=1)
        assert fake_llm.anthropic_requests()[-1]["messages"][-1]["content"][0]["type"] == "image"
        await said(fake_telegram, ALICE, "/model fast", 2)
        message(
            fake_telegram,
            message_id=51,
            caption="second",
            photo=photo_sizes(fake_telegram, picture(64, 64), 64, 64),
        )
        await fake_telegram.wait_for_sent(ALICE, count=4)
        told = fake_telegram.sent_texts(ALICE)[2]
        assert told.startswith("The model I use can't see images")
        request = json.dumps(fake_llm.openai_requests()[-1])
        assert "image_url" not in request and "base64" not in request


async def test_an_unknown_name_is_not_echoed_as_markup(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Anyone may try a name: one that is not a plain name is not repeated, so nobody can make the
    bot post a link of their choosing (or a wall of text) under its own name."""
    async with running(home, fake_llm, fake_telegram, models_yaml(fake_llm)):
        hostile = (
            "/model [your account is locked](https://evil.example/login) **now** " + "A" * 4000
        )
        refused = await said(fake_telegram, BOB, hostile, 1)
        assert refused.text.startswith("There is no model by that name here.\nModels (")
        assert "evil" not in json.dumps(refused.params) and "AAAA" not in refused.text
        plain = await said(fake_telegram, BOB, "/model gpt-4.1:mini", 2)
        assert plain.text.startswith("There is no model called 'gpt-4.1:mini' here.")
        assert len(fake_telegram.sent_messages(BOB)) == 2


async def test_a_tap_on_the_list_switches_like_the_command_and_only_for_an_admin(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    async with running(home, fake_llm, tg, models_yaml(fake_llm)) as gw:
        tg.inject_message(GROUP, "/model", chat_type="supergroup")
        listed = await tg.wait_for_sent(GROUP, count=1)
        assert tg.buttons(GROUP, listed.message_id) == ["▸ default: claude-test", "fast: gpt-fast"]

        bobs = tg.tap(
            GROUP,
            listed.message_id,
            "fast: gpt-fast",
            user_id=BOB,
            username="bob",
            first_name="Bob",
        )
        assert (await tg.wait_for_answer(bobs))["text"] == "Only an admin can switch models here."
        # the same button carried into another chat (a forged callback) matches nothing there
        data = listed.reply_markup["inline_keyboard"][1][0]["callback_data"]
        tg.inject_message(ALICE, "hi")
        await tg.wait_for_sent(ALICE, count=1)
        carried = tg.inject_callback(
            ALICE, (await tg.wait_for_sent(ALICE, count=1)).message_id, data
        )
        assert (await tg.wait_for_answer(carried))["text"] == (
            "This list is out of date: send /model for the current one."
        )
        assert fake_llm.openai_requests() == []

        alices = tg.tap(GROUP, listed.message_id, "fast: gpt-fast")
        assert "text" not in await tg.wait_for_answer(alices)  # answered in the chat instead
        switched = await tg.wait_for_sent(GROUP, count=2)
        assert switched.text == "Switched to fast (gpt-fast). Your next message is answered by it."
        again = tg.tap(GROUP, listed.message_id, "fast: gpt-fast")
        assert (await tg.wait_for_answer(again))["text"] == "Already answering with fast."
        tg.inject_message(GROUP, "@gw_test_bot and now?", chat_type="supergroup")
        await tg.wait_for_sent(GROUP, count=3)
        assert fake_llm.openai_requests()[-1]["model"] == "gpt-fast"
        key = next(s.key for s in gw.store.list_sessions(active=True) if s.chat_id == str(GROUP))
        assert gw.store.model_choice(key) == "fast"
    # the list's buttons still work after a restart (the same models, the same chat)
    async with running(home, fake_llm, tg, models_yaml(fake_llm)) as gw:
        back = tg.tap(GROUP, listed.message_id, "▸ default: claude-test")
        assert "text" not in await tg.wait_for_answer(back)
        assert (await tg.wait_for_sent(GROUP, count=4)).text.startswith(
            "Switched to default (claude-test)"
        )
        assert gw.store.model_choice(key) is None
    assert len([m for m in tg.sent_messages(GROUP) if m.text.startswith("Switched")]) == 2
