"""`/agent jobs` on Slack: Slack keeps a bare `/jobs` typed in a message for slash commands of its
own, so the jobs command rides on the gateway's slash command (`/agent jobs`, `/agent jobs cancel
ID`), answered only to the asker. Real slack-bolt over Socket Mode against the fake Slack."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.adapters.test_slack import ALICE, CHANNEL, USERS, running
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.slack import TEAM_ID, FakeSlack
from tests.jobs_support import fire_jobs, job_rows, run_rows


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(users=USERS) as fake:
        yield fake


async def test_agent_jobs_lists_and_cancels_the_askers_jobs(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    fake_llm.script(
        ToolCall(
            "schedule",
            {"action": "create", "when": "0 9 * * 1", "prompt": "Weekly plan.", "name": "plan"},
        ),
        Reply("Every Monday at 9."),
    )
    async with running(home, fake_llm, slack, "schedule:\n  timezone: UTC\n") as run:
        await slack.push_slash_command(
            "/agent", "plan my week every monday", channel_id=CHANNEL, trigger_id="t1"
        )
        await slack.wait_until(lambda: len(slack.responses) >= 1)
        await slack.push_slash_command("/agent", "jobs", channel_id=CHANNEL, trigger_id="t2")
        await slack.wait_until(lambda: len(slack.responses) >= 2)
        listing = slack.responses[1]
        assert listing["response_type"] == "ephemeral"
        assert listing["text"].startswith(
            'Your scheduled jobs:\n#1 "plan": cron `0 9 * * mon` (UTC); next '
        )
        await slack.push_slash_command(
            "/agent", "jobs cancel 1", channel_id=CHANNEL, trigger_id="t3"
        )
        await slack.wait_until(lambda: len(slack.responses) >= 3)
        assert slack.responses[2]["text"] == 'Cancelled job #1 "plan".'
        assert job_rows(run.gw)[0]["state"] == "cancelled"
        assert len(fake_llm.calls) == 2  # neither command reached the model


def reminders(slack: FakeSlack) -> list[str]:
    return [m.text for m in slack.posted(CHANNEL) if m.text.startswith("⏰")]


@pytest.mark.parametrize("how", ["deactivated", "unknown to Slack"])
async def test_a_job_stops_once_its_creators_account_is_deactivated(
    how: str, home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    """Someone who left the company (their Slack account deactivated) is still on the allowlist in
    config.yaml; their hourly job must not go on posting in the team's channel. Slack is asked
    (users.info) before each run."""
    fake_llm.script(
        ToolCall(
            "schedule",
            {
                "action": "create",
                "when": "0 * * * *",
                "prompt": "Post the standup.",
                "name": "standup",
            },
        ),
        Reply("Hourly."),
        Reply("Standup time."),
    )
    async with running(home, fake_llm, slack, "schedule:\n  timezone: UTC\n") as run:
        await slack.push_slash_command(
            "/agent", "standup reminder every hour", channel_id=CHANNEL, trigger_id="t1"
        )
        await slack.wait_until(lambda: len(job_rows(run.gw)) == 1 and len(slack.responses) >= 1)
        assert job_rows(run.gw)[0]["space_id"] == TEAM_ID
        run.clock.t += 3600
        await fire_jobs(run.gw)
        assert reminders(slack) == ["⏰ *standup* (job #1)\n\nStandup time."]
        if how == "deactivated":
            slack.users[ALICE] = {**USERS[ALICE], "deleted": True}
        else:
            slack.fail("users.info", Fault(200, {"ok": False, "error": "user_not_found"}))
        run.clock.t += 3600
        await fire_jobs(run.gw)
        [job] = job_rows(run.gw)
        gone = f"slack:{ALICE} is no longer a member of workspace {TEAM_ID}"
        assert (job["state"], job["state_reason"]) == ("stopped", gone)
        assert (
            len(reminders(slack)) == 1 and len(run_rows(run.gw)) == 1 and len(fake_llm.calls) == 3
        )


async def test_when_slack_cannot_say_the_job_runs(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    fake_llm.script(
        ToolCall(
            "schedule",
            {"action": "create", "when": "1h", "prompt": "Post the standup.", "name": "standup"},
        ),
        Reply("In an hour."),
        Reply("Standup time."),
    )
    async with running(home, fake_llm, slack, "schedule:\n  timezone: UTC\n") as run:
        await slack.push_slash_command(
            "/agent", "standup reminder in an hour", channel_id=CHANNEL, trigger_id="t1"
        )
        await slack.wait_until(lambda: len(job_rows(run.gw)) == 1 and len(slack.responses) >= 1)
        slack.fail("users.info", Fault(500))
        run.clock.t += 3600
        await fire_jobs(run.gw)
        assert reminders(slack) == ["⏰ *standup* (job #1)\n\nStandup time."]
        assert [r["status"] for r in run_rows(run.gw)] == ["done"]
