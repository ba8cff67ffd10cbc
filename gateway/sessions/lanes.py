"""Per-session FIFO lanes: one turn at a time per session
key, many keys at once, each lane's worker self-healing.

Kept apart from the session manager so queueing, interruption and shutdown can be read without the
turn itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# one logger for the session manager, whichever module speaks
log = logging.getLogger("gateway.sessions.manager")

BUSY_NOTICE_EVERY = timedelta(seconds=30)

Turn = Callable[[int], Coroutine[object, object, None]]
Mark = Callable[[int, str], None]  # (inbound id, final status) for a turn that never stored its own


@dataclass(eq=False)
class Lane:
    """One session key's FIFO of inbound ids and the worker serving it."""

    key: str
    queue: deque[int] = field(default_factory=deque)
    worker: asyncio.Task[None] | None = None
    current: asyncio.Task[None] | None = None
    current_inbound: int | None = None
    answered: bool = False  # the current turn's answer is stored: it is only being delivered now
    last_busy_notice: datetime | None = None


class Lanes:
    """The lanes by session key; a lane lives while its worker has work, the busy-notice times
    outlive it."""

    def __init__(self, turn: Turn, mark: Mark) -> None:
        self._turn = turn
        self._mark = mark
        self._lanes: dict[str, Lane] = {}
        # per session key; outlives the lane (notice ≤ 1 per 30 s)
        self._busy_noticed: dict[str, datetime] = {}
        self.accepting = True

    def open(self, key: str) -> Lane:
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(key)
        return lane

    @staticmethod
    def busy(lane: Lane) -> bool:
        """A turn is running whose answer is not stored yet (a delivering one no longer counts)."""
        return lane.current is not None and not lane.current.done() and not lane.answered

    def interrupt(self, lane: Lane) -> None:
        """Cancel the running turn; the queued ones are
        superseded too: never answered, never replayed."""
        for dropped in lane.queue:
            self._mark(dropped, "interrupted")
        lane.queue.clear()
        lane.current.cancel()  # type: ignore[union-attr]

    def idle(self, key: str) -> bool:
        """Would a message for `key` start its turn at once (nothing running or queued there)?"""
        lane = self._lanes.get(key)
        return lane is None or (not lane.queue and not self.busy(lane))

    def busy_notice_due(self, lane: Lane, now: datetime) -> bool:
        """At most one busy notice per session key per BUSY_NOTICE_EVERY; records it when due."""
        last = self._busy_noticed.get(lane.key)
        if last is not None and now - last < BUSY_NOTICE_EVERY:
            return False
        self._busy_noticed = {
            k: t for k, t in self._busy_noticed.items() if now - t < BUSY_NOTICE_EVERY
        }
        self._busy_noticed[lane.key] = lane.last_busy_notice = now
        return True

    def push(self, lane: Lane, inbound_id: int) -> None:
        lane.queue.append(inbound_id)
        self._ensure_worker(lane)

    def _ensure_worker(self, lane: Lane) -> None:
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.get_running_loop().create_task(
                self._serve(lane), name=f"lane:{lane.key}"
            )
            lane.worker.add_done_callback(lambda task: self._worker_done(lane, task))

    def _worker_done(self, lane: Lane, task: asyncio.Task[None]) -> None:
        """Heal a lane whose worker died with messages still
        queued, without waiting for the next message."""
        error = None if task.cancelled() else task.exception()
        if error is not None:
            log.error("lane %s: worker crashed", lane.key, exc_info=error)
        if lane.queue and self.accepting and self._lanes.get(lane.key) is lane:
            log.warning(
                "lane %s: worker stopped with %s message(s) queued; restarting it",
                lane.key,
                len(lane.queue),
            )
            self._ensure_worker(lane)

    async def _serve(self, lane: Lane) -> None:
        try:
            while lane.queue:
                inbound_id = lane.queue.popleft()
                lane.current_inbound = inbound_id
                lane.answered = False
                lane.current = asyncio.get_running_loop().create_task(self._turn(inbound_id))
                try:
                    await lane.current
                except asyncio.CancelledError:
                    if lane.current.cancelled() and not _self_cancelled():
                        log.info("turn for inbound %s interrupted", inbound_id)
                        self._mark(inbound_id, "interrupted")
                        continue
                    raise
                except Exception:
                    # a task root per turn: one broken turn must not strand the queue behind it
                    log.exception("turn for inbound %s crashed", inbound_id)
                    self._mark(inbound_id, "failed")
                finally:
                    lane.current_inbound = None
        finally:
            if not lane.queue and self._lanes.get(lane.key) is lane:
                del self._lanes[lane.key]

    def mark_answered(self, key: str, inbound_id: int) -> None:
        """The turn of `inbound_id` only delivers from here on (see SessionManager._answered)."""
        lane = self._lanes.get(key)
        if lane is not None and lane.current_inbound == inbound_id:
            lane.answered = True

    def lane(self, key: str) -> Lane | None:
        return self._lanes.get(key)

    def busy_lanes(self) -> int:
        return sum(1 for lane in self._lanes.values() if lane.worker and not lane.worker.done())

    async def wait_idle(self, background: Callable[[], Awaitable[None]]) -> None:
        """Wait until every worker has finished and `background` (answers sent in the background)
        has drained."""
        while True:
            workers = [
                lane.worker
                for lane in self._lanes.values()
                if lane.worker and not lane.worker.done()
            ]
            if workers:
                await asyncio.gather(*workers, return_exceptions=True)
                continue
            await background()
            if not any(lane.worker and not lane.worker.done() for lane in self._lanes.values()):
                return

    async def cancel_all(self) -> None:
        for lane in list(self._lanes.values()):
            lane.queue.clear()
            if lane.worker and not lane.worker.done():
                lane.worker.cancel()
        await asyncio.gather(
            *(lane.worker for lane in self._lanes.values() if lane.worker), return_exceptions=True
        )

    def cancel_lanes(self, keys: set[str]) -> None:
        """Cancel these lanes' workers (their turns stay stored for replay, as in `cancel_all`)."""
        for key in keys:
            lane = self._lanes.get(key)
            if lane is not None and lane.worker is not None and not lane.worker.done():
                lane.queue.clear()
                lane.worker.cancel()

    def stop_turn(self, key: str) -> bool:
        lane = self._lanes.get(key)
        if lane and lane.current and not lane.current.done() and not lane.answered:
            lane.current.cancel()
            return True
        return False


def _self_cancelled() -> bool:
    task = asyncio.current_task()
    return bool(task and task.cancelling())


class Touches:
    """When the person wrote (the turn's start), per running turn, until the turn's last write
    stores it as the session's `last_user_at`: its end (complete or settle), or the mark of a turn
    cut off before it stored anything."""

    def __init__(self) -> None:
        self._started: dict[int, tuple[int, datetime]] = {}  # inbound id → (session id, turn start)

    def start(self, inbound_id: int, session_id: int, now: datetime) -> None:
        self._started[inbound_id] = (session_id, now)

    def take(self, inbound_id: int, session_id: int | None = None) -> tuple[int, datetime] | None:
        """(session id, when) for the write about to store it, once; None for another session's."""
        touched = self._started.get(inbound_id)
        if touched is None or (session_id is not None and touched[0] != session_id):
            return None
        del self._started[inbound_id]
        return touched

    def write(
        self, inbound_id: int, session_id: int, touch: Callable[[int, datetime], None]
    ) -> None:
        """Store it now (`touch`): the turn ended without a write of its own."""
        touched = self.take(inbound_id, session_id)
        if touched is not None:
            touch(*touched)

    def at(self, inbound_id: int, session_id: int | None) -> datetime | None:
        touched = self.take(inbound_id, session_id) if session_id is not None else None
        return None if touched is None else touched[1]
