"""One profile per person, end to end: real aiogram polling against the fake Bot API and real
discord.py against the fake Discord (REST + gateway websocket), the whole gateway and the fake LLM.
What a person tells the bot in a DM lands in their own profile and in no one else's request; their
next session carries it, also on Discord once they linked their Discord account with /link (the code
given in the Telegram DM, typed in the Discord DM); shared notes are written only as the policy
allows. Every check of "never reaches" reads the whole request body as the model got it.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from adapters.discord.adapter import DiscordAdapter
from adapters.telegram.adapter import TelegramAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.fakes.discord import BOT_ID, CHANNEL_ID, OTHER_USER_ID, FakeDiscord
from tests.fakes.discord import TOKEN as DISCORD_TOKEN
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.helpers import write_config

ALICE, BOB = 1001, 1002
GROUP = -100500
FACT = "Allergic to peanuts"
ALICE_DISCORD = "400000000000000555"  # Alice's Discord account: a stranger there until she links it
BOB_DISCORD = OTHER_USER_ID  # Bob's, allowed on Discord by id
ALICE_DM, BOB_DM = "600000000000000501", "600000000000000502"  # their DM channels with the bot


def _yaml(tg: FakeTelegram, dc: FakeDiscord | None, extra: str) -> str:
    discord = (
        ""
        if dc is None
        else (
            f"discord:\n  token: '{DISCORD_TOKEN}'\n  api_base: "
            f"{dc.base_url}/api/v10\n  gateway_url: {dc.ws_url}\n"
            f"  allowed_users: ['{BOB_DISCORD}']\n"
        )
    )
    return (
        f"web:\n  enabled: false\n"
        f"telegram:\n  token: '{TOKEN}'\n  api_server: {tg.base_url}\n  polling_timeout: 1\n"
        f"  allowed_users: ['{ALICE}', '{BOB}']\n  require_mention: false\n{discord}"
        f"access:\n  admins: ['telegram:{ALICE}']\n{extra}"
    )


@asynccontextmanager
async def running(
    home: Path, llm: FakeLLM, tg: FakeTelegram, dc: FakeDiscord | None = None, extra: str = ""
) -> AsyncIterator[Gateway]:
    write_config(home, provider="anthropic", base_url=llm.base_url, extra=_yaml(tg, dc, extra))
    config = load_config(home, env={})
    assert config.telegram is not None
    adapters: list[Any] = [TelegramAdapter(config.telegram, submit_retry_delays=())]
    if config.discord is not None:
        adapters.append(DiscordAdapter(config.discord, guild_ready_timeout=0.1))
    gw = build_gateway(config, env={}, adapters=adapters, probe_ollama=False)
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    try:
        yield gw
    finally:
        await daemon.stop()


def _raw_since(llm: FakeLLM, start: int) -> list[bytes]:
    """The request bodies the model received, byte for byte, from the `start`-th on."""
    return llm.anthropic_raw()[start:]


def _system(body: dict[str, Any]) -> str:
    system = body.get("system")
    return system if isinstance(system, str) else "".join(b["text"] for b in system or [])


async def _say(
    tg: FakeTelegram, gw: Gateway, chat: int, text: str, *, user: int, **kw: Any
) -> None:
    before = len(tg.sent_messages(chat))
    tg.inject_message(
        chat,
        text,
        user_id=user,
        first_name="Alice" if user == ALICE else "Bob",
        username="alice" if user == ALICE else "bob",
        **kw,
    )
    await tg.wait_for_sent(chat, count=before + 1)
    await gw.sessions.wait_idle()


async def _say_on_discord(
    dc: FakeDiscord, gw: Gateway, channel: str, text: str, *, author: str, name: str, **kw: Any
) -> str:
    """A Discord user's message through the gateway websocket; returns the bot's answer as Discord
    stored it."""
    before = len(dc.sent_messages(channel))
    await dc.push_message(channel, text, author_id=author, author_name=name, **kw)
    answer = await dc.wait_for_sent(channel, count=before + 1, timeout=10)
    await gw.sessions.wait_idle()
    return answer.content


async def test_a_personal_fact_reaches_only_its_owner_also_on_a_linked_platform(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, fake_discord: FakeDiscord
) -> None:
    tg, dc = fake_telegram, fake_discord
    async with running(home, fake_llm, tg, dc) as gw:
        # A tells the bot a personal fact in a DM: the model saves it to A's profile.
        fake_llm.script(
            ToolCall("memory", {"action": "add", "target": "user", "content": FACT}),
            Reply("Noted."),
        )
        await _say(tg, gw, ALICE, "I'm allergic to peanuts, remember that", user=ALICE)
        alice = gw.people.find(f"telegram:{ALICE}")
        assert alice is not None
        assert gw.memory.profile(alice.id).entries() == (FACT,)
        assert not gw.memory.shared().path.exists()

        # B's new sessions, a DM and a group (a session of B's own there), never see it anywhere in
        # the request.
        mark = len(fake_llm.anthropic_raw())
        await _say(tg, gw, BOB, "hi, what do you know about me?", user=BOB)
        await _say(tg, gw, GROUP, "hello group", user=BOB, chat_type="supergroup")
        bob_requests = _raw_since(fake_llm, mark)
        assert len(bob_requests) == 2
        assert all(b"peanut" not in raw.lower() for raw in bob_requests)

        # A's next session carries it in the frozen prompt.
        await _say(tg, gw, ALICE, "/new", user=ALICE)
        mark = len(fake_llm.anthropic_raw())
        await _say(tg, gw, ALICE, "what should I avoid eating?", user=ALICE)
        [next_session] = fake_llm.anthropic_requests()[mark:]
        assert "USER PROFILE (who the user is) [" in _system(next_session) and FACT in _system(
            next_session
        )

        # A links her Discord account: /link in the Telegram DM gives a code (sent there, never
        # stored) ...
        await _say(tg, gw, ALICE, "/link", user=ALICE)
        code = re.search(r"/link ([A-Z0-9]{8})", tg.sent_texts(ALICE)[-1])
        assert code is not None
        assert (
            gw.store.all("SELECT id FROM outbound WHERE text LIKE ?", (f"%{code.group(1)}%",)) == []
        )
        # ... which she types in her DM with the bot on Discord, where nobody let her in yet: told
        # what linking shares and with whom, she confirms.
        told_first = await _say_on_discord(
            dc, gw, ALICE_DM, f"/link {code.group(1)}", author=ALICE_DISCORD, name="alice"
        )
        assert told_first.startswith(
            f"This would make this account and telegram:{ALICE} (Alice) one person to me"
        )
        linked = await _say_on_discord(
            dc, gw, ALICE_DM, f"/link {code.group(1)} yes", author=ALICE_DISCORD, name="alice"
        )
        assert linked.startswith(f"Linked: this account and telegram:{ALICE} are one person")
        # and the Telegram side hears so
        told = f"Linked: this account and discord:{ALICE_DISCORD} are one person"
        await tg.wait_until(lambda: tg.sent_texts(ALICE)[-1].startswith(told))
        person = gw.people.find(f"discord:{ALICE_DISCORD}")
        assert person is not None and person.id == alice.id

        # A's first session on Discord carries the same profile: in the prompt, in the bytes sent.
        mark = len(fake_llm.anthropic_raw())
        answer = await _say_on_discord(
            dc, gw, ALICE_DM, "hello from discord", author=ALICE_DISCORD, name="alice"
        )
        assert answer.startswith("echo: hello from discord")
        [on_discord] = _raw_since(fake_llm, mark)
        assert FACT in _system(json.loads(on_discord)) and FACT.encode() in on_discord
        session = gw.store.active_session(f"discord:dm:{ALICE_DM}")
        assert (
            session is not None
            and session.system_prompt is not None
            and FACT in session.system_prompt
        )

        # B, on Discord (a DM, and the guild channel) and
        # on Telegram again, never gets a byte of it.
        mark = len(fake_llm.anthropic_raw())
        await _say_on_discord(
            dc, gw, BOB_DM, "hi from bob on discord", author=BOB_DISCORD, name="bob"
        )
        await _say_on_discord(
            dc,
            gw,
            CHANNEL_ID,
            f"<@{BOT_ID}> what does everyone eat?",
            author=BOB_DISCORD,
            name="bob",
            mentions=[BOT_ID],
        )
        await _say(tg, gw, BOB, "/new", user=BOB)
        await _say(tg, gw, BOB, "anything new?", user=BOB)
        after = _raw_since(fake_llm, mark)
        assert len(after) == 3
        assert all(b"peanut" not in raw.lower() for raw in after)


def _tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


async def test_shared_notes_refuse_a_non_admin_under_admins(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(home, fake_llm, fake_telegram) as gw:
        fake_llm.script(
            ToolCall(
                "memory", {"action": "add", "target": "memory", "content": "Pay to IBAN DE89 3704"}
            ),
            Reply("I couldn't save that for everyone."),
        )
        await _say(fake_telegram, gw, BOB, "remember for everyone: pay to IBAN DE89 3704", user=BOB)
        [result] = _tool_results(fake_llm.anthropic_requests()[-1])
        assert result["is_error"] is True
        assert result["content"].startswith(
            "Not saved: the shared notes (MEMORY.md) reach every conversation, and "
            "only admins may change them (memory.shared_writers: admins)."
        )
        assert 'in their own profile with target="user"' in result["content"]
        assert gw.memory.shared().read() == ""
        # The admin may.
        fake_llm.script(
            ToolCall(
                "memory", {"action": "add", "target": "memory", "content": "Backups run at 03:00"}
            ),
            Reply("Saved."),
        )
        await _say(fake_telegram, gw, ALICE, "note for everyone: backups run at 03:00", user=ALICE)
        assert gw.memory.shared().entries() == ("Backups run at 03:00",)


async def test_shared_notes_accept_anyone_under_everyone(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with running(
        home, fake_llm, fake_telegram, extra="memory:\n  shared_writers: everyone\n"
    ) as gw:
        fake_llm.script(
            ToolCall(
                "memory", {"action": "add", "target": "memory", "content": "Office wifi is Guest5"}
            ),
            Reply("Saved."),
        )
        await _say(fake_telegram, gw, BOB, "remember for everyone: office wifi is Guest5", user=BOB)
        [result] = _tool_results(fake_llm.anthropic_requests()[-1])
        assert "is_error" not in result and result["content"].startswith(
            "Saved to the shared notes (MEMORY.md)"
        )
        assert gw.memory.shared().entries() == ("Office wifi is Guest5",)
