"""Headless Chromium for the browser tests: Debian's `chromium` package driven by Playwright for Python, which
never downloads a browser of its own here (`executable_path` points at the system one).

Outside CI a machine without Chromium or Playwright skips these tests. In CI (`GATEWAY_CI=1`, exported by
`.ci/run`, which also installs the browser) their absence fails the run instead: the chat and the dashboard must
have been seen working in a real browser. `GATEWAY_SCREENSHOTS=DIR` makes the tests save what they saw there
(`docs/screenshots/` is made that way).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The flags this closed network needs (no background connections, no updates, no sync, no QUIC); Playwright gives
# every launch a fresh profile directory of its own.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
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
    """The module mark: skip without a browser, except in CI, where that is an error at collection."""
    why = missing()
    if why is not None and IN_CI:
        raise RuntimeError(f"the browser tests must run in CI: {why} (.ci/run installs what they need)")
    return pytest.mark.skipif(why is not None, reason=why or "")


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    from playwright.async_api import async_playwright
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


async def screenshot(page: Page, name: str) -> None:
    """Save what the page shows now as DIR/name.png when GATEWAY_SCREENSHOTS=DIR asks for it."""
    folder = os.environ.get("GATEWAY_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)
