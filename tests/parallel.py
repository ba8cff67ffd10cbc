"""A pytest plugin (loaded by tests/conftest.py): how many pytest-xdist workers run the tests
(pyproject.toml passes `-n auto --dist worksteal`).

Most tests wait on real daemons, fakes and browsers, so one process leaves a core idle, and so do
as many workers as cores: on a quiet 2-core machine the tests took 11 minutes in one process, 5.6
with two workers and 4.7 with three (bench/README.md). `auto` is one worker more than the CPUs
this process may use (at most MAX_WORKERS), and none (the tests run in this process, without a
worker's start-up) when the command names test files or tests rather than a folder.
PYTEST_XDIST_AUTO_NUM_WORKERS, or `-n N` on the command line, says otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.early_checks import start_for_workers

MAX_WORKERS = 6


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist reads it
    if config.args and all(_names_tests(config, arg) for arg in config.args):
        return 0
    return min(len(os.sched_getaffinity(0)) + 1, MAX_WORKERS)


def _names_tests(config: pytest.Config, arg: str) -> bool:
    if "::" in arg:
        return True
    return (Path(config.invocation_params.dir) / arg).is_file()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """In the controller of a run with workers: what they share is started once, here."""
    workers = getattr(config.option, "numprocesses", 0)
    if workers and not hasattr(config, "workerinput"):
        start_for_workers(config)
