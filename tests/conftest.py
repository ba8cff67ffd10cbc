"""Shared fixtures: the wire fakes (tests/fakes) and
a gateway home with a config pointing at them.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import WebConfig
from tests.browser import browser, chromium  # noqa: F401 (fixtures, for every test module)
from tests.early_checks import pytest_collection_finish, pytest_sessionfinish  # noqa: F401 (hooks)
from tests.failure_reports import pytest_configure, pytest_unconfigure  # noqa: F401 (hooks)
from tests.fakes.fixtures import *

pytest_plugins = ["tests.parallel"]  # how many xdist workers; what they share starts once

# Never let a developer's real keys, tokens, home or service manager leak into a test run.
for _var in (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "OPENROUTER_API_KEY",
    "GATEWAY_HOME",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "GATEWAY_WEB_PORT",
    "TELEGRAM_BOT_TOKEN",
    "DISCORD_BOT_TOKEN",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
):
    os.environ.pop(_var, None)
# Every fake listens on loopback: a proxy from the environment (HTTP_PROXY, ALL_PROXY …) is not
# asked for it, by the SDKs (httpx) or aiohttp alike.
for _var in ("NO_PROXY", "no_proxy"):
    os.environ[_var] = ",".join(
        filter(None, [os.environ.get(_var), "127.0.0.1", "localhost", "::1"])
    )


DEFAULT_WEB_PORT = WebConfig().port


@pytest.fixture(autouse=True, scope="session")
def _no_default_web_port() -> Iterator[None]:
    """No test listens on the product's default web port: the developer's own `gateway run` may
    hold it (the README's first command leaves it running), and then the test fails only there.
    Binding it in this process fails at once, wherever the port is free or not; a test's config
    names a port from the OS instead (tests/helpers.py write_config adds `web.port: 0`)."""
    bind = socket.socket.bind

    def guarded(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and len(address) >= 2 and address[1] == DEFAULT_WEB_PORT:
            raise AssertionError(
                f"a test binds {address}: port {DEFAULT_WEB_PORT} is the default web "
                "port, where the developer's own gateway may listen; write "
                "`web.port: 0` (write_config does) or take tests.daemon_proc.free_port()"
            )
        bind(self, address)

    socket.socket.bind = guarded  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        socket.socket.bind = bind  # type: ignore[method-assign]


HEAVY = bool(os.environ.get("GATEWAY_CI") or os.environ.get("GATEWAY_HEAVY"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `heavy` tests (kill -9 of real daemons, a minute or more on a busy machine) run in CI and
    with GATEWAY_HEAVY=1; the README's test command skips them, and the in-process crash points
    (tests/chaos/crashpoints.py) still cover every delivery promise there."""
    if HEAVY:
        return
    skip = pytest.mark.skip(reason="a kill -9 run: CI runs it (GATEWAY_CI=1), or GATEWAY_HEAVY=1")
    for item in items:
        if "heavy" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Tests that run `gateway.cli.main.main` in-process configure logging (dictConfig on the root
    logger, handlers bound to pytest's capture streams); undo that so later tests' caplog sees every
    record untouched."""
    root = logging.getLogger()
    saved_root = (root.level, root.handlers[:], root.filters[:])
    saved = {
        name: (lg.level, lg.handlers[:], lg.filters[:], lg.propagate, lg.disabled)
        for name, lg in logging.root.manager.loggerDict.items()
        if isinstance(lg, logging.Logger)
    }
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
