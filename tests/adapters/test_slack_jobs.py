"""`/agent jobs` on Slack: Slack keeps a bare `/jobs` typed in a message for slash commands of its own, so the
jobs command rides on the gateway's slash command (`/agent jobs`, `/agent jobs cancel ID`), answered only to the
asker. Real slack-bolt over Socket Mode against the fake Slack."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.adapters.test_slack import CHANNEL, USERS, running
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.slack import FakeSlack
from tests.jobs_support import job_rows


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(users=USERS) as fake:
        yield fake


async def test_agent_jobs_lists_and_cancels_the_askers_jobs(home: Path, fake_llm: FakeLLM, slack: FakeSlack) -> None:
    fake_llm.script(ToolCall("schedule", {"action": "create", "when": "0 9 * * 1", "prompt": "Weekly plan.",
                                          "name": "plan"}), Reply("Every Monday at 9."))
    async with running(home, fake_llm, slack, "schedule:\n  timezone: UTC\n") as run:
        await slack.push_slash_command("/agent", "plan my week every monday", channel_id=CHANNEL, trigger_id="t1")
        await slack.wait_until(lambda: len(slack.responses) >= 1)
        await slack.push_slash_command("/agent", "jobs", channel_id=CHANNEL, trigger_id="t2")
        await slack.wait_until(lambda: len(slack.responses) >= 2)
        listing = slack.responses[1]
        assert listing["response_type"] == "ephemeral"
        assert listing["text"].startswith('Your scheduled jobs:\n#1 "plan": cron `0 9 * * mon` (UTC); next ')
        await slack.push_slash_command("/agent", "jobs cancel 1", channel_id=CHANNEL, trigger_id="t3")
        await slack.wait_until(lambda: len(slack.responses) >= 3)
        assert slack.responses[2]["text"] == 'Cancelled job #1 "plan".'
        assert job_rows(run.gw)[0]["state"] == "cancelled"
        assert len(fake_llm.calls) == 2  # neither command reached the model
