"""`when` → a job's schedule: ISO-8601 times in the person's zone, delays, `every`, cron read by
APScheduler's CronTrigger with standard weekday numbering; every refusal a sentence the model can
act on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.config.schedule import ScheduleConfig, parse_duration
from gateway.errors import ToolError
from gateway.scheduling.when import Schedule, next_run, parse_when, standard_weekdays

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday; 10:00 in Berlin (CET, UTC+1)
FIVE = timedelta(minutes=5)


def when(text: str, zone: str = "Europe/Berlin", *, now: datetime = NOW) -> Schedule:
    return parse_when(text, now=now, timezone=zone, min_interval=FIVE)


def refused(text: str, zone: str = "Europe/Berlin") -> str:
    with pytest.raises(ToolError) as err:
        when(text, zone)
    return str(err.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10m", 600),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("90 seconds", 90),
        ("1 week", 604800),
        ("2 hours 5 min", 7500),
    ],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "soon", "10", "m10", "1.5h", "-5m", "10m ago"])
def test_not_durations(text: str) -> None:
    assert parse_duration(text) is None


def test_a_delay_runs_once_that_long_from_now() -> None:
    for text, delta in (
        ("10m", timedelta(minutes=10)),
        ("in 2h", timedelta(hours=2)),
        ("1h30m", timedelta(hours=1.5)),
    ):
        schedule = when(text)
        assert (schedule.kind, schedule.first) == ("once", NOW + delta)
        assert schedule.following(schedule.first, schedule.first) is None


def test_an_iso_time_without_offset_is_in_the_persons_zone() -> None:
    assert when("2026-03-03T09:00").first == datetime(2026, 3, 3, 8, 0, tzinfo=UTC)  # 09:00 CET
    assert when("2026-03-03T09:00", "America/New_York").first == datetime(
        2026, 3, 3, 14, 0, tzinfo=UTC
    )
    assert when("2026-03-03 09:00").first == datetime(2026, 3, 3, 8, 0, tzinfo=UTC)
    summer = when("2026-07-01T09:00")  # CEST, UTC+2: the zone's rules, not a fixed offset
    assert summer.first == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)


def test_an_iso_time_with_an_offset_means_that_instant() -> None:
    assert when("2026-03-03T09:00+02:00").first == datetime(2026, 3, 3, 7, 0, tzinfo=UTC)
    assert when("2026-03-03T09:00Z").first == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)


def test_times_in_the_past_are_refused_with_the_current_time() -> None:
    text = refused("2026-03-02T09:30")  # 09:30 Berlin = 08:30 UTC, before NOW
    assert "not in the future" in text and "2026-03-02 10:00 CET (Europe/Berlin)" in text
    assert "not in the future" in refused("0m")


def test_unreadable_or_ambiguous_times_are_refused_with_the_accepted_forms() -> None:
    assert "ISO-8601" in refused("tomorrow at 9") and '"10m"' in refused("tomorrow at 9")
    assert "without a time" in refused("2026-03-05")
    assert "daylight saving" in refused("2026-03-29T02:30")  # Berlin skips 02:00-03:00 that night
    assert "ten years" in refused("2040-01-01T09:00")
    assert "Unknown time zone 'Mars/Base'" in refused("10m", "Mars/Base")


def test_cron_runs_in_the_zone_with_standard_weekdays() -> None:
    schedule = when("0 8 * * 1-5")  # weekdays at 08:00 Berlin
    assert schedule.kind == "cron" and schedule.spec == "0 8 * * mon,tue,wed,thu,fri"
    # Tuesday 08:00 CET (Monday's has passed)
    assert schedule.first == datetime(2026, 3, 3, 7, 0, tzinfo=UTC)
    friday = datetime(2026, 3, 6, 7, 0, tzinfo=UTC)
    assert next_run("cron", schedule.spec, "Europe/Berlin", friday, friday) == datetime(
        2026, 3, 9, 7, 0, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("field", "names"),
    [
        ("0", "sun"),
        ("7", "sun"),
        ("1-5", "mon,tue,wed,thu,fri"),
        ("mon-fri", "mon,tue,wed,thu,fri"),
        ("sat,sun", "sun,sat"),
        ("5-7", "sun,fri,sat"),
        ("5-0", "sun,fri,sat"),
        ("*/2", "sun,tue,thu,sat"),
        ("1-5/2", "mon,wed,fri"),
        ("*", "*"),
        ("0-6", "*"),
        ("Monday", "mon"),
    ],
)
def test_weekday_fields_follow_standard_cron(field: str, names: str) -> None:
    """APScheduler 3 counts weekdays from Monday = 0; the
    field is handed over as names so 0 stays Sunday."""
    assert standard_weekdays(field) == names


def test_a_sunday_job_runs_on_sunday() -> None:
    schedule = when("30 18 * * 0")
    assert schedule.first.astimezone(UTC) == datetime(2026, 3, 8, 17, 30, tzinfo=UTC)
    assert schedule.first.weekday() == 6


def test_cron_problems_are_refused() -> None:
    assert "too frequent" in refused("* * * * *") and "1m apart" in refused("* * * * *")
    assert "too frequent" in refused("0,1 9 * * *")  # once a day, but two runs a minute apart
    assert "too frequent" in refused("*/2 8 * * 1")
    assert "both the day of the month and the weekday" in refused("0 9 1 * 1")
    assert "never runs" in refused("0 0 30 2 *")
    assert "Cannot read the cron expression" in refused("61 * * * *")
    assert "not a weekday" in refused("0 8 * * 8")
    assert "runs backwards" in refused("0 8 * * fri-tue")


def test_frequent_enough_cron_and_macros_pass() -> None:
    assert when("*/5 * * * *").kind == "cron"  # exactly the minimum
    assert when("@daily").first == datetime(2026, 3, 2, 23, 0, tzinfo=UTC)  # midnight Berlin
    assert when("@hourly").spec == "0 * * * *"


def test_every_repeats_and_skips_what_was_missed() -> None:
    schedule = when("every 90m")
    assert (schedule.kind, schedule.spec, schedule.first) == (
        "every",
        "1h30m",
        NOW + timedelta(minutes=90),
    )
    due = schedule.first
    assert schedule.following(due, due) == due + timedelta(minutes=90)
    # the daemon was down for four hours: one run next, not three at once
    late = due + timedelta(hours=4)
    assert schedule.following(due, late) == due + timedelta(minutes=270)
    assert "too frequent" in refused("every 1m")
    assert "Cannot read the interval" in refused("every day at 9")


def test_missed_cron_runs_coalesce_into_the_next() -> None:
    due = datetime(2026, 3, 3, 7, 0, tzinfo=UTC)
    back = due + timedelta(days=2, hours=3)
    assert next_run("cron", "0 8 * * *", "Europe/Berlin", due, back) == datetime(
        2026, 3, 6, 7, 0, tzinfo=UTC
    )


def test_the_minimum_interval_is_configurable() -> None:
    hourly = timedelta(hours=1)
    with pytest.raises(ToolError):
        parse_when("*/30 * * * *", now=NOW, timezone="UTC", min_interval=hourly)
    assert parse_when("0 * * * *", now=NOW, timezone="UTC", min_interval=hourly).kind == "cron"


def test_schedule_config_checks_its_durations_and_zone() -> None:
    cfg = ScheduleConfig(misfire_grace="2h", min_interval="15m")
    assert (cfg.grace, cfg.shortest_interval) == (timedelta(hours=2), timedelta(minutes=15))
    with pytest.raises(ValueError, match="misfire_grace"):
        ScheduleConfig(misfire_grace="an hour")
    with pytest.raises(ValueError, match="unknown time zone"):
        ScheduleConfig(timezone="Nowhere/City")
