"""When a job runs: the `when` a person gives (through the model) → a Schedule that knows its next
run times.

Four forms: an ISO-8601 date-time (once), a delay such as "10m" or "1h30m" (once), "every 90m" and a
5-field cron expression (recurring). Cron is read by APScheduler's CronTrigger; only the day-of-week
field is translated first (`standard_weekdays`). Every refusal is a ToolError whose text tells the
model how to correct its call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

from gateway.config.schedule import parse_duration
from gateway.errors import ToolError

Kind = Literal["once", "cron", "every"]
# ten years: further than any reminder, near enough that no date overflows
MAX_AHEAD = timedelta(days=3653)
# fire times walked to find a cron expression's shortest gap (two days of */5 is 577)
GAP_SAMPLES = 1500
TICK = timedelta(microseconds=1)
MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # standard cron: 0 (and 7) is Sunday
WEEKDAY_NAMES = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_CRON_FIELD = re.compile(r"[\w*/,\-?#]+")
WHEN_HELP = (
    'Use an ISO-8601 date-time ("2026-03-03T09:00"), a delay ("10m", "2h", "1d", "1h30m"), "every '
    '90m", or a 5-field cron expression ("0 8 * * 1-5" = weekdays at 08:00).'
)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A job's timing: `spec` is what is stored (the UTC
    instant, the cron expression or the interval)."""

    kind: Kind
    spec: str
    timezone: str
    first: datetime  # UTC

    @property
    def is_recurring(self) -> bool:
        return self.kind != "once"

    def following(self, due: datetime, now: datetime) -> datetime | None:
        return next_run(self.kind, self.spec, self.timezone, due, now)


def next_run(kind: str, spec: str, timezone: str, due: datetime, now: datetime) -> datetime | None:
    """The run after the one due at `due`, skipping any already past at `now` (missed runs coalesce
    into the next one); None for a one-off. `kind`, `spec` and `timezone` as stored (checked when
    the job was made)."""
    if kind == "once":
        return None
    if kind == "every":
        step = interval(spec)
        behind = max(now - due, timedelta(0))
        return due + step * (int(behind / step) + 1)
    found = cron_trigger(spec, zone(timezone)).get_next_fire_time(None, max(due, now) + TICK)
    return None if found is None else found.astimezone(UTC)


def zone(name: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(
            f"Unknown time zone {name!r}: use an IANA name such as Europe/Berlin or "
            "America/New_York."
        ) from None


def interval(spec: str) -> timedelta:
    found = parse_duration(spec)
    if found is None:
        raise ToolError(f"Cannot read the interval {spec!r}. {WHEN_HELP}")
    return found


def parse_when(text: str, *, now: datetime, timezone: str, min_interval: timedelta) -> Schedule:
    """Read `when` (see the module docstring) at `now`;
    ISO times without an offset are in `timezone`."""
    tz = zone(timezone)
    when = " ".join(text.split())
    if not when:
        raise ToolError(f"`when` is empty. {WHEN_HELP}")
    lowered = when.lower()
    if lowered.startswith("every "):
        return _every(when[6:], now, timezone, min_interval)
    if lowered in MACROS or _looks_like_cron(when):
        return _cron(MACROS.get(lowered, when), now, tz, timezone, min_interval)
    delay = parse_duration(lowered.removeprefix("in "))
    if delay is not None:
        return _once(now + delay, now, tz, timezone, when)
    return _once(_instant(when, tz, now), now, tz, timezone, when)


def _looks_like_cron(when: str) -> bool:
    fields = when.split(" ")
    return len(fields) == 5 and all(_CRON_FIELD.fullmatch(f) for f in fields) and ":" not in when


def _once(at: datetime, now: datetime, tz: tzinfo, timezone: str, given: str) -> Schedule:
    if at <= now:
        raise ToolError(
            f"{given!r} is not in the future: now is {local_text(now, tz)} ({timezone}). "
            "Give a later time."
        )
    if at - now > MAX_AHEAD:
        raise ToolError(f"{given!r} is more than ten years away; schedule something nearer.")
    at = at.astimezone(UTC)
    return Schedule("once", at.isoformat(), timezone, at)


def _instant(when: str, tz: tzinfo, now: datetime) -> datetime:
    try:
        parsed = datetime.fromisoformat(when)
    except ValueError:
        raise ToolError(f"Cannot read `when` = {when!r}. {WHEN_HELP}") from None
    if len(when) <= 10:  # a date alone: which hour was meant is a guess we do not make
        raise ToolError(f"{when!r} is a date without a time; add the time, e.g. {when}T09:00.")
    if parsed.tzinfo is not None:
        return parsed.astimezone(UTC)
    local = parsed.replace(tzinfo=tz)
    if local.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != parsed:
        raise ToolError(
            f"{when} does not exist in {tz} (the clocks skip it for daylight saving time); "
            "pick a time outside the skipped hour."
        )
    return local.astimezone(UTC)


def _every(text: str, now: datetime, timezone: str, min_interval: timedelta) -> Schedule:
    step = parse_duration(text)
    if step is None:
        raise ToolError(
            f"Cannot read the interval in 'every {text}'; write it like 'every 90m' or 'every 2h', "
            "or use a cron expression for times of day ('0 9 * * *' = every day at 09:00)."
        )
    if step < min_interval:
        raise ToolError(
            f"'every {text}' is too frequent: recurring jobs may run at most every "
            f"{_span(min_interval)}."
        )
    spec = _span(step).replace(" ", "")
    return Schedule("every", spec, timezone, (now + step).astimezone(UTC))


def _cron(expr: str, now: datetime, tz: tzinfo, timezone: str, min_interval: timedelta) -> Schedule:
    fields = expr.split()
    if len(fields) != 5:
        raise ToolError(
            f"A cron expression has 5 fields (minute hour day month weekday); {expr!r} has "
            f"{len(fields)}."
        )
    if fields[2] not in ("*", "?") and fields[4] not in ("*", "?"):
        raise ToolError(
            f"{expr!r} restricts both the day of the month and the weekday, which cron reads as "
            "'either' and is easy to get wrong; set one of them to * (or create two jobs)."
        )
    fields[4] = standard_weekdays(fields[4])
    trigger = cron_trigger(" ".join(fields), tz, original=expr)
    first = trigger.get_next_fire_time(None, now + TICK)
    if first is None:
        raise ToolError(f"{expr!r} never runs (no such date); check the day and month fields.")
    gap = shortest_gap(trigger, first, min_interval)
    if gap is not None and gap < min_interval:
        raise ToolError(
            f"{expr!r} is too frequent: it runs {_span(gap)} apart, and recurring jobs may run at "
            f"most every {_span(min_interval)}."
        )
    return Schedule("cron", " ".join(fields), timezone, first.astimezone(UTC))


def cron_trigger(expr: str, tz: tzinfo, *, original: str | None = None) -> CronTrigger:
    try:
        return CronTrigger.from_crontab(expr, timezone=tz)
    except ValueError as exc:
        raise ToolError(
            f"Cannot read the cron expression {original or expr!r}: {exc}. {WHEN_HELP}"
        ) from None


def shortest_gap(trigger: CronTrigger, first: datetime, floor: timedelta) -> timedelta | None:
    """The smallest distance between consecutive fire times, stopping early below `floor`.

    A cron expression is a product of its fields, so
    every gap it has shows within three firing days."""
    shortest: timedelta | None = None
    previous, days = first, {first.date()}
    for _ in range(GAP_SAMPLES):
        following = trigger.get_next_fire_time(None, previous + TICK)
        if following is None:
            break
        gap = following - previous
        shortest = gap if shortest is None else min(shortest, gap)
        if shortest < floor:
            break
        days.add(following.date())
        if len(days) > 3:
            break
        previous = following
    return shortest


def standard_weekdays(field: str) -> str:
    """Standard cron day-of-week (0 or 7 = Sunday; names, ranges, steps, lists) → weekday names.

    APScheduler 3 numbers weekdays from Monday = 0 (a documented 3.x quirk, its issue #286), so
    "1-5" would mean Tuesday to Saturday there; names mean the same in both, so the field is handed
    over as names."""
    if field in ("*", "?"):
        return "*"
    days: set[int] = set()
    for item in field.lower().split(","):
        days.update(_weekday_item(item, field))
    return "*" if len(days) == 7 else ",".join(WEEKDAYS[d] for d in sorted(days))


def _weekday_item(item: str, field: str) -> range | list[int]:
    span, _, step_text = item.partition("/")
    if step_text and (not step_text.isdigit() or int(step_text) == 0):
        raise ToolError(f"Cannot read the weekday field {field!r}: bad step {step_text!r}.")
    step = int(step_text) if step_text else 1
    if span in ("*", "?"):
        first, last = 0, 6
    elif "-" in span:
        start, _, end = span.partition("-")
        first, last = _weekday(start, field), _weekday(end, field)
        if last == 0 and first > 0:  # "5-0": up to Sunday, written as 7
            last = 7
        if last < first:
            raise ToolError(
                f"Cannot read the weekday field {field!r}: {span!r} runs backwards; list the days "
                "instead (e.g. fri,sat,sun)."
            )
    else:
        first = _weekday(span, field)
        last = 7 if step_text else first
    return [d % 7 for d in range(first, last + 1, step)]


def _weekday(token: str, field: str) -> int:
    if token.isdigit() and int(token) <= 7:
        return int(token)
    if token[:3] in WEEKDAYS and (
        len(token) == 3 or token == WEEKDAY_NAMES[WEEKDAYS.index(token[:3])]
    ):
        return WEEKDAYS.index(token[:3])
    raise ToolError(
        f"Cannot read the weekday field {field!r}: {token!r} is not a weekday (0-7 with 0 and 7 = "
        "Sunday, or mon..sun)."
    )


def local_text(moment: datetime, tz: tzinfo) -> str:
    return moment.astimezone(tz).strftime("%Y-%m-%d %H:%M %Z")


def _span(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            count, seconds = divmod(seconds, size)
            parts.append(f"{count}{unit}")
    return " ".join(parts) or "0s"
