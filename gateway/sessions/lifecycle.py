"""Reset policies: which policy a session lives under
and when it expires (idle and daily deadlines).

Pure functions of a session's timestamps and the config; the timers (gateway/sessions/timers.py) and
the lazy check on the next message (gateway/sessions/manager.py) both ask the same question here, so
they can never disagree. The seam between the manager and the timers (SessionHooks) is declared here
too.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from functools import lru_cache
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from gateway.config.settings import ResetMode, ResetOverride, SessionResetConfig
from gateway.events import MAIN_AGENT
from gateway.store.rows import SessionRow, parse_iso

__all__ = [
    "Deadline",
    "NoLifecycle",
    "Policies",
    "ResetPolicy",
    "SessionHooks",
    "daily_boundary_after",
    "deadline_for",
    "latest_daily_boundary",
    "local_zone",
    "resolve_policy",
]


class SessionHooks(Protocol):
    """What the session manager asks of the lifecycle (gateway/sessions/timers.py implements it):
    has this session expired, a session ended, a session was just used."""

    def expired(self, session: SessionRow, now: datetime) -> str | None: ...

    def session_ended(self, session: SessionRow, reason: str) -> None: ...

    def session_touched(self, session: SessionRow, now: datetime) -> None: ...


class NoLifecycle:
    """No reset policy at all: sessions never expire (a manager built without timers)."""

    def expired(self, session: SessionRow, now: datetime) -> str | None:
        return None

    def session_ended(self, session: SessionRow, reason: str) -> None:
        return None

    def session_touched(self, session: SessionRow, now: datetime) -> None:
        return None


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

    Field-wise, so `by_platform.telegram: {mode: idle}`
    still takes `idle_minutes` from a chat-type override.
    """
    overrides: list[ResetOverride | None] = [
        cfg.by_platform.get(platform),  # type: ignore[call-overload]
        cfg.by_chat_type.get(chat_type),  # type: ignore[call-overload]
    ]
    layers = [o for o in overrides if o is not None]

    def pick(name: str, default: Any) -> Any:
        for layer in layers:
            value = getattr(layer, name)
            if value is not None:
                return value
        return default

    return ResetPolicy(
        mode=pick("mode", cfg.mode),
        idle_minutes=float(pick("idle_minutes", cfg.idle_minutes)),
        at_hour=int(pick("at_hour", cfg.at_hour)),
        notify=bool(pick("notify", cfg.notify)),
    )


def local_zone(name: str | None) -> tzinfo:
    """`sessions.timezone`, else the system's zone as a
    real tz database zone (so DST shifts are known)."""
    if name:
        return ZoneInfo(name)
    try:
        import tzlocal  # a dependency of APScheduler 3

        return tzlocal.get_localzone()
    except Exception:  # noqa: BLE001 - an unreadable system zone must not stop the daemon; UTC is a safe answer
        return UTC


def _boundary_on(day: date, at_hour: int, tz: tzinfo) -> datetime:
    """`at_hour:00` local on `day` as UTC. In a spring-forward gap the wall time maps to the instant
    the clock jumps past it (fold=0 uses the offset before the shift); in a fall-back overlap, to
    its first occurrence."""
    return datetime.combine(day, time(at_hour), tzinfo=tz).astimezone(UTC)


def daily_boundary_after(moment: datetime, at_hour: int, tz: tzinfo) -> datetime:
    """The first `at_hour` boundary strictly after `moment` (UTC)."""
    local_day = moment.astimezone(tz).date()
    for offset in range(3):
        candidate = _boundary_on(local_day + timedelta(days=offset), at_hour, tz)
        if candidate > moment:
            return candidate
    raise AssertionError(
        "no daily boundary within three days"
    )  # pragma: no cover - a day always has one


def latest_daily_boundary(now: datetime, at_hour: int, tz: tzinfo) -> datetime:
    """The most recent `at_hour` boundary at or before `now` (UTC)."""
    local_day = now.astimezone(tz).date()
    for offset in range(3):
        candidate = _boundary_on(local_day - timedelta(days=offset), at_hour, tz)
        if candidate <= now:
            return candidate
    raise AssertionError("no daily boundary within three days")  # pragma: no cover


def deadline_for(policy: ResetPolicy, last_user_at: datetime, tz: tzinfo) -> Deadline | None:
    """The session expires at the earlier of: idle minutes after the last user message, and the
    first daily boundary after it (so "daily" = the last user message is before the most recent
    boundary)."""
    found: list[Deadline] = []
    if policy.idle:
        found.append(Deadline(last_user_at + timedelta(minutes=policy.idle_minutes), "idle"))
    if policy.daily:
        found.append(Deadline(daily_boundary_after(last_user_at, policy.at_hour, tz), "daily"))
    return min(found, key=lambda d: d.at) if found else None


class _Boundaries:
    """The daily `at_hour` boundaries as sorted UTC timestamps over a growing range of days, so the
    next boundary after a moment is one bisect (the boot rebuild computes 100,000 of them)."""

    def __init__(self, at_hour: int, tz: tzinfo) -> None:
        self.at_hour = at_hour
        self.tz = tz
        self.stamps: list[float] = []

    def after(self, ts: float) -> float:
        stamps = self.stamps
        i = bisect_right(stamps, ts)
        if i == 0 or i == len(stamps):
            self._cover(ts)
            stamps = self.stamps
            i = bisect_right(stamps, ts)
        return stamps[i]

    def _cover(self, ts: float) -> None:
        day = datetime.fromtimestamp(ts, UTC).astimezone(self.tz).date()
        lo, hi = day - timedelta(days=2), day + timedelta(days=3)
        if self.stamps:
            first = datetime.fromtimestamp(self.stamps[0], UTC).astimezone(self.tz).date()
            last = datetime.fromtimestamp(self.stamps[-1], UTC).astimezone(self.tz).date()
            lo, hi = min(lo, first), max(hi, last)
        days = (hi - lo).days + 1
        self.stamps = [
            _boundary_on(lo + timedelta(days=n), self.at_hour, self.tz).timestamp()
            for n in range(days)
        ]


class Policies:
    """The configured policies with the zone they are read in; one instance, shared by timers and
    commands. `by_agent`: an agent's own `session_reset` (agents.<name>.session_reset); the others
    use `cfg`."""

    def __init__(
        self,
        cfg: SessionResetConfig,
        timezone: str | None = None,
        by_agent: Mapping[str, SessionResetConfig] | None = None,
    ) -> None:
        self.cfg = cfg
        self.by_agent = dict(by_agent or {})
        self.tz = local_zone(timezone)
        self._resolve = lru_cache(maxsize=64)(self._resolve_uncached)
        self._fast: dict[tuple[str, str, str], tuple[float | None, _Boundaries | None]] = {}
        self._bounds: dict[int, _Boundaries] = {}

    def _resolve_uncached(self, platform: str, chat_type: str, agent: str) -> ResetPolicy:
        return resolve_policy(self.by_agent.get(agent, self.cfg), platform, chat_type)

    def policy(self, platform: str, chat_type: str, agent: str = MAIN_AGENT) -> ResetPolicy:
        return self._resolve(platform, chat_type, agent)

    def deadline_ts(
        self, platform: str, chat_type: str, last_ts: float, agent: str = MAIN_AGENT
    ) -> tuple[float, str] | None:
        """`deadline_for` on POSIX timestamps, without time
        zone arithmetic per call (the boot rebuild)."""
        fast = self._fast.get((agent, platform, chat_type))
        if fast is None:
            policy = self._resolve(platform, chat_type, agent)
            bounds = None
            if policy.daily:
                bounds = self._bounds.get(policy.at_hour) or self._bounds.setdefault(
                    policy.at_hour, _Boundaries(policy.at_hour, self.tz)
                )
            idle_s = policy.idle_minutes * 60 if policy.idle else None
            fast = self._fast[(agent, platform, chat_type)] = (idle_s, bounds)
        idle, bounds = fast
        daily = bounds.after(last_ts) if bounds is not None else None
        if idle is None:
            return None if daily is None else (daily, "daily")
        idle_at = last_ts + idle
        return (daily, "daily") if daily is not None and daily < idle_at else (idle_at, "idle")

    def deadline(
        self, platform: str, chat_type: str, last_user_at: datetime, agent: str = MAIN_AGENT
    ) -> Deadline | None:
        found = self.deadline_ts(platform, chat_type, last_user_at.timestamp(), agent)
        return None if found is None else Deadline(datetime.fromtimestamp(found[0], UTC), found[1])

    def session_deadline(self, session: SessionRow) -> Deadline | None:
        """Counted from the last real user message; a
        session without one counts from its creation."""
        if session.ended_at is not None:
            return None
        last = parse_iso(session.last_user_at or session.created_at)
        assert last is not None
        return self.deadline(session.platform, session.chat_type, last, session.agent)

    def expired(self, session: SessionRow, now: datetime) -> str | None:
        """Why `session` has expired at `now` (`idle` / `daily`), or None while it is alive."""
        found = self.session_deadline(session)
        return found.reason if found is not None and found.at <= now else None

    def describe(self, policy: ResetPolicy) -> str:
        """One line for /status and `gateway sessions`:
        `idle 24 h or daily at 04:00 (Europe/Berlin)`."""
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
