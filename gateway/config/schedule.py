"""The `schedule` section: scheduled jobs (reminders and recurring runs the agent sets up from chat)
and limits.

Durations are written the way people write them ("90s", "30m", "1h", "2d", "1h30m");
`parse_duration` reads them here and for the `schedule` tool's delays, so the config and the tool
accept the same words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

_UNIT_SECONDS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = r"(\d{1,7})\s*(w|weeks?|d|days?|h|hrs?|hours?|m|mins?|minutes?|s|secs?|seconds?)"
_DURATION = re.compile(rf"\s*(?:{_PART}\s*)+", re.IGNORECASE)
_PARTS = re.compile(_PART, re.IGNORECASE)


def parse_duration(text: str) -> timedelta | None:
    """`1h30m` → 90 minutes; None when `text` is not a
    duration (units w, d, h, m, s, or their words)."""
    if not _DURATION.fullmatch(text):
        return None
    return timedelta(
        seconds=sum(int(n) * _UNIT_SECONDS[unit[0].lower()] for n, unit in _PARTS.findall(text))
    )


@dataclass(frozen=True, slots=True)
class ScheduleConfig:
    enabled: bool = True
    timezone: str | None = None
    misfire_grace: str = "1h"
    max_jobs_per_person: int = field(default=50, metadata={"min": 0, "max": 100_000})
    min_interval: str = "5m"
    max_concurrent_runs: int = field(default=2, metadata={"min": 1, "max": 100})
    jobs_may_schedule: bool = False
    keep_run_sessions: str = "7d"

    def __post_init__(self) -> None:
        for name in ("misfire_grace", "min_interval", "keep_run_sessions"):
            if parse_duration(getattr(self, name)) is None:
                raise ValueError(
                    f"schedule.{name}: expected a duration such as 30m, 1h or 1h30m; "
                    f"got {getattr(self, name)!r}"
                )
        if self.timezone is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(
                    f"schedule.timezone: unknown time zone {self.timezone!r}"
                ) from None

    @property
    def grace(self) -> timedelta:
        """How late a run may still start (a daemon that was
        down, a stalled loop); later ones are reported."""
        return parse_duration(self.misfire_grace) or timedelta(hours=1)

    @property
    def run_sessions_kept(self) -> timedelta:
        """How long a run's own session (its prompt, tool calls and answer) is kept; what it posted
        stays in the chat's session. A job every 5 minutes would otherwise leave 288 sessions a
        day."""
        return parse_duration(self.keep_run_sessions) or timedelta(days=7)

    @property
    def shortest_interval(self) -> timedelta:
        return parse_duration(self.min_interval) or timedelta(minutes=5)
