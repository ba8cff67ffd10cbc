"""Adapter supervision: one adapter's crashes, silence
or permanent failure never stop the others.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path

import pytest

from gateway.errors import AdapterFatal, PlatformUnavailable
from gateway.events import (
    ChatRef,
    Inbound,
    Pingable,
    Submit,
    SubmitOutcome,
    SubmitResult,
    Watchable,
)
from gateway.ops.daemon import Daemon
from gateway.ops.supervisor import RestartPolicy, Supervisor, Watchdog
from tests.delivery import ReplyLLM, ScriptedAdapter, gateway_on, write_home
from tests.fakeclock import FakeClock
from tests.helpers import inbound


class CrashingAdapter(ScriptedAdapter):
    """Serves until the test calls `crash`; the supervisor learns of it through `wait_closed`."""

    def __init__(self, platform: str, clock: FakeClock | None = None) -> None:
        super().__init__(platform, clock)
        self._closed: asyncio.Future[None] | None = None
        self.stops = 0

    async def start(self, submit: Submit) -> None:
        await super().start(submit)
        self._closed = asyncio.get_running_loop().create_future()

    async def wait_closed(self) -> None:
        assert self._closed is not None
        await self._closed

    async def stop(self) -> None:
        self.stops += 1

    def crash(self, error: BaseException | None = None) -> None:
        error = error or ConnectionResetError("socket closed by peer")
        assert self._closed is not None and not self._closed.done()
        self._closed.set_exception(error)


class FlakyStart(ScriptedAdapter):
    """`start` raises the queued errors one by one, then succeeds."""

    def __init__(self, platform: str, clock: FakeClock, *errors: BaseException) -> None:
        super().__init__(platform, clock)
        self.errors = list(errors)
        self.start_times: list[float] = []

    async def start(self, submit: Submit) -> None:
        assert self.clock is not None
        self.start_times.append(self.clock.monotonic())
        await super().start(submit)
        if self.errors:
            raise self.errors.pop(0)


class QuietAdapter(CrashingAdapter):
    """Receives nothing on its own; `ping` answers as `reachable` says."""

    def __init__(self, platform: str, clock: FakeClock) -> None:
        super().__init__(platform, clock)
        self.reachable = True
        self.pings: list[float] = []

    async def ping(self) -> bool:
        assert self.clock is not None
        self.pings.append(self.clock.monotonic())
        return self.reachable


async def no_submit(message: Inbound) -> SubmitResult:
    raise AssertionError("nothing is submitted in this test")


def test_fakes_satisfy_the_optional_protocols() -> None:
    assert isinstance(CrashingAdapter("x"), Watchable) and not isinstance(
        CrashingAdapter("x"), Pingable
    )
    assert isinstance(QuietAdapter("x", FakeClock()), Pingable)


async def test_one_adapter_crashing_three_times_while_another_keeps_answering(home: Path) -> None:
    write_home(home)
    clock = FakeClock()
    tg = CrashingAdapter("telegram", clock)
    cli = ScriptedAdapter("cli", clock)
    gw = gateway_on(clock, home, [tg, cli], ReplyLLM())
    daemon = Daemon(gw, install_signals=False)
    await clock.run(daemon.start())
    assert gw.supervisor is not None
    try:
        for crash, delay in enumerate([1.0, 2.0, 4.0], start=1):
            tg.crash()
            await clock.settle()
            health = gw.supervisor.health()["telegram"]
            assert (health.state, health.restarts, health.connected_since) == (
                "backoff",
                crash,
                None,
            )
            assert health.last_error == "ConnectionResetError: socket closed by peer"
            assert cli.submit is not None
            await cli.submit(inbound(f"still there {crash}?", platform="cli", chat_id="c"))
            await gw.sessions.wait_idle()
            assert cli.seen()[-1] == f"re: still there {crash}?"  # answered while telegram is down
            await clock.advance(delay - 0.01)
            assert tg.starts == crash  # not restarted before its backoff delay
            await clock.advance(0.01)
            assert tg.starts == crash + 1 and gw.supervisor.health()["telegram"].state == "running"
        by_name = gw.supervisor.health()
        assert (
            by_name["telegram"].restarts == 3 and by_name["telegram"].connected_since == clock.now()
        )
        assert by_name["cli"].restarts == 0 and by_name["cli"].state == "running"
        assert by_name["cli"].last_inbound_at is not None and cli.starts == 1
        assert tg.stops == 3  # each crashed connection was closed before the restart
    finally:
        await clock.run(daemon.stop())
    assert {h.state for h in gw.supervisor.health().values()} == {"stopped"}


async def test_a_permanent_failure_stays_down_without_a_restart_storm(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_home(home)
    clock = FakeClock()
    discord = FlakyStart(
        "discord", clock, AdapterFatal("discord", "gateway closed with 4014: disallowed intents")
    )
    cli = ScriptedAdapter("cli", clock)
    gw = gateway_on(clock, home, [discord, cli], ReplyLLM())
    daemon = Daemon(gw, install_signals=False)
    with caplog.at_level(logging.INFO, logger="gateway.ops.supervisor"):
        await clock.run(daemon.start())
        await clock.advance(3600)
    try:
        assert gw.supervisor is not None
        health = gw.supervisor.health()["discord"]
        assert (health.state, health.restarts) == ("down", 0)
        assert health.last_error == "discord: gateway closed with 4014: disallowed intents"
        assert discord.start_times == [0.0]
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [
            (
                "adapter discord stays down (no restarts): discord: gateway closed with 4014: "
                "disallowed intents"
            )
        ]
        assert cli.submit is not None
        await cli.submit(inbound("hello", platform="cli", chat_id="c"))
        await gw.sessions.wait_idle()
        assert cli.seen() == ["re: hello"]
    finally:
        await clock.run(daemon.stop())


async def test_start_failures_back_off_exponentially_up_to_the_cap() -> None:
    clock = FakeClock()
    flaky = FlakyStart("slack", clock, *[PlatformUnavailable("slack", "connection refused")] * 6)
    sup = Supervisor(
        {"slack": flaky},
        clock=clock.now,
        sleep=clock.sleep,
        policy=RestartPolicy(first=1, factor=2, maximum=8),
    )
    await clock.run(sup.start(no_submit))
    assert sup.health()["slack"].state == "backoff" and not sup.is_up("slack")
    await clock.advance(100)
    assert flaky.start_times == [0, 1, 3, 7, 15, 23, 31]  # waits 1, 2, 4, 8, then capped at 8
    health = sup.health()["slack"]
    assert (health.state, health.restarts, health.last_error) == (
        "running",
        6,
        "slack: connection refused",
    )
    assert sup.is_up("slack")
    await sup.stop()


async def test_backoff_starts_over_after_a_healthy_run() -> None:
    clock = FakeClock()
    adapter = CrashingAdapter("slack", clock)
    sup = Supervisor(
        {"slack": adapter},
        clock=clock.now,
        sleep=clock.sleep,
        policy=RestartPolicy(first=1, factor=2, healthy_after=600),
    )
    await sup.start(no_submit)
    adapter.crash()
    await clock.advance(1)
    adapter.crash()  # right after coming back: the next wait doubles
    await clock.advance(1.5)
    assert adapter.starts == 2
    await clock.advance(0.5)
    assert adapter.starts == 3
    await clock.advance(601)  # a long healthy run
    adapter.crash()
    await clock.advance(1)
    assert adapter.starts == 4
    await sup.stop()


async def test_watchdog_reconnects_an_adapter_silent_and_unreachable_too_long() -> None:
    clock = FakeClock()
    quiet = QuietAdapter("slack", clock)
    sup = Supervisor(
        {"slack": quiet},
        clock=clock.now,
        sleep=clock.sleep,
        watchdogs={"slack": Watchdog(silence=300, every=60)},
    )
    forwarded: list[str] = []

    async def submit(message: Inbound) -> SubmitResult:
        forwarded.append(message.text)
        return SubmitResult(SubmitOutcome.ACCEPTED)

    await sup.start(submit)
    await clock.advance(900)  # quiet but reachable: pinged each minute, never reconnected
    assert quiet.starts == 1 and len(quiet.pings) == 15
    quiet.reachable = False
    await clock.advance(240)
    assert quiet.starts == 1  # pings fail, but not yet 300 s without a sign of life
    assert quiet.submit is not None
    await quiet.submit(inbound("an event arrives", platform="slack"))  # inbound counts as life
    await clock.advance(299)
    assert quiet.starts == 1 and forwarded == ["an event arrives"]
    await clock.advance(61)
    assert quiet.starts == 2 and quiet.stops == 1
    health = sup.health()["slack"]
    assert health.restarts == 1 and health.last_error is not None
    assert health.last_error.startswith("no events and no answer to ping for")
    assert health.last_inbound_at == clock.start + timedelta(seconds=900 + 240)
    await sup.stop()


async def test_replies_wait_while_the_adapter_is_down_and_go_out_when_it_is_back(
    home: Path,
) -> None:
    write_home(home)
    clock = FakeClock()
    tg = CrashingAdapter("telegram", clock)
    gw = gateway_on(clock, home, [tg], ReplyLLM())
    daemon = Daemon(gw, install_signals=False)
    await clock.run(daemon.start())
    try:
        tg.crash()
        await clock.settle()
        chat = ChatRef("telegram", "dm", "100")
        await gw.outbox.post("n1", chat, "first notice")
        await gw.outbox.post("n2", chat, "second notice")
        assert tg.attempts == []
        await clock.advance(1)  # restarted: what waited goes out, in order
        await clock.advance(1)
        assert tg.seen() == ["first notice", "second notice"]
    finally:
        await clock.run(daemon.stop())


async def test_stop_reaches_every_adapter_even_when_one_fails_to_stop() -> None:
    clock = FakeClock()

    class BadStop(ScriptedAdapter):
        async def stop(self) -> None:
            raise RuntimeError("already closed")

    bad, good = BadStop("discord", clock), ScriptedAdapter("slack", clock)
    sup = Supervisor({"discord": bad, "slack": good}, clock=clock.now, sleep=clock.sleep)
    await sup.start(no_submit)
    await sup.stop()
    assert good.events == ["stop"]
    assert {h.state for h in sup.health().values()} == {"stopped"}
