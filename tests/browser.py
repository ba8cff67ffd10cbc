"""Headless Chromium for the browser tests: Debian's `chromium` package driven by Playwright for
Python, which never downloads a browser of its own here. One Chromium serves the whole session
(started here, reached over its DevTools protocol); each test gets its own contexts.

Outside CI a machine without Chromium or Playwright skips these tests. In CI (`GATEWAY_CI=1`,
exported by `.ci/run`, which also installs the browser) their absence fails the run instead: the
chat and the dashboard must have been seen working in a real browser. `GATEWAY_SCREENSHOTS=DIR`
makes the tests save what they saw there (`docs/screenshots/` is made that way).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The flags this closed network needs (no background connections, no updates, no sync, no QUIC);
# Playwright gives every launch a fresh profile directory of its own.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# What Playwright's own launch adds and a page's behaviour depends on: timers at full speed in a
# page nobody looks at, no scrollbars in screenshots, one colour profile, no first-run chores.
LAUNCH_ARGS = [
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-renderer-backgrounding",
    "--disable-ipc-flooding-protection",
    "--disable-hang-monitor",
    "--disable-popup-blocking",
    "--disable-back-forward-cache",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--no-default-browser-check",
    "--force-color-profile=srgb",
    "--hide-scrollbars",
    "--mute-audio",
    "--password-store=basic",
    "--remote-debugging-port=0",
    (
        "--blink-settings=primaryHoverType=2,availableHoverTypes=2,"
        "primaryPointerType=4,availablePointerTypes=4"
    ),
]
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")
IN_CI = bool(os.environ.get("GATEWAY_CI") or os.environ.get("CI"))


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


def needs_browser() -> pytest.MarkDecorator:
    """The module mark: skip without a browser, except
    in CI, where that is an error at collection."""
    why = missing()
    if why is not None and IN_CI:
        raise RuntimeError(
            f"the browser tests must run in CI: {why} (.ci/run installs what they need)"
        )
    return pytest.mark.skipif(why is not None, reason=why or "")


@pytest.fixture(scope="session")
def chromium() -> Iterator[str]:
    """One headless Chromium for the whole session (a launch costs seconds of CPU); its DevTools
    address. Each test connects to it and makes its own contexts, which go when it disconnects."""
    profile = tempfile.mkdtemp(prefix="gateway-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, *CHROMIUM_ARGS, *LAUNCH_ARGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stderr is not None
    stderr = StderrReader(proc.stderr)
    try:
        if not stderr.ready.wait(120) or stderr.address is None:
            raise RuntimeError(f"Chromium did not start (exit {proc.poll()})")
        yield stderr.address
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stderr.thread.join(30)
        shutil.rmtree(profile, ignore_errors=True)


class StderrReader:
    """Reads Chromium's stderr to its end in a thread: the ws:// address it prints once it listens,
    then the rest, so a chatty browser never blocks on a full pipe."""

    def __init__(self, stream: IO[str]) -> None:
        self.address: str | None = None
        self.ready = threading.Event()
        self.thread = threading.Thread(
            target=self._read, args=(stream,), name="chromium-stderr", daemon=True
        )
        self.thread.start()

    def _read(self, stream: IO[str]) -> None:
        with stream:
            for line in stream:
                match = LISTENING.search(line)
                if match and self.address is None:
                    self.address = match.group(1)
                    self.ready.set()
        self.ready.set()  # it exited


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        connected = await pw.chromium.connect_over_cdp(chromium)
        try:
            yield connected
        finally:
            await connected.close()  # its contexts go; the browser stays for the next test


async def screenshot(page: Page, name: str) -> None:
    """Save what the page shows now as DIR/name.png when GATEWAY_SCREENSHOTS=DIR asks for it."""
    folder = os.environ.get("GATEWAY_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)
