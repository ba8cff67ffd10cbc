"""`/jobs` as a Discord slash command: real discord.py against the fake gateway and REST; the list is shown only
to the asker, and the optional `cancel` id stops one of their jobs."""

from __future__ import annotations

from pathlib import Path

from tests.adapters.test_discord import running, wait_for
from tests.fakes.discord import CHANNEL_ID, FakeDiscord
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.jobs_support import job_rows


async def test_jobs_slash_command_lists_privately_and_cancels(home: Path, fake_llm: FakeLLM,
                                                              fake_discord: FakeDiscord) -> None:
    fake_llm.script(ToolCall("schedule", {"action": "create", "when": "0 9 * * 1", "prompt": "Weekly plan.",
                                          "name": "plan"}), Reply("Every Monday at 9."))
    async with running(home, fake_llm, fake_discord, "schedule:\n  timezone: UTC\n") as run:
        await fake_discord.push_interaction("ask", options=[{"name": "prompt", "type": 3, "value": "plan weekly"}])
        await wait_for(lambda: len(fake_discord.sent) == 1 and bool(fake_discord.sent[0].edits))
        await fake_discord.push_interaction("jobs")
        await wait_for(lambda: len(fake_discord.sent) == 2 and bool(fake_discord.sent[1].edits))
        listing = fake_discord.sent_messages(CHANNEL_ID)[1]
        assert fake_discord.interaction_responses[1]["data"]["flags"] == 64  # only the asker sees their jobs
        assert listing.content.startswith('Your scheduled jobs:\n#1 "plan": cron `0 9 * * mon` (UTC); next ')
        await fake_discord.push_interaction("jobs", options=[{"name": "cancel", "type": 4, "value": 1}])
        await wait_for(lambda: len(fake_discord.sent) == 3 and bool(fake_discord.sent[2].edits))
        assert fake_discord.sent_messages(CHANNEL_ID)[2].content == 'Cancelled job #1 "plan".'
        assert job_rows(run.gw)[0]["state"] == "cancelled"
        assert run.inbound_texts()[1:] == ["/jobs", "/jobs cancel 1"]
