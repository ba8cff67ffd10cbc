"""`/model` on Discord end to end: real discord.py against the fake gateway and REST. The list
comes with one button per model (message components); a click by an admin switches the
conversation like `/model NAME`, anyone else hears an ephemeral refusal, and the next request goes
to the chosen model (what the fake model server received)."""

from __future__ import annotations

from pathlib import Path

from adapters.discord.adapter import DiscordAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import build_gateway
from tests.adapters.test_discord import MENTION, _no_wait, discord_yaml, wait_for
from tests.adapters.test_discord_approvals import answers, request_in
from tests.fakes.discord import BOT_ID, CHANNEL_ID, OTHER_USER_ID, USER_ID, FakeDiscord
from tests.fakes.llm import FakeLLM
from tests.helpers import write_config


def models_yaml(llm: FakeLLM) -> str:
    return (
        f"access:\n  admins: ['discord:{USER_ID}']\n"
        f"models:\n  fast:\n    provider: openai\n    name: gpt-fast\n"
        f"    base_url: {llm.openai_base_url}\n"
        f"    api_key: test-key\n    max_retries: 0\n"
    )


async def test_a_click_on_the_model_list_switches_for_an_admin_only(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    fake = fake_discord
    write_config(home, base_url=fake_llm.base_url, extra=discord_yaml(fake, models_yaml(fake_llm)))
    config = load_config(home, env={})
    assert config.discord is not None
    adapter = DiscordAdapter(config.discord, guild_ready_timeout=0.1)
    gw = build_gateway(config, env={}, adapters=[adapter], probe_ollama=False, sleep=_no_wait)
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    try:
        await fake.push_message(CHANNEL_ID, f"{MENTION} /model", mentions=[BOT_ID])
        listed = await request_in(fake)
        assert listed.buttons() == ["▸ default: claude-test", "fast: gpt-fast"]
        assert listed.content.startswith("Models (▸ answers in this conversation):")

        await fake.click(CHANNEL_ID, listed.id, "fast: gpt-fast", user_id=OTHER_USER_ID, name="bob")
        await wait_for(lambda: bool(fake.ephemerals(OTHER_USER_ID)))
        assert [m.content for m in fake.ephemerals(OTHER_USER_ID)] == [
            "Only an admin can switch models here."
        ]
        assert fake_llm.openai_requests() == []

        await fake.click(CHANNEL_ID, listed.id, "fast: gpt-fast")
        switched = await answers(fake, 1)
        assert switched[-1] == "Switched to fast (gpt-fast). Your next message is answered by it."
        await fake.push_message(CHANNEL_ID, f"{MENTION} and now?", mentions=[BOT_ID])
        await answers(fake, 2)
        assert fake_llm.openai_requests()[-1]["model"] == "gpt-fast"
        assert fake.late_interactions == []
    finally:
        await daemon.stop()
