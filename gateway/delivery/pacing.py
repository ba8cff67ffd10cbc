"""How often a live preview may touch a chat: the least time between two calls in a pacing scope.

A scope is a chat (Telegram, Discord: about one edit a second per chat or channel) or a whole
platform account (Slack's method tiers count per workspace). The stream waits here before each
update; the outbox waits here before it turns a preview into the final answer and notes its sends,
so a preview edit never lands right on top of a send. Time comes from an injected monotonic clock;
nothing here sleeps or sends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Monotonic = Callable[[], float]
Scope = tuple[str, str]  # (platform, chat id) or (platform, a key for the whole account)
FORGET_AFTER_S = 300.0  # an idle scope's entry goes once the table is big
PRUNE_ABOVE = 1000


@dataclass(slots=True)
class _Entry:
    interval: float
    last: float
    scope: Scope | None = None  # the wider scope a chat also counts against (a Slack workspace)
    # the last call that was not a draft: a send must keep its distance too
    last_edit: float = float("-inf")


class ChatPacer:
    """Only scopes that a live preview registered are
    paced: other chats cost one dict lookup per send."""

    def __init__(self, clock: Monotonic = time.monotonic) -> None:
        self.clock = clock
        self._entries: dict[Scope, _Entry] = {}

    def track(self, chat: Scope, interval: float, scope: Scope | None = None) -> None:
        """From now on, calls in `chat` (and in `scope`, if given) are at least `interval` apart."""
        self._entry(chat, interval).scope = scope if scope != chat else None
        if scope is not None and scope != chat:
            self._entry(scope, interval)
        if len(self._entries) > PRUNE_ABOVE:
            self._prune()

    def delay(self, chat: Scope, *, send: bool = False) -> float:
        """Seconds until the next call in `chat` may go (0: now). A `send` may follow a draft at
        once (that is how a draft ends), not an edit."""
        entry = self._entries.get(chat)
        if entry is None:
            return 0.0
        now = self.clock()
        wait = max(0.0, entry.last_edit + entry.interval - now) if send else self._wait(entry, now)
        if entry.scope is not None and (wider := self._entries.get(entry.scope)) is not None:
            wait = max(wait, self._wait(wider, now))
        return wait

    def note(self, chat: Scope, *, draft: bool = False) -> None:
        """A call in `chat` went out now (`draft`: an ephemeral preview, no message)."""
        entry = self._entries.get(chat)
        if entry is None:
            return
        now = self.clock()
        entry.last = now
        if not draft:
            entry.last_edit = now
        if entry.scope is not None and (wider := self._entries.get(entry.scope)) is not None:
            wider.last = now

    def _entry(self, key: Scope, interval: float) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            # nothing sent yet: free to go now
            entry = self._entries[key] = _Entry(interval, -interval)
        entry.interval = interval
        return entry

    @staticmethod
    def _wait(entry: _Entry, now: float) -> float:
        return max(0.0, entry.last + entry.interval - now)

    def _prune(self) -> None:
        now = self.clock()
        self._entries = {k: e for k, e in self._entries.items() if now - e.last < FORGET_AFTER_S}

    def __len__(self) -> int:
        return len(self._entries)
