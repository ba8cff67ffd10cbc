"""`/model` on Slack end to end, over Socket Mode and the signed HTTP endpoint: real slack-bolt
against the fake Web API. The list comes with Block Kit buttons; a click by an admin switches the
conversation like `/model NAME`, anyone else gets an ephemeral refusal, and the next request goes
to the chosen model (what the fake model server received)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.test_slack import ALICE, BOB, CHANNEL, USERS, mention, running
from tests.adapters.test_slack_approvals import Slack, request_in
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import BOT_USER_ID, FakeSlack


def models_yaml(llm: FakeLLM) -> str:
    return (
        f"access:\n  admins: ['slack:{ALICE}']\n"
        f"models:\n  fast:\n    provider: openai\n    name: gpt-fast\n"
        f"    base_url: {llm.openai_base_url}\n"
        f"    api_key: test-key\n    max_retries: 0\n"
    )


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_a_click_on_the_model_list_switches_for_an_admin_only(
    home: Path, fake_llm: FakeLLM, mode: str
) -> None:
    async with (
        FakeSlack(users=USERS) as fake,
        running(home, fake_llm, fake, models_yaml(fake_llm), mode=mode) as run,
    ):
        slack = Slack(fake, run, mode)
        asked = mention(f"<@{BOT_USER_ID}> /model")
        await slack.say(asked, "EvList")
        listed = await request_in(fake, CHANNEL)
        assert listed.buttons() == ["▸ default: claude-test", "fast: gpt-fast"]
        assert listed.text.startswith("Models (▸ answers in this conversation):")

        await slack.click(
            fake.block_actions(CHANNEL, listed.ts, "fast: gpt-fast", user_id=BOB, user_name="bob")
        )
        await fake.wait_until(lambda: bool(fake.ephemeral_for(BOB)))
        assert fake.ephemeral_for(BOB) == ["Only an admin can switch models here."]
        assert fake_llm.openai_requests() == []

        await slack.click(fake.block_actions(CHANNEL, listed.ts, "fast: gpt-fast"))
        switched = "Switched to fast (gpt-fast). Your next message is answered by it."
        await fake.wait_until(lambda: switched in [m.text for m in fake.posted(CHANNEL)])
        # the same conversation: the thread the list was posted in
        await slack.say(mention(f"<@{BOT_USER_ID}> and now?", thread_ts=asked["ts"]), "EvNext")
        await fake.wait_until(lambda: len(fake_llm.openai_requests()) == 1)
        assert fake_llm.openai_requests()[-1]["model"] == "gpt-fast"
        await run.gw.sessions.wait_idle()
