"""Switching models from a Telegram chat, end to end: `/model` lists the `models:` of config.yaml,
`/model fast` makes the next request go to that model (what the fake model server received), the
choice survives a restart, the session's prompt is rebuilt for it (reason stored, family guidance
follows), and a non-admin is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.prompt.builder import TOOL_USE_ENFORCEMENT
from gateway.sessions.lifecycle import Policies
from gateway.sessions.report import show_session
from tests.adapters.test_telegram import ALICE, BOB
from tests.adapters.test_telegram_voice import running
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram, SentMessage

LISTED = ("Models (▸ answers in this conversation):\n▸ default: claude-test (anthropic)\n"
          "• fast: gpt-fast (openai)\nSwitch with /model NAME; /model default goes back to the "
          "main model.")


def models_yaml(llm: FakeLLM, switch: str = "admins") -> str:
    return (f"access:\n  admins: ['telegram:{ALICE}']\n"
            f"models_switch: {switch}\n"
            f"models:\n  fast:\n    provider: openai\n    name: gpt-fast\n"
            f"    base_url: {llm.openai_base_url}\n"
            f"    api_key: test-key\n    max_retries: 0\n    context_window: 64000\n")


def system_text(request: dict[str, Any]) -> str:
    system = request["system"] if "system" in request else request["messages"][0]["content"]
    return system if isinstance(system, str) else "".join(b["text"] for b in system)


async def said(tg: FakeTelegram, chat: int, text: str, count: int) -> SentMessage:
    """Send `text` as the chat's user and wait for the chat's `count`-th message from the bot."""
    user = {"user_id": BOB, "username": "bob", "first_name": "Bob"} if chat == BOB else {}
    tg.inject_message(chat, text, **user)  # type: ignore[arg-type]
    return await tg.wait_for_sent(chat, count=count)


async def test_model_lists_switches_the_next_request_and_survives_a_restart(
        home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> None:
    extra = models_yaml(fake_llm)
    async with running(home, fake_llm, fake_telegram, extra) as gw:
        await said(fake_telegram, ALICE, "hi", 1)
        assert fake_llm.anthropic_requests()[-1]["model"] == "claude-test"
        assert (await said(fake_telegram, ALICE, "/model", 2)).text == LISTED
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
        home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> None:
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
