"""The long kill -9 chaos run: `gateway run` as a subprocess against FakeTelegram, FakeSlack,
FakeDiscord and the fake LLM, 200 conversations of several turns (a third on each platform), SIGKILL
at ≥ 10 seeded moments with a restart after each (`--aimed` of them the instant Discord stored a
chunk); then every promise is checked (tests/chaos/killrun.py) and the counts are printed. Exit
status 1 when a promise was broken.

Run:  PYTHONPATH=. python bench/chaos.py [--conversations 200] [--turns 5] [--kills 10]
      [--aimed 2] [--seed 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from tests.chaos.killrun import ChaosPlan, KillRun


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument(
        "--turns", type=int, default=5, help="steps per conversation (a /new is a step)"
    )
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument(
        "--aimed", type=int, default=2, help="kills that land the instant Discord stored a chunk"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--keep", type=Path, help="run in this directory and keep it (database, logs)"
    )
    args = parser.parse_args()
    plan = ChaosPlan(
        conversations=args.conversations,
        turns=args.turns,
        kills=args.kills,
        seed=args.seed,
        aimed_at_discord=args.aimed,
        answer_timeout=600.0,
    )
    with tempfile.TemporaryDirectory(prefix="gw-chaos-") as tmp:
        root = args.keep or Path(tmp)
        run = KillRun(plan, root / "home", log=lambda line: print(line, flush=True))
        report = asyncio.run(run.run())
        if args.keep:
            for i, proc in enumerate(run.procs):
                (root / f"daemon-{i + 1}.log").write_text(proc.output(), encoding="utf-8")
    print(report.render())
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
