"""Benchmark the scheduled jobs' boot: N active jobs (default 10,000), rebuilt from SQLite into the
deadline heap.

Run:  .venv/bin/python bench/jobs.py [--jobs N] [--repeat R]
Prints: time to insert the jobs (setup), then the time to rebuild the timers at boot (goal < 1 s for
10,000): `JobRunner.rebuild` (read every active job's next run, load the heap) plus arming the one
sweep job on the scheduler, best and median of R fresh processes' worth of runners over the same
database. The store, the queries and the runner are the daemon's own (gateway.store.database.Store,
gateway.scheduling.runner.JobRunner).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gateway.config.settings import Config
from gateway.scheduling.jobstore import JobStore
from gateway.scheduling.runner import JobRunner, JobScope
from gateway.store.database import Store
from gateway.store.rows import iso

NOW = datetime(2031, 1, 6, 12, 0, tzinfo=UTC)
PLATFORMS = ("telegram", "discord", "slack", "web")


def seed(store: Store, n: int, rng: random.Random) -> float:
    """n active jobs of 500 people: a third one-offs in the next week, the rest cron or `every` runs
    due within a day (the mix a busy install has), plus as many finished jobs the rebuild must
    skip."""
    started = time.perf_counter()
    rows = []
    for i in range(2 * n):
        platform = rng.choice(PLATFORMS)
        kind = rng.choice(("once", "cron", "every"))
        spec = {"once": "", "cron": "0 8 * * mon,tue,wed,thu,fri", "every": "2h"}[kind]
        ahead = timedelta(seconds=rng.uniform(60, (7 if kind == "once" else 1) * 86400))
        active = i % 2 == 0
        rows.append(
            (
                f"job {i}",
                "Say something useful.",
                kind,
                spec,
                "Europe/Berlin",
                platform,
                "dm",
                str(i % 500),
                str(i % 500),
                iso(NOW - timedelta(days=3)),
                "active" if active else "done",
                iso(NOW + ahead) if active else None,
            )
        )
    with store.tx() as conn:
        conn.executemany(
            "INSERT INTO jobs (name, prompt, kind, spec, "
            "timezone, platform, chat_type, chat_id, user_id,"
            " created_at, state, next_run_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    return time.perf_counter() - started


async def rebuild_once(path: Path) -> tuple[float, int]:
    """A boot's work for the timers, on a freshly opened store (the page cache is warm, as right
    after a restart)."""
    store = Store(path)
    runner = JobRunner(
        jobs=JobStore(store),
        config=Config(home=path.parent),
        turn=None,  # type: ignore[arg-type]
        clock=lambda: NOW,
        scope=JobScope(PLATFORMS, allowed=lambda inbound: True),
    )
    try:
        started = time.perf_counter()
        overdue = runner.rebuild()
        runner.scheduler.start()
        runner.timers.reschedule()
        took = time.perf_counter() - started
        assert not overdue
        return took, len(runner.timers)
    finally:
        runner.scheduler.shutdown(wait=False)
        await asyncio.sleep(0)
        store.close()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        store = Store(path)
        setup = seed(store, args.jobs, random.Random(21))
        store.close()
        print(
            f"setup: {args.jobs:,} active jobs (+{args.jobs:,} finished) inserted in {setup:.2f} s"
        )
        results = [await rebuild_once(path) for _ in range(args.repeat)]
    times = sorted(t for t, _ in results)
    armed = results[0][1]
    best, median = times[0], statistics.median(times)
    print(
        f"rebuild at boot: {armed:,} timers armed in {median * 1000:.1f} ms median, "
        f"{best * 1000:.1f} ms best ({args.repeat} runs; goal < 1000 ms)"
    )
    return 0 if armed == args.jobs and median < 1.0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
