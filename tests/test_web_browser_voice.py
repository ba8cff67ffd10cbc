"""Voice replies in the web chat, in a real browser (headless Chromium, tests/browser.py): the owner
turns them on with /voice on, asks, and sees the answer, then an audio player under it that Chromium
can play (it reads the OGG/Opus note's duration); the speech comes from the local espeak-ng, no
service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.browser import needs_browser, screenshot
from tests.fakes.llm import FakeLLM, Reply
from tests.helpers import write_config

if TYPE_CHECKING:
    from playwright.async_api import Browser

pytestmark = needs_browser()


@pytest.fixture
async def daemon(home: Path, fake_llm: FakeLLM) -> AsyncIterator[Daemon]:
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra="web:\n  port: 0\nvoice:\n  tts:\n    provider: espeak\n",
    )
    config = load_config(home, env={})
    gw = build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False)
    d = Daemon(gw, install_signals=False)
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


async def test_the_owner_hears_the_answer_in_a_player_under_it(
    browser: Browser, daemon: Daemon, home: Path, fake_llm: FakeLLM
) -> None:
    page = await (await browser.new_context()).new_page()
    await page.goto(f"http://127.0.0.1:{daemon.web_port}/?token={load_web_secret(home)}")
    await page.wait_for_function("document.getElementById('status').textContent === 'connected'")
    await page.fill("#input", "/voice on")
    await page.press("#input", "Enter")
    notice = page.locator(".msg.notice").get_by_text("Voice replies are on in this chat")
    await notice.wait_for(timeout=15_000)
    fake_llm.script(
        Reply("The **tomatoes** want water every morning; see https://example.com/tomatoes.")
    )
    await page.fill("#input", "when do I water?")
    await page.press("#input", "Enter")
    await page.locator(".msg.voice audio").wait_for(timeout=30_000)
    duration = await page.wait_for_function(
        "(() => { const a = document.querySelector('.msg.voice audio');"
        " return a.duration > 0 && a.duration })()",
        timeout=15_000,
    )
    assert 1.0 < await duration.json_value() < 30.0  # Chromium decoded the Ogg/Opus note's length
    classes = await page.eval_on_selector_all("#log .msg", "els => els.map(e => e.className)")
    assert classes[-2:] == ["msg bot", "msg bot voice"]  # the answer, then its voice note
    assert await page.locator(".msg.voice span").inner_text() == "voice reply"
    title = await page.get_attribute(".msg.voice audio", "title")
    assert title == "The tomatoes want water every morning; see."
    await screenshot(page, "web-chat-voice")
