"""A logging filter that lets the same warning or error
through a few times a minute, then counts it instead.

A flood (a connection storm running accept() out of files logged 300,000 identical ERROR lines in 40
s) must not fill the disk or bury everything else. Records are keyed by logger, level and rendered
message; the first record of a new window says how many were held back in the last one. Below
WARNING nothing is held back.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

BURST = 10  # identical records let through per window
WINDOW_S = 60.0
MAX_KEYS = 1024  # distinct messages remembered (least recently seen forgotten first)
MAX_KEY_CHARS = 500


@dataclass(slots=True)
class _Seen:
    window_start: float
    passed: int = 0
    held: int = 0


class RepeatFilter(logging.Filter):
    """Install on a handler after the redacting filter (which renders the message once)."""

    def __init__(
        self,
        *,
        burst: int = BURST,
        window: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        self._seen: OrderedDict[tuple[str, int, str], _Seen] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.levelno, record.getMessage()[:MAX_KEY_CHARS])
        now = self.clock()
        seen = self._seen.get(key)
        if seen is None or now - seen.window_start >= self.window:
            held = seen.held if seen is not None else 0
            self._remember(key, _Seen(window_start=now, passed=1))
            if held:
                record.msg = (
                    f"{record.getMessage()} [{held:,} more like this "
                    f"in the last {self.window:.0f}s not logged]"
                )
                record.args = None
            return True
        self._seen.move_to_end(key)
        if seen.passed < self.burst:
            seen.passed += 1
            return True
        seen.held += 1
        return False

    def _remember(self, key: tuple[str, int, str], seen: _Seen) -> None:
        self._seen[key] = seen
        self._seen.move_to_end(key)
        while len(self._seen) > MAX_KEYS:
            self._seen.popitem(last=False)
