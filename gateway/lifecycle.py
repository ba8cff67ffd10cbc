"""Reset policies: which policy a session lives under and when it expires (idle and daily deadlines).

Pure functions of a session's timestamps and the config; the timers (gateway/scheduler.py) and the lazy check
on the next message (gateway/sessions.py) both ask the same question here, so they can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo

from gateway.config import ResetMode, SessionResetConfig
from gateway.store import SessionRow, parse_iso

__all__ = ["Deadline", "Policies", "ResetPolicy", "daily_boundary_after", "deadline_for", "latest_daily_boundary",
           "local_zone", "resolve_policy"]


@dataclass(frozen=True, slots=True)
class ResetPolicy:
    mode: ResetMode
    idle_minutes: float
    at_hour: int
    notify: bool

    @property
    def idle(self) -> bool:
        return self.mode in ("idle", "both")

    @property
    def daily(self) -> bool:
        return self.mode in ("daily", "both")


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a session expires and why (`idle` or `daily`, whichever comes first)."""

    at: datetime
    reason: str


def resolve_policy(cfg: SessionResetConfig, platform: str, chat_type: str) -> ResetPolicy:
    """Field by field: `by_platform.<platform>` > `by_chat_type.<chat_type>` > the defaults.

    Field-wise, so `by_platform.telegram: {mode: idle}` still takes `idle_minutes` from a chat-type override.
    """
    layers = [o for o in (cfg.by_platform.get(platform), cfg.by_chat_type.get(chat_type))  # type: ignore[call-overload]
              if o is not None]

    def pick(name: str, default: object) -> object:
        for layer in layers:
            value = getattr(layer, name)
            if value is not None:
                return value
        return default

    return ResetPolicy(mode=pick("mode", cfg.mode), idle_minutes=float(pick("idle_minutes", cfg.idle_minutes)),  # type: ignore[arg-type]
                       at_hour=int(pick("at_hour", cfg.at_hour)), notify=bool(pick("notify", cfg.notify)))  # type: ignore[call-overload]


def local_zone(name: str | None) -> tzinfo:
    """`sessions.timezone`, else the system's zone as a real tz database zone (so DST shifts are known)."""
    if name:
        return ZoneInfo(name)
    try:
        import tzlocal  # a dependency of APScheduler 3
        return tzlocal.get_localzone()
    except Exception:  # noqa: BLE001 - an unreadable system zone must not stop the daemon; UTC is a safe answer
        return UTC


def _boundary_on(day: date, at_hour: int, tz: tzinfo) -> datetime:
    """`at_hour:00` local on `day` as UTC. In a spring-forward gap the wall time maps to the instant the clock
    jumps past it (fold=0 uses the offset before the shift); in a fall-back overlap, to its first occurrence."""
    return datetime.combine(day, time(at_hour), tzinfo=tz).astimezone(UTC)


def daily_boundary_after(moment: datetime, at_hour: int, tz: tzinfo) -> datetime:
    """The first `at_hour` boundary strictly after `moment` (UTC)."""
    local_day = moment.astimezone(tz).date()
    for offset in range(0, 3):
        candidate = _boundary_on(local_day + timedelta(days=offset), at_hour, tz)
        if candidate > moment:
            return candidate
    raise AssertionError("no daily boundary within three days")  # pragma: no cover - a day always has one


def latest_daily_boundary(now: datetime, at_hour: int, tz: tzinfo) -> datetime:
    """The most recent `at_hour` boundary at or before `now` (UTC)."""
    local_day = now.astimezone(tz).date()
    for offset in range(0, 3):
        candidate = _boundary_on(local_day - timedelta(days=offset), at_hour, tz)
        if candidate <= now:
            return candidate
    raise AssertionError("no daily boundary within three days")  # pragma: no cover


def deadline_for(policy: ResetPolicy, last_user_at: datetime, tz: tzinfo) -> Deadline | None:
    """The session expires at the earlier of: idle minutes after the last user message, and the first
    daily boundary after it (so "daily" = the last user message is before the most recent boundary)."""
    found: list[Deadline] = []
    if policy.idle:
        found.append(Deadline(last_user_at + timedelta(minutes=policy.idle_minutes), "idle"))
    if policy.daily:
        found.append(Deadline(daily_boundary_after(last_user_at, policy.at_hour, tz), "daily"))
    return min(found, key=lambda d: d.at) if found else None


class Policies:
    """The configured policies with the zone they are read in; one instance, shared by timers and commands."""

    def __init__(self, cfg: SessionResetConfig, timezone: str | None = None) -> None:
        self.cfg = cfg
        self.tz = local_zone(timezone)
        self._resolve = lru_cache(maxsize=64)(self._resolve_uncached)

    def _resolve_uncached(self, platform: str, chat_type: str) -> ResetPolicy:
        return resolve_policy(self.cfg, platform, chat_type)

    def policy(self, platform: str, chat_type: str) -> ResetPolicy:
        return self._resolve(platform, chat_type)

    def deadline(self, platform: str, chat_type: str, last_user_at: datetime) -> Deadline | None:
        return deadline_for(self._resolve(platform, chat_type), last_user_at, self.tz)

    def session_deadline(self, session: SessionRow) -> Deadline | None:
        """Counted from the last real user message; a session without one counts from its creation."""
        if session.ended_at is not None:
            return None
        last = parse_iso(session.last_user_at or session.created_at)
        assert last is not None
        return self.deadline(session.platform, session.chat_type, last)

    def expired(self, session: SessionRow, now: datetime) -> str | None:
        """Why `session` has expired at `now` (`idle` / `daily`), or None while it is alive."""
        found = self.session_deadline(session)
        return found.reason if found is not None and found.at <= now else None

    def describe(self, policy: ResetPolicy) -> str:
        """One line for /status and `gateway sessions`: `idle 24 h or daily at 04:00 (Europe/Berlin)`."""
        parts = []
        if policy.idle:
            parts.append(f"idle {_duration(timedelta(minutes=policy.idle_minutes))}")
        if policy.daily:
            parts.append(f"daily at {policy.at_hour:02d}:00 ({self.tz})")
        return " or ".join(parts) if parts else "never (mode: none)"

    def local(self, moment: datetime) -> str:
        return moment.astimezone(self.tz).strftime("%Y-%m-%d %H:%M %Z")


def _duration(span: timedelta) -> str:
    seconds = span.total_seconds()
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 7200:
        return f"{seconds / 60:g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 86400:g} days"


def human_age(span: timedelta) -> str:
    """`45 s`, `12 min`, `3 h 5 min`, `2 days 4 h`: how long ago, for humans."""
    seconds = int(max(span.total_seconds(), 0))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} days {hours} h" if hours else f"{days} days"
