"""Approvals and questions on Discord end to end: real discord.py against the fake gateway and REST
(message components, component interactions that must be answered within 3 s, ephemeral follow-ups),
the whole daemon, a real MCP server whose `delete_file` is annotated destructive and records each
run, and the fake LLM. Assertions are what each Discord user saw and how often the tool really
ran."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from adapters.discord.adapter import DiscordAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.adapters.test_discord import MENTION, _no_wait, discord_yaml, wait_for
from tests.approvals_support import DELETE, mcp_yaml, result_of, runs
from tests.fakes.discord import (
    BOT_ID,
    CHANNEL_ID,
    OTHER_USER_ID,
    USER_ID,
    DiscordMessage,
    FakeDiscord,
)
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import write_config
from tests.lifecycle_support import FakeClock

APPROVAL_BUTTONS = ["Allow once", "Allow for this session", "Deny"]


@asynccontextmanager
async def daemon(
    home: Path, llm: FakeLLM, fake: FakeDiscord, folder: Path, clock: FakeClock | None = None
) -> AsyncIterator[Gateway]:
    write_config(home, base_url=llm.base_url, extra=discord_yaml(fake, mcp_yaml(folder)))
    config = load_config(home, env={})
    assert config.discord is not None
    gw = build_gateway(
        config,
        env={},
        adapters=[DiscordAdapter(config.discord, guild_ready_timeout=0.1)],
        probe_ollama=False,
        sleep=_no_wait,
        clock=clock or FakeClock(),
    )
    running = Daemon(gw, install_signals=False)
    await running.start()
    try:
        yield gw
    finally:
        await running.stop()


async def request_in(fake: FakeDiscord) -> DiscordMessage:
    await wait_for(lambda: any(m.components for m in fake.sent_messages(CHANNEL_ID)))
    return next(m for m in fake.sent_messages(CHANNEL_ID) if m.components)


def shown(fake: FakeDiscord, message_id: str) -> DiscordMessage:
    return next(m for m in fake.sent if m.id == message_id)


async def edited_away(fake: FakeDiscord, message_id: str) -> DiscordMessage:
    await wait_for(lambda: not shown(fake, message_id).components)
    return shown(fake, message_id)


async def answers(fake: FakeDiscord, count: int) -> list[str]:
    """The bot's channel messages without buttons or ephemeral flags: what everybody reads."""

    def visible() -> list[str]:
        return [
            m.content
            for m in fake.sent_messages(CHANNEL_ID)
            if not m.visible_to and m.id not in requests
        ]

    requests = {m.id for m in fake.sent_messages(CHANNEL_ID) if m.components or m.edits}
    await wait_for(lambda: len(visible()) >= count)
    return visible()


async def test_only_the_asker_can_allow_and_allow_once_runs_once(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    fake = fake_discord
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/report.txt"}), Reply("Deleted the report."))
    async with daemon(home, fake_llm, fake, tmp_path) as gw:
        await fake.push_message(CHANNEL_ID, f"{MENTION} delete the report", mentions=[BOT_ID])
        request = await request_in(fake)
        assert request.buttons() == APPROVAL_BUTTONS
        # green, grey, red
        assert [c["style"] for c in request.components[0]["components"]] == [3, 2, 4]
        assert "mcp_fake_delete_file" in request.content and "`/srv/report.txt`" in request.content

        await fake.click(CHANNEL_ID, request.id, "Allow once", user_id=OTHER_USER_ID, name="bob")
        await wait_for(lambda: bool(fake.ephemerals(OTHER_USER_ID)))
        (refusal,) = fake.ephemerals(OTHER_USER_ID)
        assert refusal.content == "Only Alice (who asked) or an admin can answer this."
        assert fake.ephemerals(USER_ID) == []
        assert shown(fake, request.id).buttons() == APPROVAL_BUTTONS

        await fake.click(CHANNEL_ID, request.id, "Allow once")
        assert (await answers(fake, 1))[-1] == "Deleted the report."
        closed = await edited_away(fake, request.id)
        assert closed.content.endswith("✅ Allowed once by Alice.")
        # An old client still showing the buttons clicks again: nothing runs twice, the clicker
        # hears why.
        await fake.push_component(
            CHANNEL_ID, request.id, request.components[0]["components"][0]["custom_id"]
        )
        await wait_for(lambda: bool(fake.ephemerals(USER_ID)))
        again = fake.ephemerals(USER_ID)[0].content
        assert again.startswith("Already answered. ✅ Allowed once by Alice")
        await gw.sessions.wait_idle()
    assert runs(tmp_path) == ["delete_file /srv/report.txt"]
    # each click acknowledged at once
    assert [r["type"] for r in fake.interaction_responses] == [6, 6, 6]
    assert fake.late_interactions == []


async def test_deny_runs_nothing_and_the_model_says_so(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    fake = fake_discord
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/a"}), Reply("All right, /srv/a stays."))
    async with daemon(home, fake_llm, fake, tmp_path):
        await fake.push_message(CHANNEL_ID, f"{MENTION} delete /srv/a", mentions=[BOT_ID])
        request = await request_in(fake)
        await fake.click(CHANNEL_ID, request.id, "Deny")
        assert (await answers(fake, 1))[-1] == "All right, /srv/a stays."
        closed = await edited_away(fake, request.id)
    assert closed.content.endswith("🚫 Denied by Alice. Nothing was run.")
    assert runs(tmp_path) == [] and fake.ephemerals() == []
    assert "denied" in str(result_of(fake_llm)["content"])


async def test_a_restart_while_pending_then_allow_completes_the_turn_once(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    fake, clock = fake_discord, FakeClock()
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/b"}), Reply("Deleted /srv/b."))
    async with daemon(home, fake_llm, fake, tmp_path, clock):
        await fake.push_message(CHANNEL_ID, f"{MENTION} delete /srv/b", mentions=[BOT_ID])
        request = await request_in(fake)
    clock.advance(minutes=4)
    async with daemon(home, fake_llm, fake, tmp_path, clock):
        await fake.click(CHANNEL_ID, request.id, "Allow once")  # the same buttons, in the new life
        assert (await answers(fake, 1))[-1] == "Deleted /srv/b."
        await edited_away(fake, request.id)
    assert runs(tmp_path) == ["delete_file /srv/b"]
    assert len(fake_llm.anthropic_requests()) == 2
    # asked once
    assert len([m for m in fake.sent_messages(CHANNEL_ID) if m.components or m.edits]) == 1


async def test_an_expired_request_runs_nothing(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    fake, clock = fake_discord, FakeClock()
    fake_llm.script(
        ToolCall(DELETE, {"path": "/srv/c"}), Reply("Nobody allowed it, so /srv/c stays.")
    )
    async with daemon(home, fake_llm, fake, tmp_path, clock) as gw:
        assert gw.waits is not None
        await fake.push_message(CHANNEL_ID, f"{MENTION} delete /srv/c", mentions=[BOT_ID])
        request = await request_in(fake)
        clock.advance(minutes=10)
        assert gw.waits.expire_due() == 1
        assert (await answers(fake, 1))[-1] == "Nobody allowed it, so /srv/c stays."
        closed = await edited_away(fake, request.id)
    assert closed.content.endswith(
        "⌛ Expired: nobody answered within 10 minutes. Nothing was run."
    )
    assert runs(tmp_path) == []


async def test_ask_with_two_options_returns_the_clicked_one(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    fake = fake_discord
    fake_llm.script(
        ToolCall("ask", {"question": "Tea or coffee?", "options": ["Tea", "Coffee"]}),
        Reply("Coffee it is."),
    )
    async with daemon(home, fake_llm, fake, tmp_path):
        await fake.push_message(CHANNEL_ID, f"{MENTION} make me a drink", mentions=[BOT_ID])
        request = await request_in(fake)
        assert request.buttons() == ["Tea", "Coffee", "Something else"]
        await fake.click(CHANNEL_ID, request.id, "Coffee")
        assert (await answers(fake, 1))[-1] == "Coffee it is."
        closed = await edited_away(fake, request.id)
    assert closed.content.endswith("💬 Alice answered: Coffee")
    assert result_of(fake_llm)["content"] == "The user answered: Coffee"
