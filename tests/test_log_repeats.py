"""The same warning or error logged over and over is let through a few times a window, then counted,
not written.
"""

from __future__ import annotations

import io
import json
import logging

from gateway.telemetry.logs import setup_logging
from gateway.telemetry.repeats import RepeatFilter
from tests.fakeclock import FakeClock


def record(msg: str, level: int = logging.ERROR, name: str = "asyncio") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_a_flood_of_one_error_is_held_back_and_counted() -> None:
    clock = FakeClock()
    repeats = RepeatFilter(burst=10, window=60.0, clock=clock.monotonic)
    passed = [
        repeats.filter(record("socket.accept() out of system resource")) for _ in range(300_000)
    ]
    assert sum(passed) == 10
    assert repeats.filter(record("another error"))  # a different message is not held back
    clock.t = 60.0
    after = record("socket.accept() out of system resource")
    assert repeats.filter(after)
    assert after.getMessage() == (
        "socket.accept() out of system resource [299,990 more like this in the last 60s not logged]"
    )


def test_info_and_debug_are_never_held_back() -> None:
    repeats = RepeatFilter(burst=1, clock=FakeClock().monotonic)
    assert all(repeats.filter(record("turn done", logging.INFO)) for _ in range(100))


def test_setup_logging_installs_it_on_the_handler() -> None:
    stream = io.StringIO()
    setup_logging("INFO", "json", stream=stream)
    log = logging.getLogger("asyncio")
    for _ in range(5_000):
        log.error("socket.accept() out of system resource")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 10 and {line["msg"] for line in lines} == {
        "socket.accept() out of system resource"
    }
