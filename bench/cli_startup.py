"""Benchmark the CPU a `gateway` command spends before it does anything: `gateway --version`
and `gateway --help` (the parser alone), the cost every command and every daemon start pays.

Run:  python bench/cli_startup.py [--runs N] [--tree PATH]
Prints, per command, the median, lowest and highest CPU time (user + system of the child) over
N runs. CPU, not wall time, so a busy machine changes the figures little. --tree runs another
checkout's code with this interpreter (PYTHONPATH=PATH), to compare before and after.
The goal (issue #28): `gateway --version` at most 0.25 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ENTRY = "import sys; from gateway.cli.main import main; sys.exit(main())"


def cpu_of(argv: list[str], tree: Path) -> float:
    """The CPU seconds one run of `gateway argv` took (it must succeed)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", ENTRY, *argv],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    cpu_of(["--version"], args.tree)  # the first run may compile the tree's .pyc files
    for argv in (["--version"], ["--help"]):
        times = [cpu_of(argv, args.tree) for _ in range(args.runs)]
        print(
            f"gateway {' '.join(argv):<10} CPU median {statistics.median(times):.3f} s "
            f"(min {min(times):.3f}, max {max(times):.3f}, {args.runs} runs)"
        )


if __name__ == "__main__":
    main()
