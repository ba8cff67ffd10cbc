"""Switching models from a Telegram chat, end to end: `/model` lists the `models:` of config.yaml, `/model fast`
makes the next request go to that model (what the fake model server received), the choice survives a restart, the
session's prompt is rebuilt for it (reason stored, family guidance follows), and a non-admin is refused."""

from __future__ import annotations

from pathlib import Path

from gateway.prompt.builder import TOOL_USE_ENFORCEMENT
from gateway.sessions.lifecycle import Policies
from gateway.sessions.report import show_session
from tests.adapters.test_telegram import ALICE, BOB
from tests.adapters.test_telegram_voice import running
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram


def models_yaml(llm: FakeLLM, switch: str = "admins") -> str:
    return (f"access:\n  admins: ['telegram:{ALICE}']\n"
            f"models_switch: {switch}\n"
            f"models:\n  fast:\n    provider: openai\n    name: gpt-fast\n    base_url: {llm.openai_base_url}\n"
            f"    api_key: test-key\n    max_retries: 0\n    context_window: 64000\n")


def system_text(request: dict[str, object]) -> str:
    system = request["system"] if "system" in request else request["messages"][0]["content"]  # type: ignore[index]
    return system if isinstance(system, str) else "".join(b["text"] for b in system)  # type: ignore[union-attr]


async def test_model_lists_switches_the_next_request_and_survives_a_restart(
        home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> None:
    extra = models_yaml(fake_llm)
    async with running(home, fake_llm, fake_telegram, extra) as gw:
        fake_telegram.inject_message(ALICE, "hi")
        await fake_telegram.wait_for_sent(ALICE)
        assert fake_llm.anthropic_requests()[-1]["model"] == "claude-test"
        fake_telegram.inject_message(ALICE, "/model")
        listed = (await fake_telegram.wait_for_sent(ALICE, count=2)).text
        assert listed == ("Models (▸ answers in this conversation):\n▸ default: claude-test (anthropic)\n"
                          "• fast: gpt-fast (openai)\nSwitch with /model NAME; /model default goes back to the main "
                          "model.")
        fake_telegram.inject_message(ALICE, "/model fast")
        switched = (await fake_telegram.wait_for_sent(ALICE, count=3)).text
        assert switched == "Switched to fast (gpt-fast). Your next message is answered by it."
        assert fake_llm.openai_requests() == []
        fake_telegram.inject_message(ALICE, "and now?")
        answer = await fake_telegram.wait_for_sent(ALICE, count=4)
        assert answer.text == "echo: and now? [users=2]"  # the same conversation, now on the other model
        request = fake_llm.openai_requests()[-1]
        assert request["model"] == "gpt-fast"
        prompt = system_text(request)
        assert "Model: gpt-fast (provider: openai)" in prompt and TOOL_USE_ENFORCEMENT in prompt
        assert TOOL_USE_ENFORCEMENT not in system_text(fake_llm.anthropic_requests()[-1])  # Claude: no such block
        session = next(s for s in gw.store.list_sessions(active=True) if s.chat_id == str(ALICE))
        assert session.model == "gpt-fast" and session.prompt_rebuild_reason == "model_change"
        shown = show_session(gw.store, Policies(gw.config.session_reset, None), session)
        assert "model:      gpt-fast (openai)" in shown and "model_change" in shown and "chosen:     fast" in shown
    async with running(home, fake_llm, fake_telegram, extra):
        fake_telegram.inject_message(ALICE, "still you?")
        await fake_telegram.wait_for_sent(ALICE, count=5)
        assert fake_llm.openai_requests()[-1]["model"] == "gpt-fast"
        assert len(fake_llm.anthropic_requests()) == 1
        fake_telegram.inject_message(ALICE, "/model")
        assert "▸ fast: gpt-fast" in (await fake_telegram.wait_for_sent(ALICE, count=6)).text
        fake_telegram.inject_message(ALICE, "/model default")
        assert (await fake_telegram.wait_for_sent(ALICE, count=7)).text.startswith("Switched to default (claude-test)")
        fake_telegram.inject_message(ALICE, "back?")
        await fake_telegram.wait_for_sent(ALICE, count=8)
        assert fake_llm.anthropic_requests()[-1]["model"] == "claude-test" and len(fake_llm.openai_requests()) == 2


async def test_a_non_admin_cannot_switch_unless_everyone_may(
        home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> None:
    async with running(home, fake_llm, fake_telegram, models_yaml(fake_llm)):
        fake_telegram.inject_message(BOB, "/model fast", user_id=BOB, username="bob", first_name="Bob")
        refused = await fake_telegram.wait_for_sent(BOB)
        assert refused.text == "Only an admin can switch models here."
        fake_telegram.inject_message(BOB, "/model", user_id=BOB, username="bob", first_name="Bob")
        assert "▸ default: claude-test" in (await fake_telegram.wait_for_sent(BOB, count=2)).text  # listing is fine
        fake_telegram.inject_message(BOB, "hello", user_id=BOB, username="bob", first_name="Bob")
        await fake_telegram.wait_for_sent(BOB, count=3)
        assert fake_llm.openai_requests() == [] and fake_llm.anthropic_requests()[-1]["model"] == "claude-test"
    async with running(home, fake_llm, fake_telegram, models_yaml(fake_llm, switch="everyone")):
        fake_telegram.inject_message(BOB, "/model fast", user_id=BOB, username="bob", first_name="Bob")
        assert (await fake_telegram.wait_for_sent(BOB, count=4)).text.startswith("Switched to fast")
        fake_telegram.inject_message(BOB, "/model nope", user_id=BOB, username="bob", first_name="Bob")
        assert (await fake_telegram.wait_for_sent(BOB, count=5)).text.startswith("There is no model called 'nope'")
