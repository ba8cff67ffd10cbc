"""Virtual time for delivery tests: `sleep` parks the
caller until the test moves the clock past its deadline.

Nothing here really sleeps. `advance` wakes sleepers in deadline order (the clock reads each one's
deadline while it runs); `run` drives a coroutine, jumping to the next deadline whenever everything
else is blocked.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

T = TypeVar("T")
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, start: datetime = START) -> None:
        self.start = start
        self.t = 0.0
        self.sleeps: list[float] = []
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.t + seconds, next(self._seq), fut))
        await fut

    @property
    def next_deadline(self) -> float | None:
        while self._sleepers and self._sleepers[0][2].done():  # a cancelled sleeper
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    async def settle(self) -> None:
        """Let every task that can run, run (the code under test does no real I/O)."""
        for _ in range(200):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        target = self.t + seconds
        await self.settle()
        while (deadline := self.next_deadline) is not None and deadline <= target:
            _, _, fut = heapq.heappop(self._sleepers)
            self.t = max(self.t, deadline)
            fut.set_result(None)
            await self.settle()
        self.t = target
        await self.settle()

    async def run(self, aw: Awaitable[T], *, limit: float = 86_400.0) -> T:
        """Await `aw`, moving time to the next deadline whenever nothing else can run."""
        task = asyncio.ensure_future(aw)
        end = self.t + limit
        while True:
            await self.settle()
            if task.done():
                return task.result()
            deadline = self.next_deadline
            if deadline is None or deadline > end:
                task.cancel()
                raise AssertionError(f"stuck at t={self.t}: nothing scheduled to wake up")
            await self.advance(deadline - self.t)
