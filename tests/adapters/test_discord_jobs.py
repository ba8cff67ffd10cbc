"""Jobs on Discord: real discord.py against the fake gateway and REST. `/jobs` as a slash command
(the list is shown only to the asker, the optional `cancel` id stops one of their jobs), and access
by server role asked again at every run: a job whose creator lost the role or left the server
stops."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from adapters.discord.adapter import DiscordAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.adapters.test_discord import _no_wait, discord_yaml, running, wait_for
from tests.fakes.base import Fault
from tests.fakes.discord import CHANNEL_ID, GUILD_ID, USER_ID, FakeDiscord, patch_discord_urls
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import write_config
from tests.jobs_support import fire_jobs, job_rows, run_rows
from tests.lifecycle_support import FakeClock


async def test_jobs_slash_command_lists_privately_and_cancels(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    fake_llm.script(
        ToolCall(
            "schedule",
            {"action": "create", "when": "0 9 * * 1", "prompt": "Weekly plan.", "name": "plan"},
        ),
        Reply("Every Monday at 9."),
    )
    async with running(home, fake_llm, fake_discord, "schedule:\n  timezone: UTC\n") as run:
        await fake_discord.push_interaction(
            "ask", options=[{"name": "prompt", "type": 3, "value": "plan weekly"}]
        )
        await wait_for(lambda: len(fake_discord.sent) == 1 and bool(fake_discord.sent[0].edits))
        await fake_discord.push_interaction("jobs")
        await wait_for(lambda: len(fake_discord.sent) == 2 and bool(fake_discord.sent[1].edits))
        listing = fake_discord.sent_messages(CHANNEL_ID)[1]
        # only the asker sees their jobs
        assert fake_discord.interaction_responses[1]["data"]["flags"] == 64
        assert listing.content.startswith(
            'Your scheduled jobs:\n#1 "plan": cron `0 9 * * mon` (UTC); next '
        )
        await fake_discord.push_interaction(
            "jobs", options=[{"name": "cancel", "type": 4, "value": 1}]
        )
        await wait_for(lambda: len(fake_discord.sent) == 3 and bool(fake_discord.sent[2].edits))
        assert fake_discord.sent_messages(CHANNEL_ID)[2].content == 'Cancelled job #1 "plan".'
        assert job_rows(run.gw)[0]["state"] == "cancelled"
        assert run.inbound_texts()[1:] == ["/jobs", "/jobs cancel 1"]


# ------------------------------------------------------------------------------- access at run time
ROLE = "900000000000000001"
# no allowed_users: the role admits
ROLES_ONLY = f"  allowed_roles: ['{ROLE}']\nschedule:\n  timezone: UTC\n"


@asynccontextmanager
async def role_daemon(
    home: Path, llm: FakeLLM, fake: FakeDiscord, clock: FakeClock
) -> AsyncIterator[Gateway]:
    """The daemon with real discord.py, access by server
    role only, and the injected clock for the jobs."""
    write_config(
        home,
        provider="anthropic",
        base_url=llm.base_url,
        extra=discord_yaml(fake, ROLES_ONLY, users=()),
    )
    config = load_config(home, env={})
    assert config.discord is not None
    gw = build_gateway(
        config,
        env={},
        adapters=[DiscordAdapter(config.discord, guild_ready_timeout=0.1)],
        probe_ollama=False,
        sleep=_no_wait,
        clock=clock,
    )
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    try:
        yield gw
    finally:
        await daemon.stop()


@pytest.fixture
async def role_discord() -> AsyncIterator[FakeDiscord]:
    fake = FakeDiscord(roles={ROLE: "gateway-users"})
    fake.member_roles[USER_ID] = [ROLE]
    await fake.start()
    with patch_discord_urls(fake):
        yield fake
    await fake.stop()


async def made_a_job(fake: FakeDiscord, gw: Gateway) -> None:
    await fake.push_interaction(
        "ask", options=[{"name": "prompt", "type": 3, "value": "water the plants hourly"}]
    )
    await wait_for(lambda: len(job_rows(gw)) == 1 and bool(fake.sent) and bool(fake.sent[0].edits))
    [job] = job_rows(gw)
    assert (job["space_id"], json.loads(job["roles"])) == (GUILD_ID, [ROLE])  # admitted by the role


def posted(fake: FakeDiscord) -> list[str]:
    return [m.content for m in fake.sent_messages(CHANNEL_ID) if m.content.startswith("⏰")]


@pytest.mark.parametrize("change", ["role taken", "left the server"])
async def test_a_job_stops_once_its_creator_lost_the_role_or_left(
    change: str, home: Path, fake_llm: FakeLLM, role_discord: FakeDiscord
) -> None:
    """Access by a Discord role is asked again at every
    run, as Discord says it is then (GET guild member)."""
    fake, clock = role_discord, FakeClock()
    fake_llm.script(
        ToolCall(
            "schedule",
            {
                "action": "create",
                "when": "0 * * * *",
                "prompt": "Water the plants.",
                "name": "plants",
            },
        ),
        Reply("Hourly."),
        Reply("Water them now."),
    )
    async with role_daemon(home, fake_llm, fake, clock) as gw:
        await made_a_job(fake, gw)
        clock.advance(hours=1)
        await fire_jobs(gw)  # still a member with the role: it runs
        assert posted(fake) == ["⏰ **plants** (job #1)\n\nWater them now."]
        if change == "role taken":
            fake.member_roles[USER_ID] = []
        else:
            fake.departed.add(USER_ID)
        clock.advance(hours=1)
        await fire_jobs(gw)
        [job] = job_rows(gw)
        reason = (
            f"discord:{USER_ID} no longer has access"
            if change == "role taken"
            else f"discord:{USER_ID} is no longer a member of server {GUILD_ID}"
        )
        assert (job["state"], job["state_reason"]) == ("stopped", reason)
        assert len(posted(fake)) == 1 and len(run_rows(gw)) == 1 and len(fake_llm.calls) == 3
        assert any(c.name == "GET /guilds/{gid}/members/{uid}" for c in fake.calls)


async def test_when_discord_cannot_say_the_roles_the_job_has_are_used(
    home: Path, fake_llm: FakeLLM, role_discord: FakeDiscord
) -> None:
    fake, clock = role_discord, FakeClock()
    fake_llm.script(
        ToolCall(
            "schedule",
            {"action": "create", "when": "1h", "prompt": "Water the plants.", "name": "plants"},
        ),
        Reply("In an hour."),
        Reply("Water them now."),
    )
    async with role_daemon(home, fake_llm, fake, clock) as gw:
        await made_a_job(fake, gw)
        fake.fail("GET /guilds/{gid}/members/{uid}", Fault(403))  # e.g. the bot lost a permission
        clock.advance(hours=1)
        await fire_jobs(gw)
        assert posted(fake) == ["⏰ **plants** (job #1)\n\nWater them now."]
        assert [r["status"] for r in run_rows(gw)] == ["done"]
