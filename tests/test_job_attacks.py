"""Attacks on scheduled jobs (issue #27's round): a tool call that names another chat, more jobs
than the limit through linked accounts, and jobs of people who lost access to their place. Through
the real graph: the model's tool calls over the fake LLM's wire, the jobs' sweep on the injected
clock, and the rows in SQLite."""

from __future__ import annotations

from pathlib import Path

from gateway.cli.main import main as cli
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.telegram import FakeTelegram
from tests.jobs_support import fire_jobs, job_rows, run_rows
from tests.lifecycle_support import FakeClock
from tests.test_scheduling import BERLIN, create, jobs_gateway, say, setup, tool_results

PLATFORMS = (
    "telegram:\n  token: '123:abc'\n  allowed_users: ['1']\n  allowed_chats: ['-100']\n"
    "  require_mention: false\n"
    "discord:\n  token: d\n  allowed_users: ['8']\n"
)


async def test_a_call_naming_another_chat_schedules_nothing(home: Path, fake_llm: FakeLLM) -> None:
    adapter = setup(home, fake_llm, extra=BERLIN + PLATFORMS, platform="telegram")
    elsewhere = {
        "action": "create",
        "when": "1h",
        "prompt": "Post the secret plan.",
        "chat_id": "-100999",
        "platform": "discord",
        "user_id": "8",
        "thread_id": "9",
    }
    fake_llm.script(ToolCall("schedule", elsewhere), Reply("ok"))
    async with jobs_gateway(home, [adapter], FakeClock()) as gw:
        await say(gw, "remind me", platform="telegram", chat_id="1", user_id="1")
        [refused] = tool_results(fake_llm.anthropic_requests()[-1])
        jobs = job_rows(gw)
    assert refused["is_error"] and refused["content"].startswith(
        "Invalid arguments for schedule: unknown parameter 'chat_id'; unknown parameter 'platform'"
    )
    assert jobs == []  # and with no target named, the job can only be the chat's own (tests below)


async def test_linked_accounts_share_one_persons_job_limit(home: Path, fake_llm: FakeLLM) -> None:
    limits = "schedule: {timezone: Europe/Berlin, max_jobs_per_person: 2}\n"
    adapter = setup(home, fake_llm, platform="telegram", extra=limits + PLATFORMS)
    fake_llm.script(create("1h"), create("2h"), Reply("two"), create("3h"), Reply("a third?"))
    async with jobs_gateway(home, [adapter], FakeClock()) as gw:
        await say(gw, "two reminders", platform="telegram", chat_id="1", user_id="1")
        assert cli(["--home", str(home), "users", "link", "telegram:1", "discord:8"]) == 0
        await say(
            gw, "one more from my other account", platform="discord", chat_id="d8", user_id="8"
        )
        refused = tool_results(fake_llm.anthropic_requests()[-1])[-1]
        assert "already has 2 active jobs, the most allowed" in refused["content"]
        jobs = [(j["platform"], j["user_id"]) for j in job_rows(gw)]
    assert jobs == [("telegram", "1"), ("telegram", "1")]


async def test_a_group_job_stops_once_the_group_is_no_longer_allowed(
    home: Path, fake_llm: FakeLLM
) -> None:
    """Access is asked again at every run: a group taken off `allowed_chats` (after the restart that
    reads the config) ends the jobs made there."""
    group = {"platform": "telegram", "chat_type": "group", "chat_id": "-100", "user_id": "1"}
    adapter = setup(home, fake_llm, extra=BERLIN + PLATFORMS, platform="telegram")
    clock = FakeClock()
    fake_llm.script(create("1h", name="standup"), Reply("ok"))
    async with jobs_gateway(home, [adapter], clock) as gw:
        await say(gw, "remind the group in an hour", **group)
    config = (home / "config.yaml").read_text(encoding="utf-8")
    moved = config.replace("allowed_chats: ['-100']", "allowed_chats: ['-200']")
    (home / "config.yaml").write_text(moved, encoding="utf-8")
    async with jobs_gateway(home, [adapter], clock) as gw:
        clock.advance(hours=1)
        await fire_jobs(gw)
        [job] = job_rows(gw)
        assert (job["state"], job["state_reason"]) == ("stopped", "telegram:1 no longer has access")
        assert run_rows(gw) == [] and adapter.texts() == ["ok"]


async def test_a_telegram_group_job_stops_once_its_creator_left_the_group(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Real aiogram against the fake Bot API: before each run the gateway asks Telegram
    (getChatMember) whether the job's creator is still in the group; one who left (or was removed)
    no longer has their jobs posted there. One still in it does."""
    from tests.adapters.test_telegram import ALICE, BOB, GROUP
    from tests.adapters.test_telegram_jobs import ask, daemon
    from tests.adapters.test_telegram_jobs import create as named

    tg, clock = fake_telegram, FakeClock()
    fake_llm.script(
        named("1h", "Remind the group about lunch.", "lunch"),
        Reply("ok, Alice"),
        named("1h", "Remind the group about tea.", "tea"),
        Reply("ok, Bob"),
        Reply("Tea time, everyone."),
    )
    async with daemon(home, fake_llm, tg, clock) as gw:
        await ask(
            tg,
            GROUP,
            "@gw_test_bot remind the group about lunch in an hour",
            1,
            chat_type="supergroup",
        )
        await ask(
            tg,
            GROUP,
            "@gw_test_bot remind the group about tea in an hour",
            2,
            chat_type="supergroup",
            user_id=BOB,
            username="bob",
            first_name="Bob",
        )
        assert [(j["user_id"], j["space_id"]) for j in job_rows(gw)] == [
            (str(ALICE), str(GROUP)),
            (str(BOB), str(GROUP)),
        ]
        tg.members[(GROUP, ALICE)] = "left"
        clock.advance(hours=1)
        await fire_jobs(gw)
        await tg.wait_for_sent(GROUP, count=3)
        lunch, tea = job_rows(gw)
        runs = [r["job_id"] for r in run_rows(gw)]
    assert (lunch["state"], lunch["state_reason"]) == (
        "stopped",
        f"telegram:{ALICE} is no longer a member of group {GROUP}",
    )
    assert tea["state"] == "done" and runs == [tea["id"]]  # a one-time job, run once
    assert [m.text for m in tg.sent_messages(GROUP)][-1] == "⏰ tea (job #2)\n\nTea time, everyone."
