"""A pytest plugin (loaded by tests/conftest.py): a failure's report is written with the cyclic
garbage collector paused, so no finalizer runs while pytest parses the test's source.

CPython before 3.11.8 keeps one AST-construction depth counter per interpreter (gh-106905). When a
collection inside `ast.parse` runs a finalizer that parses too, the outer parse fails with
"SystemError: AST constructor recursion depth mismatch". pytest parses the test's source to show a
failure, and a failed test leaves exactly the garbage whose finalizers do that: an unclosed
transport's ResourceWarning is an error here (filterwarnings), pytest's unraisable-exception hook
formats its traceback, and 3.11's traceback module parses each line for its carets. The session then
ends with INTERNALERROR and every later test is lost (tests/test_failure_reports.py shows it). With
the collector paused, that garbage goes at the next collection and is reported as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Generator

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                        pytest.TestReport]:
    if call.excinfo is None:  # a pass: nothing is formatted
        return (yield)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        if was_enabled:
            gc.enable()
