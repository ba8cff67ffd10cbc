"""Client-side send limits per chat and per bot, so we stay under each platform's published limits.

A 429 still happens now and then (limits are shared with other clients, and some are dynamic);
`pause` then holds one chat, or the whole bot for a global limit, until its `retry_after` has
passed. Time comes from an injected monotonic clock and sleep; this module never sends anything
itself.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from gateway.events import ChatRef

Monotonic = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Rule:
    """At most `count` messages in any `period` seconds
    (a sliding window: no burst at a window edge)."""

    count: int
    period: float

    def __post_init__(self) -> None:
        if self.count < 1 or self.period <= 0:
            raise ValueError(
                f"a rate rule needs count >= 1 and period > 0, got {self.count}/{self.period}"
            )


@dataclass(frozen=True, slots=True)
class PlatformLimits:
    per_chat: tuple[Rule, ...] = ()
    per_group: tuple[Rule, ...] = ()  # added to per_chat when the chat is a group or channel
    per_bot: tuple[Rule, ...] = ()
    source: str = ""


# The published figures. Platforms that are ours (web, cli) have no limits.
PLATFORM_LIMITS: Mapping[str, PlatformLimits] = {
    # "avoid sending more than one message per second" in a chat, "no more than 20 messages per
    # minute" in a group, "not more than about 30 messages per second" overall.
    "telegram": PlatformLimits(
        per_chat=(Rule(1, 1.0),),
        per_group=(Rule(20, 60.0),),
        per_bot=(Rule(30, 1.0),),
        source="https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this",
    ),
    # Global: 50 requests per second per bot. Per route the limit is dynamic (X-RateLimit-*
    # headers); POST /channels/{id}/messages has been 5 per 5 s per channel for years.
    "discord": PlatformLimits(
        per_chat=(Rule(5, 5.0),),
        per_bot=(Rule(50, 1.0),),
        source="https://discord.com/developers/docs/topics/rate-limits",
    ),
    # chat.postMessage has a "special" tier: about 1
    # message per second per channel, short bursts allowed.
    "slack": PlatformLimits(
        per_chat=(Rule(1, 1.0),),
        source="https://api.slack.com/methods/chat.postMessage#rate_limiting",
    ),
}


@dataclass(eq=False, slots=True)
class _Window:
    rule: Rule
    sent: deque[float] = field(default_factory=deque)

    def wait(self, now: float) -> float:
        while self.sent and self.sent[0] <= now - self.rule.period:
            self.sent.popleft()
        if len(self.sent) < self.rule.count:
            return 0.0
        return self.sent[0] + self.rule.period - now

    def is_idle(self, now: float) -> bool:
        return not self.sent or self.sent[-1] <= now - self.rule.period


class RateLimiter:
    """Waits before a send until every window of the chat
    and of its bot has room and no pause applies."""

    def __init__(
        self,
        limits: Mapping[str, PlatformLimits] = PLATFORM_LIMITS,
        *,
        clock: Monotonic = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.limits = limits
        self.clock = clock
        self.sleep = sleep
        self._windows: dict[tuple[str, ...], list[_Window]] = {}
        self._paused_until: dict[tuple[str, ...], float] = {}
        self._recorded = 0

    async def acquire(self, chat: ChatRef) -> float:
        """Wait for a free slot and take it; returns how long it waited."""
        waited = 0.0
        while (delay := self.delay(chat)) > 0:
            await self.sleep(delay)
            waited += delay
        # no await between the last check and taking the slot: concurrent senders queue up
        now = self.clock()
        for key in _keys(chat):
            for window in self._windows_for(key, chat):
                window.sent.append(now)
        self._recorded += 1
        if self._recorded % 1024 == 0:
            self._forget_idle(now)
        return waited

    def delay(self, chat: ChatRef) -> float:
        """Seconds until a message to `chat` may go out (0 when it may go now)."""
        now = self.clock()
        waits = [0.0]
        for key in _keys(chat):
            waits.append(self._paused_until.get(key, now) - now)
            waits.extend(w.wait(now) for w in self._windows_for(key, chat))
        return max(waits)

    def pause(self, chat: ChatRef, seconds: float, *, is_global: bool = False) -> None:
        """Honour a 429: nothing goes to this chat (or,
        for a global limit, to this bot) for `seconds`."""
        key = _bot_key(chat) if is_global else _chat_key(chat)
        until = self.clock() + max(0.0, seconds)
        self._paused_until[key] = max(until, self._paused_until.get(key, until))

    def paused_for(self, chat: ChatRef) -> float:
        now = self.clock()
        return max(0.0, *(self._paused_until.get(k, now) - now for k in _keys(chat)))

    def _windows_for(self, key: tuple[str, ...], chat: ChatRef) -> list[_Window]:
        found = self._windows.get(key)
        if found is None:
            limits = self.limits.get(chat.platform, PlatformLimits())
            if key[0] == "bot":
                rules = limits.per_bot
            else:
                rules = limits.per_chat + (limits.per_group if chat.is_group else ())
            found = self._windows[key] = [_Window(r) for r in rules]
        return found

    def _forget_idle(self, now: float) -> None:
        for key in [k for k, ws in self._windows.items() if all(w.is_idle(now) for w in ws)]:
            del self._windows[key]
        for key in [k for k, until in self._paused_until.items() if until <= now]:
            del self._paused_until[key]


def _chat_key(chat: ChatRef) -> tuple[str, ...]:
    # Per chat, not per thread: Slack and Discord count a thread's messages against its channel;
    # and per bot account, each bot having limits of its own.
    return ("chat", chat.platform, chat.chat_id, chat.account)


def _bot_key(chat: ChatRef) -> tuple[str, ...]:
    return ("bot", chat.platform, chat.account)


def _keys(chat: ChatRef) -> tuple[tuple[str, ...], ...]:
    return (_chat_key(chat), _bot_key(chat))
