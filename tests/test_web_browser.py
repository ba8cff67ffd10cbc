"""The web chat's login and its cross-origin refusal in a
real browser (headless Chromium driven by Playwright).

A page on another port of the same host is same-site, so the browser sends it the owner's
SameSite=Strict cookie: only the Origin check stands between that page and the owner's chat. Skipped
only where Chromium or Playwright is missing outside CI; in CI their absence fails the run
(tests/browser.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.browser import needs_browser
from tests.fakes.llm import FakeLLM
from tests.helpers import write_config

if TYPE_CHECKING:
    from playwright.async_api import Browser

pytestmark = needs_browser()

EVIL_PAGE = """<!doctype html><title>waiting</title><script>
const ws = new WebSocket("ws://127.0.0.1:%(port)s/ws?client=victim");
ws.onopen = () => {
  ws.send(JSON.stringify({text: "planted by another page"}));
  document.title = "opened";
};
ws.onerror = () => { document.title = "refused"; };
</script>"""


@pytest.fixture
async def daemon(home: Path, fake_llm: FakeLLM) -> AsyncIterator[Daemon]:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra="web:\n  port: 0\n")
    config = load_config(home, env={})
    d = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


async def serve_page(html: str) -> tuple[web.AppRunner, int]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def test_the_owner_logs_in_and_chats_and_another_page_cannot(
    browser: Browser, daemon: Daemon, home: Path
) -> None:
    base = f"http://127.0.0.1:{daemon.web_port}"
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(f"{base}/?token={load_web_secret(home)}")
    assert page.url == f"{base}/"  # the token is gone from the address bar
    cookies: list[Any] = await context.cookies()
    assert [(c["httpOnly"], c["sameSite"]) for c in cookies] == [(True, "Strict")]
    await page.wait_for_function("document.getElementById('status').textContent === 'connected'")
    await page.fill("#input", "hello from the owner")
    await page.press("#input", "Enter")
    await page.get_by_text("echo: hello from the owner").wait_for(timeout=15_000)

    runner, port = await serve_page(EVIL_PAGE % {"port": daemon.web_port})
    try:
        # same browser, same cookie jar, same site (127.0.0.1), other origin
        evil = await context.new_page()
        await evil.goto(f"http://127.0.0.1:{port}/")
        await evil.wait_for_function("document.title !== 'waiting'", timeout=15_000)
        assert await evil.title() == "refused"
    finally:
        await runner.cleanup()

    stranger = await (await browser.new_context()).new_page()
    response = await stranger.goto(f"{base}/")
    assert response is not None and response.status == 401
    assert "gateway web-url" in await stranger.content()
    with sqlite3.connect(home / "state.db") as db:
        assert [r[0] for r in db.execute("SELECT text FROM inbound")] == ["hello from the owner"]
