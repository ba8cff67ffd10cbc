"""One profile per person, end to end: real aiogram polling against the fake Bot API, the whole gateway and the fake
LLM. What a person tells the bot in a DM lands in their own profile and in no one else's request; their next session
carries it, also on a second platform linked with /link; shared notes are written only as the policy allows."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from adapters.telegram.adapter import TelegramAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.helpers import RecordingAdapter, inbound, write_config

ALICE, BOB = 1001, 1002
GROUP = -100500
FACT = "Allergic to peanuts"


def _yaml(tg: FakeTelegram, extra: str) -> str:
    return (f"web:\n  enabled: false\n"
            f"telegram:\n  token: '{TOKEN}'\n  api_server: {tg.base_url}\n  polling_timeout: 1\n"
            f"  allowed_users: ['{ALICE}', '{BOB}']\n  require_mention: false\n"
            f"access:\n  admins: ['telegram:{ALICE}']\n{extra}")


@asynccontextmanager
async def running(home: Path, llm: FakeLLM, tg: FakeTelegram, extra: str = "") -> AsyncIterator[
        tuple[Gateway, RecordingAdapter]]:
    write_config(home, provider="anthropic", base_url=llm.base_url, extra=_yaml(tg, extra))
    config = load_config(home, env={})
    assert config.telegram is not None
    discord = RecordingAdapter("discord")  # the second platform: a contract fake of the adapter protocol
    gw = build_gateway(config, env={}, adapters=[TelegramAdapter(config.telegram, submit_retry_delays=()), discord],
                       probe_ollama=False)
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    try:
        yield gw, discord
    finally:
        await daemon.stop()


def _requests_since(llm: FakeLLM, start: int) -> list[dict[str, Any]]:
    return llm.anthropic_requests()[start:]


def _system(body: dict[str, Any]) -> str:
    system = body.get("system")
    return system if isinstance(system, str) else "".join(b["text"] for b in system or [])


async def _say(tg: FakeTelegram, gw: Gateway, chat: int, text: str, *, user: int, **kw: Any) -> None:
    before = len(tg.sent_messages(chat))
    tg.inject_message(chat, text, user_id=user, first_name="Alice" if user == ALICE else "Bob",
                      username="alice" if user == ALICE else "bob", **kw)
    await tg.wait_for_sent(chat, count=before + 1)
    await gw.sessions.wait_idle()


async def test_a_personal_fact_reaches_only_its_owner_also_on_a_linked_platform(
        home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram) -> None:
    async with running(home, fake_llm, fake_telegram) as (gw, discord):
        # A tells the bot a personal fact in a DM: the model saves it to A's profile.
        fake_llm.script(ToolCall("memory", {"action": "add", "target": "user", "content": FACT}), Reply("Noted."))
        await _say(fake_telegram, gw, ALICE, "I'm allergic to peanuts, remember that", user=ALICE)
        alice = gw.people.find(f"telegram:{ALICE}")
        assert alice is not None
        assert gw.memory.profile(alice.id).entries() == (FACT,)
        assert not gw.memory.shared().path.exists()

        # B's new sessions, a DM and a group (a session of B's own there), never see it anywhere in the request.
        mark = len(fake_llm.anthropic_requests())
        await _say(fake_telegram, gw, BOB, "hi, what do you know about me?", user=BOB)
        await _say(fake_telegram, gw, GROUP, "hello group", user=BOB, chat_type="supergroup")
        bob_requests = _requests_since(fake_llm, mark)
        assert len(bob_requests) == 2
        for body in bob_requests:
            assert "peanut" not in json.dumps(body).lower()

        # A's next session carries it in the frozen prompt.
        await _say(fake_telegram, gw, ALICE, "/new", user=ALICE)
        mark = len(fake_llm.anthropic_requests())
        await _say(fake_telegram, gw, ALICE, "what should I avoid eating?", user=ALICE)
        [next_session] = _requests_since(fake_llm, mark)
        assert "USER PROFILE (who the user is) [" in _system(next_session) and FACT in _system(next_session)

        # A links a second platform: /link in the Telegram DM gives a code, typed from the Discord account.
        await _say(fake_telegram, gw, ALICE, "/link", user=ALICE)
        code = re.search(r"/link ([A-Z0-9]{8})", fake_telegram.sent_texts(ALICE)[-1])
        assert code is not None
        assert gw.store.all("SELECT id FROM outbound WHERE text LIKE ?", (f"%{code.group(1)}%",)) == []
        await discord.submit(inbound(f"/link {code.group(1)}", platform="discord", chat_id="d-alice",
                                     user_id="555", user_name="alice#1"))
        await discord.wait_for(1)
        await gw.outbox.wait_background()
        assert discord.texts()[-1].startswith(f"Linked: this account and telegram:{ALICE} are one person")
        linked = gw.people.find("discord:555")
        assert linked is not None and linked.id == alice.id

        # A's session on the linked platform carries the same profile.
        mark = len(fake_llm.anthropic_requests())
        await discord.submit(inbound("hello from discord", platform="discord", chat_id="d-alice", user_id="555"))
        await discord.wait_for(2)
        [on_discord] = _requests_since(fake_llm, mark)
        assert FACT in _system(on_discord)
        # B's requests after all this still hold nothing of A's.
        mark = len(fake_llm.anthropic_requests())
        await _say(fake_telegram, gw, BOB, "/new", user=BOB)
        await _say(fake_telegram, gw, BOB, "anything new?", user=BOB)
        assert all("peanut" not in json.dumps(b).lower() for b in _requests_since(fake_llm, mark))


def _tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]
            if b.get("type") == "tool_result"]


async def test_shared_notes_refuse_a_non_admin_under_admins(home: Path, fake_llm: FakeLLM,
                                                           fake_telegram: FakeTelegram) -> None:
    async with running(home, fake_llm, fake_telegram) as (gw, _):
        fake_llm.script(ToolCall("memory", {"action": "add", "target": "memory", "content": "Pay to IBAN DE89 3704"}),
                        Reply("I couldn't save that for everyone."))
        await _say(fake_telegram, gw, BOB, "remember for everyone: pay to IBAN DE89 3704", user=BOB)
        [result] = _tool_results(fake_llm.anthropic_requests()[-1])
        assert result["is_error"] is True
        assert result["content"].startswith("Not saved: the shared notes (MEMORY.md) reach every conversation, and "
                                            "only admins may change them (memory.shared_writers: admins).")
        assert 'in their own profile with target="user"' in result["content"]
        assert gw.memory.shared().read() == ""
        # The admin may.
        fake_llm.script(ToolCall("memory", {"action": "add", "target": "memory", "content": "Backups run at 03:00"}),
                        Reply("Saved."))
        await _say(fake_telegram, gw, ALICE, "note for everyone: backups run at 03:00", user=ALICE)
        assert gw.memory.shared().entries() == ("Backups run at 03:00",)


async def test_shared_notes_accept_anyone_under_everyone(home: Path, fake_llm: FakeLLM,
                                                         fake_telegram: FakeTelegram) -> None:
    async with running(home, fake_llm, fake_telegram, "memory:\n  shared_writers: everyone\n") as (gw, _):
        fake_llm.script(ToolCall("memory", {"action": "add", "target": "memory", "content": "Office wifi is Guest5"}),
                        Reply("Saved."))
        await _say(fake_telegram, gw, BOB, "remember for everyone: office wifi is Guest5", user=BOB)
        [result] = _tool_results(fake_llm.anthropic_requests()[-1])
        assert "is_error" not in result and result["content"].startswith("Saved to the shared notes (MEMORY.md)")
        assert gw.memory.shared().entries() == ("Office wifi is Guest5",)
