"""A person's own time zone: "remind me at 9" means 9 where they live. The model saves it with the
`schedule` tool (action=set_timezone) or the operator with `gateway users timezone`; it is kept with
the person in SQLite (across restarts and linked identities) and read for every later job of theirs.
Through the real gateway graph, the fake LLM's wire and the injected clock (START is 09:00 UTC =
10:00 in Berlin = 04:00 in New York)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from gateway.cli import users
from gateway.cli.main import build_parser
from gateway.config.settings import load_config
from gateway.knowledge.people import PeopleBook
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter
from tests.jobs_support import fire_jobs, job_rows
from tests.lifecycle_support import FakeClock
from tests.test_scheduling import create, jobs_gateway, say, setup, tool_results

NEW_YORK = "America/New_York"


def set_zone(zone: str) -> ToolCall:
    return ToolCall("schedule", {"action": "set_timezone", "timezone": zone})


def results(fake_llm: FakeLLM) -> list[str]:
    return [str(r["content"]) for r in tool_results(fake_llm.anthropic_requests()[-1])]


def cli_users(home: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    args = build_parser().parse_args(["--home", str(home), "users", *argv])
    return users.run(args, load_config(home, env={}), out=out), out.getvalue()


TELEGRAM = (
    "schedule: {timezone: Europe/Berlin}\ntelegram:\n  token: t\n  allowed_users: ['1', '2']\n"
)
ANN = {"platform": "telegram", "chat_id": "1", "user_id": "1"}
BOB = {"platform": "telegram", "chat_id": "2", "user_id": "2"}


async def test_a_saved_time_zone_reads_at_9_as_9_where_the_person_lives(
    home: Path, fake_llm: FakeLLM
) -> None:
    # the gateway's zone: Europe/Berlin
    adapter = setup(home, fake_llm, extra=TELEGRAM, platform="telegram")
    clock = FakeClock()
    fake_llm.script(
        set_zone(NEW_YORK),
        create("2031-01-06T09:00", name="bank"),
        Reply("At 9 your time."),
        create("2031-01-07T09:00", name="gym"),
        Reply("At 9 Berlin time."),
        ToolCall("schedule", {"action": "list"}),
        Reply("listed"),
        Reply("Call the bank now."),
    )
    async with jobs_gateway(home, [adapter], clock) as gw:
        await say(gw, "I live in New York. Remind me at 9 to call the bank.", **ANN)
        saved, made = results(fake_llm)
        assert saved.startswith(
            "Saved America/New_York as this person's time zone (it is 2031-01-06 04:00 EST there)."
        )
        assert made.startswith('Scheduled job #1 "bank" for 2031-01-06 09:00 EST (in 5 h)')
        assert "gateway's time zone" not in made
        await say(gw, "remind me tomorrow at 9 to go to the gym", **BOB)  # no zone of their own
        [berlin] = results(fake_llm)[-1:]
        assert berlin.startswith('Scheduled job #2 "gym" for 2031-01-07 09:00 CET (in 23 h)')
        assert (
            "read in Europe/Berlin, the gateway's time zone, "
            "because this person has not saved their own" in berlin
        )
        assert [(j["timezone"], j["next_run_at"][11:16]) for j in job_rows(gw)] == [
            (NEW_YORK, "14:00"),
            ("Europe/Berlin", "08:00"),
        ]
        await say(gw, "what have I scheduled?", **ANN)
        assert results(fake_llm)[-1].startswith(
            "Now: 2031-01-06 04:00 EST in America/New_York, this person's "
            'time zone.\n#1 "bank": once at 2031-01-06 09:00 EST (in 5 h)'
        )
        clock.advance(hours=5)
        await fire_jobs(gw)
        assert adapter.texts()[-1] == "⏰ bank (job #1)\n\nCall the bank now."


async def test_the_zone_is_kept_across_a_restart_and_read_for_cron_jobs(
    home: Path, fake_llm: FakeLLM
) -> None:
    adapter = setup(home, fake_llm)
    clock = FakeClock()
    fake_llm.script(set_zone(NEW_YORK), Reply("Saved."))
    async with jobs_gateway(home, [adapter], clock) as gw:
        await say(gw, "I'm in New York")
    fake_llm.script(
        create("0 8 * * 1-5", prompt="Plan the day.", name="plan"), Reply("Weekdays at 8.")
    )
    async with jobs_gateway(home, [RecordingAdapter("cli")], clock) as gw:
        await say(gw, "every weekday at 8, help me plan the day")
        [job] = job_rows(gw)
        assert (job["timezone"], job["next_run_at"]) == (
            NEW_YORK,
            "2031-01-06T13:00:00.000000+00:00",
        )
        assert "gateway's time zone" not in results(fake_llm)[-1]


async def test_a_delay_or_an_explicit_zone_needs_no_saved_zone(
    home: Path, fake_llm: FakeLLM
) -> None:
    adapter = setup(home, fake_llm)
    fake_llm.script(
        create("2h"),
        create("2031-01-07T09:00", timezone="Asia/Tokyo"),
        create("2031-01-06T20:00+00:00"),
        set_zone("Mars/Olympus_Mons"),
        set_zone(" "),
        Reply("ok"),
    )
    async with jobs_gateway(home, [adapter], FakeClock()) as gw:
        await say(gw, "several")
        delay, tokyo, offset, mars, empty = results(fake_llm)
        assert "gateway's time zone" not in delay + tokyo + offset
        assert tokyo.startswith("Scheduled job #2 for 2031-01-07 09:00 JST (in 15 h)")
        assert mars.startswith("Unknown time zone 'Mars/Olympus_Mons': use an IANA name")
        assert empty.startswith("action=set_timezone needs `timezone`")
        # the console and web chat are the local owner
        person = PeopleBook(gw.store).find("web:owner")
        assert person is None or person.timezone is None  # nothing saved by a refused name


async def test_the_operator_sets_shows_and_clears_a_persons_zone(
    home: Path, fake_llm: FakeLLM
) -> None:
    adapter = setup(
        home,
        fake_llm,
        extra="schedule: {timezone: Europe/Berlin}\ntelegram:\n  token: t\n"
        "  allowed_users: ['7']\n",
        platform="telegram",
    )
    fake_llm.script(create("2031-01-07T09:00"), Reply("ok"))
    assert cli_users(home, "timezone", "telegram:7", "Asia/Tokyo")[0] == 0  # before they ever wrote
    code, shown = cli_users(home, "timezone", "telegram:7")
    assert code == 0 and shown.strip().endswith(": Asia/Tokyo")
    code, shown = cli_users(home, "show", "telegram:7")
    assert "Time zone: Asia/Tokyo" in shown
    async with jobs_gateway(home, [adapter], FakeClock()) as gw:
        await say(gw, "remind me at 9", platform="telegram", chat_id="7", user_id="7")
        assert job_rows(gw)[0]["timezone"] == "Asia/Tokyo"
    code, out = cli_users(home, "timezone", "telegram:7", "--clear")
    assert code == 0 and "cleared" in out
    assert (
        cli_users(home, "timezone", "telegram:7")[1]
        .strip()
        .endswith("no time zone of their own (the gateway's is used)")
    )


def test_a_bad_zone_from_the_terminal_is_a_clear_error(
    home: Path, fake_llm: FakeLLM, capsys: Any
) -> None:
    from gateway.cli.main import main

    setup(home, fake_llm)
    assert main(["--home", str(home), "users", "timezone", "web:owner", "Europe/Berln"]) != 0
    assert "unknown time zone 'Europe/Berln'" in capsys.readouterr().err


async def test_linking_keeps_a_zone_from_either_side(home: Path, fake_llm: FakeLLM) -> None:
    setup(home, fake_llm, extra="")
    assert cli_users(home, "timezone", "telegram:1", "Europe/Lisbon")[0] == 0
    # discord:2 had none: it takes Lisbon
    assert cli_users(home, "link", "discord:2", "telegram:1")[0] == 0
    assert cli_users(home, "timezone", "telegram:1")[1].strip().endswith(": Europe/Lisbon")
