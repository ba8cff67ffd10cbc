"""A failing test never takes the session down: the report of a failure whose garbage formats a
traceback from a finalizer is written, and the tests after it run; and any parse in the test
process survives such garbage (tests/failure_reports.py says why they would not)."""

from __future__ import annotations

import ast
import gc
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import failure_reports

ROOT = Path(__file__).resolve().parent.parent

# A failed test's garbage, as a daemon that did not start leaves it: objects in reference cycles
# whose finalizer formats a traceback, as pytest's unraisable-exception hook does for an unclosed
# transport's ResourceWarning. Until the next test, each one leaves another behind, so that a
# collection falls inside pytest's parse of this file.
FAILING = """
import gc
import traceback

LEAVING = True
try:
    raise ResourceWarning("unclosed transport")
except ResourceWarning as exc:
    WARNING = exc


class Unclosed:
    def __init__(self):
        self.me = self

    def __del__(self):
        if LEAVING:
            Unclosed()
        traceback.format_exception(WARNING)


def test_fails():
    gc.set_threshold(100)
    Unclosed()
    assert [1] == [2]


def test_after_it():
    global LEAVING
    LEAVING = False
    gc.set_threshold(700)
    gc.collect()
"""


def run_pytest(tmp_path: Path, *plugins: str) -> str:
    (tmp_path / "test_garbage.py").write_text(FAILING, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        textwrap.dedent("""\
        [pytest]
        filterwarnings = error
        asyncio_default_fixture_loop_scope = function
        """),
        encoding="utf-8",
    )
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugins, "test_garbage.py"]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        args, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    return done.stdout + done.stderr


def test_a_failure_whose_garbage_warns_is_reported_and_the_session_goes_on(tmp_path: Path) -> None:
    said = run_pytest(tmp_path, "-p", "tests.failure_reports")
    assert "INTERNALERROR" not in said, said[-3000:]
    assert "FAILED test_garbage.py::test_fails - assert [1] == [2]" in said
    assert "1 failed, 1 passed in" in said  # and the next test ran


@pytest.mark.skipif(sys.version_info >= (3, 11, 8), reason="CPython 3.11.8 fixed gh-106905")
def test_without_the_plugin_this_python_ends_the_session(tmp_path: Path) -> None:
    """The case above is the real trigger on this interpreter: without the plugin, INTERNALERROR."""
    said = run_pytest(tmp_path)
    assert "SystemError: AST constructor recursion depth mismatch" in said, said[-3000:]


def parse_amid_garbage(parse: Callable[[str], Any]) -> Any:
    """`parse` of a 2,000-line module while 50 unreachable objects wait whose finalizer parses:
    the parse's own allocations start a collection, unless the collector is paused."""

    class Unclosed:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            ast.parse("x = 1")

    threshold = gc.get_threshold()
    gc.set_threshold(100)
    try:
        for _ in range(50):
            Unclosed()
        return parse("\n".join(f"v{i} = [{i}, {i}]" for i in range(2000)))
    finally:
        gc.set_threshold(*threshold)
        gc.collect()


def test_a_parse_in_the_test_process_survives_finalizers_that_parse() -> None:
    """What traceback's carets, pytest's reports and its assertion rewriting call: ast.parse."""
    assert len(parse_amid_garbage(ast.parse).body) == 2000


@pytest.mark.skipif(not failure_reports.AFFECTED, reason="CPython 3.11.8 fixed gh-106905")
def test_without_the_pause_this_python_fails_the_parse() -> None:
    with pytest.raises(SystemError, match="AST constructor recursion depth mismatch"):
        parse_amid_garbage(failure_reports._original)
