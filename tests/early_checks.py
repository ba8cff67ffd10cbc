"""A pytest plugin (loaded by tests/conftest.py): mypy starts as soon as the tests are collected,
in a child process, and test_mypy_clean takes its result (the fake MCP servers' zygote, too).

mypy over the whole tree takes seconds with its cache (.mypy_cache, kept between runs) and a
minute or more of CPU without it (a fresh clone). Most of the suite waits on daemons, browsers and
fakes, so a CPU is mostly idle meanwhile: mypy runs there, at a lower priority than the tests,
instead of adding its time to the end of the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.fakes import mcp_zygote

ROOT = Path(__file__).resolve().parent.parent
# `python -m mypy` at a lower priority: the tests first (their daemons and fakes run on time), mypy
# takes what is left.
MYPY = [
    sys.executable,
    "-c",
    "import os, runpy; os.nice(10); runpy.run_module('mypy', run_name='__main__')",
]


class Background:
    """A command started now; its output (stdout and stderr together) kept in a temporary file."""

    def __init__(self, argv: list[str]) -> None:
        fd, name = tempfile.mkstemp(prefix="gateway-check-", suffix=".log")
        self.output = Path(name)
        try:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=fd, stderr=subprocess.STDOUT
            )
        finally:
            os.close(fd)

    def result(self, timeout: float) -> tuple[int, str]:
        code = self.proc.wait(timeout)
        return code, self.output.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.output.unlink(missing_ok=True)


_started: dict[str, Background] = {}


def mypy_result(timeout: float) -> tuple[int, str]:
    """mypy's exit code and output, from the run started at collection (or one started now)."""
    if "mypy" not in _started:
        _started["mypy"] = Background(MYPY)
    return _started["mypy"].result(timeout)


def pytest_collection_finish(session: pytest.Session) -> None:
    if (
        any(
            item.name == "test_mypy_clean" and item.path.name == "test_typing_and_layers.py"
            for item in session.items
        )
        and _mypy_installed()
    ):
        _started.setdefault("mypy", Background(MYPY))
    if any(item.path.name.startswith(("test_mcp", "test_tool_search")) for item in session.items):
        mcp_zygote.start()  # the fake MCP servers' SDK import, done while other tests run


def pytest_sessionfinish(session: pytest.Session) -> None:
    for background in _started.values():
        background.stop()
    _started.clear()


def _mypy_installed() -> bool:
    """Without mypy the test skips (or fails, in CI) with its own message: nothing to start."""
    try:
        import mypy  # noqa: F401
    except ImportError:
        return False
    return True
