"""A pytest plugin (loaded by tests/conftest.py): mypy starts as soon as the tests are collected,
in a child process, and test_mypy_clean takes its result (the fake MCP servers' zygote, too).

mypy over the whole tree takes seconds with its cache (.mypy_cache, kept between runs) and a
minute or more of CPU without it (a fresh clone). Most of the suite waits on daemons, browsers and
fakes, so a CPU is mostly idle meanwhile: mypy runs there, at a lower priority than the tests,
instead of adding its time to the end of the run.

With pytest-xdist's workers (tests/parallel.py) the controller starts it, once, and the worker that
gets test_mypy_clean reads its exit code and output from the files named in GATEWAY_MYPY_RUN.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
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


# The same, its exit code written to the file named in GATEWAY_MYPY_CODE when it ends (where an
# xdist worker reads it), by a shell: mypy ends with os._exit.
MYPY_CODE_TO_FILE = ["sh", "-c", '"$@"; echo $? > "$GATEWAY_MYPY_CODE"', "sh", *MYPY]
RUN_VARIABLE = "GATEWAY_MYPY_RUN"  # "<output file>:<exit code file>", set by the xdist controller


class Background:
    """A command started now; its output (stdout and stderr together) kept in a temporary file,
    and its exit code too when `code_file` is asked for (the command writes it: MYPY_CODE_TO_FILE).
    """

    def __init__(self, argv: list[str], code_file: bool = False) -> None:
        fd, name = tempfile.mkstemp(prefix="gateway-check-", suffix=".log")
        self.output = Path(name)
        self.code = self.output.with_suffix(".code")
        env = {**os.environ, "GATEWAY_MYPY_CODE": str(self.code)} if code_file else None
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # stop() ends the shell and mypy together
            )
        finally:
            os.close(fd)

    def result(self, timeout: float) -> tuple[int, str]:
        code = self.proc.wait(timeout)
        return code, self.output.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.output.unlink(missing_ok=True)
        self.code.unlink(missing_ok=True)


def _result_of_files(run: str, timeout: float) -> tuple[int, str]:
    """The exit code and output of the run the xdist controller started (polled: it is another
    process's child)."""
    output, code = (Path(name) for name in run.split(os.pathsep))
    deadline = time.monotonic() + timeout
    while not code.exists() or not code.read_text():
        if time.monotonic() > deadline:
            raise TimeoutError(f"mypy (started by the controller) did not end within {timeout} s")
        time.sleep(0.2)
    text = code.read_text().strip()
    return int(text) if text.lstrip("-").isdigit() else 1, output.read_text(errors="replace")


_started: dict[str, Background] = {}


def mypy_result(timeout: float) -> tuple[int, str]:
    """mypy's exit code and output, from the run started at collection (or one started now)."""
    if os.environ.get(RUN_VARIABLE):
        return _result_of_files(os.environ[RUN_VARIABLE], timeout)
    if "mypy" not in _started:
        _started["mypy"] = Background(MYPY)
    return _started["mypy"].result(timeout)


def start_for_workers(config: pytest.Config) -> None:
    """In the xdist controller, before its workers start: mypy once for them all, when the run
    includes test_mypy_clean's file."""
    if not _mypy_installed() or not _runs_typing_checks(config):
        return
    background = _started.setdefault("mypy", Background(MYPY_CODE_TO_FILE, code_file=True))
    os.environ[RUN_VARIABLE] = os.pathsep.join([str(background.output), str(background.code)])


def _runs_typing_checks(config: pytest.Config) -> bool:
    typing = (ROOT / "tests" / "test_typing_and_layers.py").resolve()
    for arg in config.args or ["tests"]:
        path = (Path(config.invocation_params.dir) / arg.split("::")[0]).resolve()
        if path == typing or typing.is_relative_to(path):
            return True
    return False


def pytest_collection_finish(session: pytest.Session) -> None:
    if os.environ.get(RUN_VARIABLE):
        pass  # the controller started it
    elif (
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
    if _started:
        os.environ.pop(RUN_VARIABLE, None)
    _started.clear()


def _mypy_installed() -> bool:
    """Without mypy the test skips (or fails, in CI) with its own message: nothing to start."""
    try:
        import mypy  # noqa: F401
    except ImportError:
        return False
    return True
