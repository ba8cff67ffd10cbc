"""Run each adapter under its own supervisor: a crash, a disconnect or a silent connection restarts
that adapter alone with bounded backoff while the others keep serving; a permanent failure
(`AdapterFatal`) stays down.

The supervisor also keeps each adapter's health (state, connected since, last inbound, last error,
restarts) for `/status`, `gateway status` and metrics. It never sends messages; the outbox asks
`is_up` before sending.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gateway.errors import AdapterFatal, GatewayError
from gateway.events import (
    Adapter,
    AdapterHealth,
    Inbound,
    Pingable,
    Submit,
    SubmitResult,
    Watchable,
)

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]
OnUp = Callable[[str], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Exponential restart delays, capped; a run that
    stayed up `healthy_after` seconds resets the count."""

    first: float = 1.0
    factor: float = 2.0
    maximum: float = 300.0
    healthy_after: float = 600.0
    start_timeout: float = 60.0
    stop_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.first <= 0 or self.factor < 1 or self.maximum < self.first:
            raise ValueError("restart policy needs first > 0, factor >= 1 and maximum >= first")

    def delay(self, failures: int) -> float:
        return min(self.maximum, self.first * self.factor ** max(0, failures - 1))


@dataclass(frozen=True, slots=True)
class Watchdog:
    """Inbound liveness: after `silence` seconds with no event and no successful ping, reconnect.

    Only adapters with `ping` are watched: without one,
    a quiet chat cannot be told from a dead connection.
    """

    silence: float = 600.0
    every: float = 60.0
    ping_timeout: float = 15.0


@dataclass(eq=False)
class _Slot:
    adapter: Adapter
    health: AdapterHealth
    alive_at: datetime | None = None  # last inbound, successful ping or connect
    attempted: bool = False
    kick: asyncio.Event = field(default_factory=asyncio.Event)
    kick_reason: str = ""
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Supervisor:
    def __init__(
        self,
        adapters: Mapping[str, Adapter],
        *,
        clock: Clock,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        policy: RestartPolicy = RestartPolicy(),
        watchdog: Watchdog = Watchdog(),
        watchdogs: Mapping[str, Watchdog] | None = None,
    ) -> None:
        self.clock = clock
        self.sleep = sleep
        self.policy = policy
        self.watchdog = watchdog
        self.watchdogs = dict(watchdogs or {})
        self._slots = {name: _Slot(a, AdapterHealth(platform=name)) for name, a in adapters.items()}
        self._submit: Submit | None = None
        self._on_up: OnUp | None = None
        self._holding = False
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ what others read
    def health(self) -> dict[str, AdapterHealth]:
        return {name: slot.health for name, slot in self._slots.items()}

    def is_up(self, platform: str) -> bool:
        """False while a supervised adapter is starting,
        backing off or down (sends wait for `on_up`)."""
        slot = self._slots.get(platform)
        return slot is None or not self._holding or slot.health.state == "running"

    # ------------------------------------------------------------------ lifecycle
    def hold(self) -> None:
        """Mark every adapter as starting, so the outbox
        keeps their messages pending until each is up."""
        self._holding = True
        for slot in self._slots.values():
            if slot.health.state in ("stopped", "running"):
                self._set(slot, state="starting")

    async def start(self, submit: Submit, *, on_up: OnUp | None = None) -> None:
        """Start every adapter at once; returns when each
        is running or has failed its first attempt."""
        self.hold()
        self._submit = submit
        self._on_up = on_up
        self._stopping = False
        for name, slot in self._slots.items():
            slot.task = self._spawn(self._supervise(name, slot), f"supervise:{name}")
        if any(isinstance(s.adapter, Pingable) for s in self._slots.values()):
            self._spawn(self._watch(), "supervise:watchdog")
        await asyncio.gather(*(slot.settled.wait() for slot in self._slots.values()))

    async def stop(self) -> None:
        self._stopping = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for slot in self._slots.values():
            if slot.attempted:
                await self._stop_adapter(slot)
            self._set(slot, state="stopped", connected_since=None)

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ one adapter
    async def _supervise(self, name: str, slot: _Slot) -> None:
        failures = 0
        while not self._stopping:
            self._set(slot, state="starting")
            up_at: datetime | None = None
            try:
                slot.attempted = True
                async with asyncio.timeout(self.policy.start_timeout):
                    await slot.adapter.start(self._submit_for(slot))
                up_at = self._up(name, slot)
                error = await self._until_down(slot)
            except AdapterFatal as exc:
                self._set(slot, state="down", last_error=str(exc), connected_since=None)
                log.error("adapter %s stays down (no restarts): %s", name, exc)
                if up_at is not None:
                    await self._stop_adapter(slot)
                slot.settled.set()
                return
            except TimeoutError:
                error = f"start did not finish within {self.policy.start_timeout:g}s"
            except Exception as exc:
                log.debug("adapter %s failed", name, exc_info=True)
                error = _describe(exc)
            if self._stopping:
                return
            await self._stop_adapter(slot)
            if (
                up_at is not None
                and (self.clock() - up_at).total_seconds() >= self.policy.healthy_after
            ):
                failures = 0
            failures += 1
            delay = self.policy.delay(failures)
            self._set(
                slot,
                state="backoff",
                last_error=error,
                connected_since=None,
                restarts=slot.health.restarts + 1,
            )
            slot.settled.set()
            log.warning(
                "adapter %s failed (%s); restart %s in %.3gs",
                name,
                error,
                slot.health.restarts,
                delay,
            )
            await self.sleep(delay)

    def _up(self, name: str, slot: _Slot) -> datetime:
        now = self.clock()
        slot.alive_at = now
        slot.kick.clear()
        self._set(slot, state="running", connected_since=now)
        slot.settled.set()
        log.info("adapter %s running", name)
        if self._on_up is not None:
            self._spawn(self._run_on_up(name), f"on-up:{name}")
        return now

    async def _run_on_up(self, name: str) -> None:
        try:
            await self._on_up(name)  # type: ignore[misc]
        except Exception:
            log.exception("after %s came up, delivering its pending messages failed", name)

    async def _until_down(self, slot: _Slot) -> str:
        """Wait until the adapter closes on its own or the watchdog kicks it; returns why."""
        kick = asyncio.ensure_future(slot.kick.wait())
        waits: list[asyncio.Future[Any]] = [kick]
        if isinstance(slot.adapter, Watchable):
            waits.append(asyncio.ensure_future(slot.adapter.wait_closed()))
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        if kick in done:
            return slot.kick_reason
        closed = waits[1]
        exc = closed.exception()
        if exc is None:
            return "disconnected"
        if isinstance(exc, AdapterFatal):
            raise exc
        return _describe(exc)

    async def _stop_adapter(self, slot: _Slot) -> None:
        try:
            async with asyncio.timeout(self.policy.stop_timeout):
                await slot.adapter.stop()
        except Exception:
            log.warning("adapter %s did not stop cleanly", slot.health.platform, exc_info=True)

    def _submit_for(self, slot: _Slot) -> Submit:
        async def submit(inbound: Inbound) -> SubmitResult:
            now = self.clock()
            slot.alive_at = now
            self._set(slot, last_inbound_at=now)
            assert self._submit is not None
            return await self._submit(inbound)

        return submit

    # ------------------------------------------------------------------ watchdog
    async def _watch(self) -> None:
        every = min([self.watchdog.every, *(w.every for w in self.watchdogs.values())])
        while not self._stopping:
            await self.sleep(every)
            await self.check_liveness()

    async def check_liveness(self) -> list[str]:
        """One watchdog pass: ping adapters that have been quiet; reconnect those quiet and
        unreachable too long."""
        kicked: list[str] = []
        for name, slot in self._slots.items():
            if (
                slot.health.state != "running"
                or not isinstance(slot.adapter, Pingable)
                or slot.alive_at is None
            ):
                continue
            rule = self.watchdogs.get(name, self.watchdog)
            now = self.clock()
            quiet = (now - slot.alive_at).total_seconds()
            if quiet < rule.every:
                continue
            if await self._ping(name, slot.adapter, rule):
                slot.alive_at = now
                continue
            if quiet >= rule.silence:
                slot.kick_reason = f"no events and no answer to ping for {quiet:.0f}s"
                log.warning("adapter %s: %s; reconnecting", name, slot.kick_reason)
                slot.kick.set()
                kicked.append(name)
        return kicked

    async def _ping(self, name: str, adapter: Pingable, rule: Watchdog) -> bool:
        try:
            async with asyncio.timeout(rule.ping_timeout):
                return bool(await adapter.ping())
        except Exception as exc:  # noqa: BLE001 - a failing ping is the answer we are looking for
            log.info("adapter %s ping failed: %s", name, _describe(exc))
            return False

    def _set(self, slot: _Slot, **changes: Any) -> None:
        slot.health = replace(slot.health, **changes)


def _describe(exc: BaseException) -> str:
    """Our errors are worded for people already; a foreign one gets its type name in front."""
    text = str(exc)
    if isinstance(exc, GatewayError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
