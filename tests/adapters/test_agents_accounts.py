"""Two bot accounts on Slack and on Discord, each bound to its own agent: every answer goes out
through the bot that was spoken to, never the other, whatever ids the two bots' chats share. Real
slack-bolt (Socket Mode, one app per account, each its own fake workspace) and real discord.py (two
bots on one fake Discord, as on the real one: discord.py's endpoints are process-wide)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway, platform_adapters
from tests.fakes.discord import BOT_ID, CHANNEL_ID, TOKEN, USER_ID, FakeDiscord, patch_discord_urls
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack
from tests.helpers import write_config

WORK_IDENTITY = "You are Ledger, the team's work assistant."
OPS_IDENTITY = "You are Pager, the on-call assistant."
AGENTS = f"""\
agents:
  work: {{identity: "{WORK_IDENTITY}"}}
  ops: {{identity: "{OPS_IDENTITY}"}}
"""


@asynccontextmanager
async def daemon(home: Path, llm: FakeLLM, extra: str) -> AsyncIterator[Gateway]:
    write_config(home, provider="anthropic", base_url=llm.base_url, extra=extra)
    config = load_config(home, env={})
    adapters = platform_adapters(config)
    for adapter in adapters:  # quick to be ready against the fakes
        if hasattr(adapter, "guild_ready_timeout"):
            adapter.guild_ready_timeout = 0.1
    gw = build_gateway(config, env={}, adapters=adapters, probe_ollama=False)
    run = Daemon(gw, install_signals=False)
    await run.start()
    try:
        yield gw
    finally:
        await run.stop()


def system_of(llm: FakeLLM, asked: str) -> str:
    """The system prompt of the model request that answered `asked`."""
    for body in llm.anthropic_requests():
        if asked in str(body["messages"][-1]):
            return "".join(block["text"] for block in body["system"])
    raise AssertionError(f"no request answered {asked!r}")


# ------------------------------------------------------------------------------------------ Slack
def slack_yaml(work: FakeSlack, ops: FakeSlack) -> str:
    return f"""\
web:
  enabled: false
slack:
  allowed_users: [U1]
  accounts:
    work:
      bot_token: '{work.bot_token}'
      app_token: '{work.app_token}'
      api_url: '{work.api_base_url}'
    ops:
      bot_token: '{ops.bot_token}'
      app_token: '{ops.app_token}'
      api_url: '{ops.api_base_url}'
{AGENTS}bindings:
  - {{agent: work, platform: slack, account: work}}
  - {{agent: ops, platform: slack, account: ops}}
"""


def slack_dm(text: str, ts: str) -> dict[str, Any]:
    return {
        "type": "message",
        "channel_type": "im",
        "channel": "D1",
        "user": "U1",
        "text": text,
        "ts": ts,
    }


async def test_two_slack_apps_answer_each_through_itself(home: Path, fake_llm: FakeLLM) -> None:
    users = {"U1": {"id": "U1", "name": "alice", "real_name": "Alice"}}
    work = FakeSlack(bot_token="xoxb-work", app_token="xapp-work", bot_user_id="UWORK", users=users)
    ops = FakeSlack(bot_token="xoxb-ops", app_token="xapp-ops", bot_user_id="UOPS", users=users)
    async with work, ops, daemon(home, fake_llm, slack_yaml(work, ops)) as gw:
        await work.wait_for_connections()
        await ops.wait_for_connections()
        # the same DM id and the same message ts in both workspaces: two messages all the same
        await work.push_event(slack_dm("status of the release?", "1700000000.000100"))
        await ops.push_event(slack_dm("who is on call?", "1700000000.000100"))
        work_reply = await work.wait_for_post("D1")
        ops_reply = await ops.wait_for_post("D1")
        await gw.sessions.wait_idle()
        assert work_reply.text.startswith("echo: status of the release?")
        assert ops_reply.text.startswith("echo: who is on call?")
        assert [m.text for m in work.posted()] == [work_reply.text]  # nothing of ops's here
        assert [m.text for m in ops.posted()] == [ops_reply.text]
        assert WORK_IDENTITY in system_of(fake_llm, "status of the release?")
        assert OPS_IDENTITY in system_of(fake_llm, "who is on call?")
        keys = {r["key"] for r in gw.store.all("SELECT key FROM sessions")}
        assert keys == {"work/slack@work:dm:D1", "ops/slack@ops:dm:D1"}


# ---------------------------------------------------------------------------------------- Discord
OPS_TOKEN, OPS_BOT = "FAKE.DISCORD.OPS.TOKEN", "100000000000000009"


def discord_yaml(fake: FakeDiscord) -> str:
    """The section's own token is the account `default` (the first bot); `ops` is the second."""
    return f"""\
web:
  enabled: false
discord:
  token: '{TOKEN}'
  api_base: {fake.base_url}/api/v10
  gateway_url: {fake.ws_url}
  allowed_users: ['{USER_ID}']
  accounts:
    ops: {{token: '{OPS_TOKEN}'}}
{AGENTS}bindings:
  - {{agent: work, platform: discord, account: default}}
  - {{agent: ops, platform: discord, account: ops}}
"""


async def test_two_discord_bots_answer_each_through_itself(home: Path, fake_llm: FakeLLM) -> None:
    fake = FakeDiscord()
    fake.add_bot(OPS_TOKEN, OPS_BOT, "pager")
    await fake.start()
    try:
        with patch_discord_urls(fake):
            async with daemon(home, fake_llm, discord_yaml(fake)) as gw:
                await _two_bots(fake, fake_llm, gw)
    finally:
        await fake.stop()


async def _two_bots(fake: FakeDiscord, llm: FakeLLM, gw: Gateway) -> None:
    assert {i["token"] for i in fake.identifies} == {TOKEN, OPS_TOKEN}
    await fake.push_message("600000000000000001", "a DM to ledger", bot=BOT_ID)
    await fake.push_message("600000000000000002", "a DM to pager", bot=OPS_BOT)
    await fake.push_message(CHANNEL_ID, f"<@{OPS_BOT}> the server is down", mentions=[OPS_BOT])
    ledger = await fake.wait_for_sent("600000000000000001")
    pager = await fake.wait_for_sent("600000000000000002")
    channel = await fake.wait_for_sent(CHANNEL_ID)
    await gw.sessions.wait_idle()
    assert (ledger.author_id, pager.author_id, channel.author_id) == (BOT_ID, OPS_BOT, OPS_BOT)
    assert "a DM to ledger" in ledger.content and "the server is down" in channel.content
    assert len(fake.sent_messages(CHANNEL_ID)) == 1  # the first bot was not spoken to there
    assert WORK_IDENTITY in system_of(llm, "a DM to ledger")
    assert OPS_IDENTITY in system_of(llm, "the server is down")
