"""Chaos, CI's short version (bench/chaos.py is the long one): kill -9 at seeded moments, platform faults on
~20 % of calls, and every way the model can fail; what a user sees must stay whole, ordered and single."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.killrun import ChaosPlan, KillRun

pytestmark = pytest.mark.chaos


async def test_kill_9_at_seeded_moments_loses_and_doubles_nothing(tmp_path: Path) -> None:
    run = KillRun(ChaosPlan(conversations=20, turns=4, kills=3, seed=12), tmp_path / "home", log=print)
    report = await run.run()
    print(report.render())
    assert report.counts["kills"] == 3
    assert not report.problems, report.render()
