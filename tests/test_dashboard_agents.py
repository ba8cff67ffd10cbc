"""The dashboard with several agents, in a real browser: the sessions come grouped by agent, each
group under a row naming it, with a chip per agent; a single-agent gateway's table looks as it
always did (tests/test_browser_first_run.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.browser import needs_browser, screenshot
from tests.daemon_proc import WebChatClient
from tests.fakes.llm import FakeLLM
from tests.helpers import RecordingAdapter, inbound, write_config

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

pytestmark = needs_browser()
WAIT_MS = 15_000
CONFIG = """\
web:
  port: 0
telegram:
  token: '1000:AAdashboard-agents-token-000000000000'
  allowed_users: ['501', '502']
agents:
  family: {identity: You are Hearth.}
bindings:
  - {agent: family, platform: telegram}
"""


@pytest.fixture
async def daemon(home: Path, fake_llm: FakeLLM) -> AsyncIterator[tuple[Daemon, RecordingAdapter]]:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra=CONFIG)
    config = load_config(home, env={})
    telegram = RecordingAdapter("telegram")
    web = [a for a in platform_adapters(config) if a.platform == "web"]
    run = Daemon(
        build_gateway(config, env={}, adapters=[*web, telegram], probe_ollama=False),
        install_signals=False,
    )
    await run.start()
    try:
        yield run, telegram
    finally:
        await run.stop()


async def expect_text(page: Page, selector: str, pattern: str) -> None:
    from playwright.async_api import expect

    await expect(page.locator(selector)).to_have_text(re.compile(pattern), timeout=WAIT_MS)


async def test_the_dashboard_groups_sessions_by_agent(
    daemon: tuple[Daemon, RecordingAdapter], home: Path, browser: Browser
) -> None:
    from playwright.async_api import expect

    run, telegram = daemon
    port = run.web_port or 0
    async with WebChatClient(port, "owner-tab", home=home) as tab:
        await tab.say("hello from the browser")
        await tab.next("message")
    for user in ("501", "502"):
        await telegram.submit(inbound("hi", platform="telegram", chat_id=user, user_id=user))
    await telegram.wait_for(2)
    await run.gw.sessions.wait_idle()

    page = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
    await page.goto(f"http://127.0.0.1:{port}/dashboard?token={load_web_secret(home)}")
    await expect_text(page, "#sessions-count", "^3 active$")
    chips = page.locator("#sessions-per-platform .badge.agent")
    await expect(chips).to_have_text(["agent main: 1", "agent family: 2"], timeout=WAIT_MS)
    rows = page.locator("#sessions tbody tr")
    await expect(rows).to_have_count(5, timeout=WAIT_MS)  # two agents' header rows, three sessions
    await expect(rows.nth(0)).to_have_text("agent main · 1 active")
    await expect(rows.nth(1).locator("td").first).to_have_text("web")
    await expect(rows.nth(2)).to_have_text("agent family · 2 active")
    for n in (3, 4):
        await expect(rows.nth(n).locator("td").first).to_have_text("telegram")
    await screenshot(page, "dashboard-agents")
