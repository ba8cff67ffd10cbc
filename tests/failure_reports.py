"""A pytest plugin (loaded by tests/conftest.py): on CPython before 3.11.8, `ast.parse` runs with
the cyclic garbage collector paused, so no finalizer can parse while a parse is under way.

Those versions keep one AST-construction depth counter per interpreter (gh-106905). When a
collection inside `ast.parse` runs a finalizer that parses too, the outer parse fails with
"SystemError: AST constructor recursion depth mismatch". pytest parses the test's source to show a
failure, and a failed test leaves exactly the garbage whose finalizers do that: an unclosed
transport's ResourceWarning is an error here (filterwarnings), pytest's unraisable-exception hook
formats its traceback, and 3.11's traceback module parses each line for its carets. Inside pytest's
report that ends the session with INTERNALERROR and every later test is lost; inside a traceback
the code under test formats, it fails that code (tests/test_failure_reports.py shows both). With
the collector paused, that garbage goes at the next collection, outside any parse, and is reported
as usual. Everything that parses (pytest's reports, its assertion rewriting, `traceback`) looks up
`ast.parse` when it calls it, so the pause covers them all.
"""

from __future__ import annotations

import ast
import gc
import sys
from typing import Any

import pytest

AFFECTED = sys.version_info < (3, 11, 8)
_original = ast.parse


def _parse_with_collector_paused(*args: Any, **kwargs: Any) -> Any:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _original(*args, **kwargs)
    finally:
        if was_enabled:
            gc.enable()


def pytest_configure(config: pytest.Config) -> None:
    if AFFECTED:
        ast.parse = _parse_with_collector_paused


def pytest_unconfigure(config: pytest.Config) -> None:
    ast.parse = _original
