"""A pytest plugin that shows where the suite's time goes: per test, its wall time and the CPU time
of the pytest process and of the children it waited for (daemons, `gateway` commands, mypy).

Run:  python -m pytest -p bench.suite_time [pytest options]
Prints at the end the tests with the most wall time, the most CPU, and the most wall time not spent
on CPU in this process tree ("waiting": sleeps, polls, timeouts, a browser or a busy machine), then
the totals. On a busy machine "waiting" includes the time other programs had the CPU.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Generator
from dataclasses import dataclass

import pytest

TOP = 25


@dataclass
class Spent:
    wall: float = 0.0
    cpu: float = 0.0

    @property
    def waiting(self) -> float:
        return max(0.0, self.wall - self.cpu)


SPENT: dict[str, Spent] = {}


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    wall, cpu = time.monotonic(), _cpu()
    try:
        return (yield)
    finally:
        SPENT[item.nodeid] = Spent(time.monotonic() - wall, _cpu() - cpu)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    write = terminalreporter.write_line
    for title, key in (("wall", "wall"), ("CPU", "cpu"), ("waiting", "waiting")):
        terminalreporter.section(f"suite_time: the most {title}")
        ranked = sorted(SPENT.items(), key=lambda kv: getattr(kv[1], key), reverse=True)
        for nodeid, spent in ranked[:TOP]:
            write(
                f"{spent.wall:7.2f}s wall {spent.cpu:7.2f}s "
                f"cpu {spent.waiting:7.2f}s waiting  {nodeid}"
            )
    files: dict[str, Spent] = {}
    for nodeid, spent in SPENT.items():
        total = files.setdefault(nodeid.split("::")[0], Spent())
        total.wall += spent.wall
        total.cpu += spent.cpu
    terminalreporter.section("suite_time: per file (wall, cpu)")
    for name, spent in sorted(files.items(), key=lambda kv: kv[1].wall, reverse=True)[:40]:
        write(f"{spent.wall:7.1f}s wall {spent.cpu:7.1f}s cpu  {name}")
    wall = sum(s.wall for s in SPENT.values())
    cpu = sum(s.cpu for s in SPENT.values())
    write(
        f"suite_time: {len(SPENT)} tests, {wall:.0f} s wall in tests, {cpu:.0f} s CPU "
        f"(this process and the children it waited for)"
    )
