"""The shell's sandbox (gateway/sandbox/) with the real bubblewrap: what one command costs, how soon
a command past its deadline is gone with all its processes, and what a flood of output costs the
daemon.

    PYTHONPATH=. python bench/shell.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from gateway.config.shell import ShellConfig
from gateway.sandbox.runner import Sandbox
from gateway.sandbox.spec import SandboxSpec


async def main(runs: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="bench-shell-"))
    box = Sandbox(SandboxSpec.of(ShellConfig(enabled=True, timeout_s=3), home))
    print(f"load average {os.getloadavg()[0]:.1f}; bwrap as uid {os.geteuid()}")
    took = []
    for _ in range(runs):
        started = time.perf_counter()
        done = await box.run("echo hi-$((6*7))")
        took.append(time.perf_counter() - started)
        assert done.stdout.head == "hi-42\n"
    took.sort()
    print(
        f"echo in the sandbox, {runs} runs: median {statistics.median(took) * 1000:.0f} ms, "
        f"max {took[-1] * 1000:.0f} ms"
    )
    started = time.perf_counter()
    done = await box.run("sleep 100 & sleep 100 & sleep 100")
    print(
        f"sleep 100 (3 processes) with timeout_s=3: stopped ({done.stopped}) and reaped after "
        f"{time.perf_counter() - started:.2f} s wall time"
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    done = await box.run("yes")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(
        f"`yes` stopped at 64 MB of output ({done.stopped}) after "
        f"{time.perf_counter() - started:.2f} s; the daemon's peak RSS grew {grown / 1024:.1f} MB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    asyncio.run(main(parser.parse_args().runs))
