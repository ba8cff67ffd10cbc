"""Never twice: a job's run dies at every moment a kill -9 could pick (before each SQLite write
transaction, after each send the platform took; tests/chaos/crashpoints.py's machinery), then the
gateway boots again on the same home.

Whatever the moment, the model is asked at most once for the run, and the chat sees either the whole
answer (a chunk Telegram took just before the death may come twice: it takes no idempotency key;
Discord's nonce dedupes even that) or, when the death came between the claim and the stored answer,
one note that the run was cut short; never both, never the answer twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.agent.tools.registry import ToolContext
from gateway.config.settings import load_config
from gateway.ops.wiring import Gateway, build_gateway
from tests.chaos.crashpoints import (
    Crash,
    DyingAdapter,
    Fate,
    Platform,
    ScriptLLM,
    VirtualTime,
    arm,
    long_answer,
)
from tests.helpers import inbound, write_config
from tests.jobs_support import settle
from tests.lifecycle_support import FakeClock

pytestmark = pytest.mark.chaos

ACCESS = {
    "telegram": "telegram:\n  token: '1:x'\n  allowed_users: ['42']\n",
    "discord": "discord:\n  token: 'x'\n  allowed_users: ['42']\n",
}


def build(
    home: Path, platform: str, record: Platform, fate: Fate, clock: FakeClock
) -> tuple[Gateway, ScriptLLM]:
    time_ = VirtualTime()
    llm = ScriptLLM(long_answer)
    gw = build_gateway(
        load_config(home, env={}),
        env={},
        adapters=[DyingAdapter(platform, record, fate)],
        llm=llm,
        probe_ollama=False,
        clock=clock,
        sleep=time_.sleep,
        monotonic=time_.monotonic,
    )
    return gw, llm


async def make_job(home: Path, platform: str, clock: FakeClock) -> None:
    """The first life: the person's `schedule` call makes
    a job due in ten minutes, through the real tool."""
    home.mkdir(parents=True)
    write_config(home, extra="schedule: {timezone: UTC}\n" + ACCESS[platform])
    gw, _ = build(home, platform, Platform(), Fate(), clock)
    origin = inbound("remind me", platform=platform, chat_id="42", user_id="42")
    ctx = ToolContext(
        session_id=0,
        platform=platform,
        chat_type="dm",
        user_id="42",
        home=home,
        db_path=home / "state.db",
        chat_id="42",
        origin=origin,
    )
    result = await gw.tools.call(
        "schedule",
        {"action": "create", "when": "10m", "prompt": "Tell the long story.", "name": "story"},
        ctx,
    )
    assert not result.is_error, result.text
    gw.store.close()


async def boot(
    home: Path, platform: str, record: Platform, fate: Fate, clock: FakeClock, calls: list[str]
) -> None:
    """One boot of the daemon's job side: the overdue
    job runs (or is reported), pending chunks go out."""
    gw, llm = build(home, platform, record, fate, clock)
    assert gw.jobs is not None
    arm(gw.store, fate)
    try:
        await gw.jobs.start()
        await settle(gw)
        await gw.outbox.deliver_pending()
    except Crash:
        pass
    finally:
        calls.extend(c for c in llm.calls if "[Scheduled job #1" in c)
        await gw.jobs.stop(0)
        await gw.sessions.cancel_all()
        await asyncio.sleep(0)
        gw.store.close()


async def life_and_death(
    home: Path, platform: str, **point: int
) -> tuple[list[str], Fate, list[str]]:
    clock = FakeClock()
    await make_job(home, platform, clock)
    clock.advance(minutes=10)
    record, fate = Platform(), Fate(**point)  # type: ignore[arg-type]
    calls: list[str] = []
    await boot(home, platform, record, fate, clock, calls)
    if fate.dead:
        await boot(home, platform, record, Fate(), clock, calls)
    return record.texts(), fate, calls


@pytest.mark.parametrize("platform", ["telegram", "discord"])
async def test_a_run_killed_at_any_moment_is_never_run_or_posted_twice(
    tmp_path: Path, platform: str
) -> None:
    expected, clean, calls = await life_and_death(tmp_path / "clean", platform)
    assert (
        len(expected) >= 3
        and "story" in expected[0]
        and "(job #1)" in expected[0]
        and len(calls) == 1
    )
    assert clean.writes > 4 and clean.sends == len(expected)
    points = [{"at_write": n} for n in range(1, clean.writes + 1)]
    points += [{"after_send": n} for n in range(1, clean.sends + 1)]
    outcomes: dict[str, int] = {}
    failures = []
    for point in points:
        name = "-".join(f"{k}{v}" for k, v in point.items())
        got, fate, calls = await life_and_death(tmp_path / name, platform, **point)
        k = fate.died_after_send if platform != "discord" else 0
        answer = expected[:k] + expected[k - 1 :] if k else expected
        cut_short = len(got) == 1 and "was interrupted by a restart" in got[0]
        if len(calls) > 1 or not (got == answer or cut_short):
            failures.append(
                f"died at {point}: model asked {len(calls)}x; chat saw {[t[:50] for t in got]}"
            )
        outcome = "cut short" if cut_short else "answered"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(f"{platform}: {clean.writes} write points, {clean.sends} send points: {outcomes}")
    assert not failures, "\n".join(failures)
    # both kinds of moment were hit
    assert outcomes.get("cut short", 0) >= 1 and outcomes.get("answered", 0) >= 3
