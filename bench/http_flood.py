"""A slow-body flood against a real `gateway run` on 127.0.0.1 (issue #27): how fast /healthz, the
web chat and a genuine Slack event are answered while each listener has `--sockets` connections in
flight that promise a body and send none (the web chat's unauthenticated; Slack's with a plausible
signature, which only a body could disprove). The goal: every probe answered within 2 s.

    PYTHONPATH=. python bench/http_flood.py [--sockets 300] [--rounds 10]

Prints one line per probe (what, seconds, answer), then the spread per kind of probe, what the
server did with the flood's requests, and the daemon's warnings.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
from collections import Counter
from pathlib import Path

from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack
from tests.floods import flood_a_daemon

GOAL_S = 2.0
USERS = {
    "U1": {"id": "U1", "name": "alice", "real_name": "Alice", "profile": {"display_name": "Alice"}}
}


async def main(sockets: int, rounds: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 8 * sockets), hard), hard))
    print(f"load {os.getloadavg()[0]:.2f}; {sockets} flood sockets a listener; {rounds} rounds")
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeLLM() as llm, FakeSlack(users=USERS) as slack:
            report = await flood_a_daemon(Path(tmp), llm, slack, sockets=sockets, rounds=rounds)
    for probe in report.probes:
        print(
            f"  {probe.what:<16} {probe.seconds:6.3f} s  {'ok ' if probe.ok else 'BAD'} "
            f"{probe.detail[:60]}"
        )
    worst = 0.0
    for what in dict.fromkeys(p.what for p in report.probes):
        times = [p.seconds for p in report.probes if p.what == what]
        worst = max(worst, *times)
        print(
            f"{what:<16} median {statistics.median(times):.3f} s  max {max(times):.3f} s  "
            f"answered {sum(p.ok for p in report.probes if p.what == what)}/{len(times)}"
        )
    for name, answers in report.floods.items():
        print(f"flood on {name}: {sum(answers.values())} requests: {dict(answers.most_common())}")
    warnings = Counter(
        r["msg"][:90] for r in report.log_records if r["level"] in ("WARNING", "ERROR")
    )
    for msg, count in warnings.most_common(8):
        print(f"  daemon log x{count}: {msg}")
    ok = all(p.ok for p in report.probes) and worst <= GOAL_S
    print(
        f"goal (every probe answered within {GOAL_S:g} s): {'met' if ok else 'MISSED'}; "
        f"exit {report.exit_code}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.sockets, args.rounds)))
