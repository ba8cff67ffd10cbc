"""Shared fixtures: the wire fakes (tests/fakes) and a gateway home with a config pointing at them."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import browser  # noqa: F401 (a fixture, for every test module)
from tests.failure_reports import pytest_runtest_makereport  # noqa: F401 (a hook)
from tests.fakes.fixtures import *

# Never let a developer's real keys or home leak into a test run.
for _var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GATEWAY_HOME", "OPENAI_BASE_URL",
             "ANTHROPIC_BASE_URL"):
    os.environ.pop(_var, None)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Tests that run `gateway.cli.main.main` in-process configure logging (dictConfig on the root logger, handlers
    bound to pytest's capture streams); undo that so later tests' caplog sees every record untouched."""
    root = logging.getLogger()
    saved_root = (root.level, root.handlers[:], root.filters[:])
    saved = {name: (lg.level, lg.handlers[:], lg.filters[:], lg.propagate, lg.disabled)
             for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    yield
    root.setLevel(saved_root[0])
    root.handlers[:] = saved_root[1]
    root.filters[:] = saved_root[2]
    for name, lg in logging.root.manager.loggerDict.items():
        if not isinstance(lg, logging.Logger):
            continue
        if name in saved:
            lg.level, handlers, filters, lg.propagate, lg.disabled = saved[name]
            lg.handlers[:] = handlers
            lg.filters[:] = filters
        else:
            lg.handlers.clear()
            lg.filters.clear()
            lg.setLevel(logging.NOTSET)
            lg.propagate = True
            lg.disabled = False
