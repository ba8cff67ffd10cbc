"""Files in the web chat, in a real browser (headless Chromium driven by Playwright,
tests/browser.py): the owner picks a picture and a text file with 📎, sees them as chips, sends them
with a question, and the model gets the picture as an image block and the file's text; a reload
shows what they sent, not what the model read; a file over the limit is refused on the page with its
reason, and nothing is sent.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.browser import needs_browser, screenshot
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM
from tests.helpers import write_config
from tests.mediafiles import image_size, picture

if TYPE_CHECKING:
    from playwright.async_api import Browser, FilePayload, Page

pytestmark = needs_browser()


@pytest.fixture
async def daemon(home: Path, fake_llm: FakeLLM) -> AsyncIterator[Daemon]:
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra="web:\n  port: 0\nmedia:\n  max_bytes: 300000\n",
    )
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


async def opened(browser: Browser, daemon: Daemon, home: Path) -> Page:
    page = await (await browser.new_context()).new_page()
    await page.goto(f"http://127.0.0.1:{daemon.web_port}/?token={load_web_secret(home)}")
    await page.wait_for_function("document.getElementById('status').textContent === 'connected'")
    return page


def file(name: str, mime: str, data: bytes) -> FilePayload:
    return {"name": name, "mimeType": mime, "buffer": data}


async def texts(page: Page, selector: str) -> list[str]:
    found: list[str] = await page.locator(selector).all_inner_texts()
    return found


async def test_the_owner_sends_a_picture_and_a_file_and_the_model_gets_them(
    browser: Browser, daemon: Daemon, home: Path, fake_llm: FakeLLM
) -> None:
    page = await opened(browser, daemon, home)
    await page.set_input_files(
        "#picker",
        [
            file("garden.png", "image/png", picture(2400, 1600, fmt="PNG")),
            file("plan.md", "text/markdown", b"# Plan\n- water the tomatoes\n"),
        ],
    )
    assert await texts(page, "#files span") == ["📎 garden.png", "📎 plan.md"]
    await page.fill("#input", "what should I do first?")
    await page.press("#input", "Enter")
    answer = page.locator(".msg.bot").last
    await answer.get_by_text("echo: what should I do first?").wait_for(timeout=15_000)
    assert await texts(page, ".msg.me") == ["what should I do first?\n📎 garden.png\n📎 plan.md"]
    assert await texts(page, "#files span") == [] and await page.input_value("#input") == ""
    await screenshot(page, "webchat-files")

    content = fake_llm.anthropic_requests()[-1]["messages"][-1]["content"]
    assert [b["type"] for b in content] == ["image", "text"]
    assert content[0]["source"]["media_type"] == "image/jpeg"
    assert image_size(base64.b64decode(content[0]["source"]["data"])) == (1313, 875)
    said = content[1]["text"]
    assert said.startswith(
        "what should I do first?\n[image: garden.png]\n[Document: plan.md (text/markdown, "
    )
    assert '<document name="plan.md">\n# Plan\n- water the tomatoes\n\n</document>' in said

    await page.reload()  # the history shows what the owner sent: their words and the files' names
    await page.wait_for_function("document.querySelectorAll('.msg.me').length === 1")
    assert await texts(page, ".msg.me") == ["what should I do first?\n📎 garden.png\n📎 plan.md"]


async def test_a_file_over_the_limit_is_refused_on_the_page(
    browser: Browser, daemon: Daemon, home: Path, fake_llm: FakeLLM
) -> None:
    page = await opened(browser, daemon, home)
    await page.set_input_files("#picker", [file("huge.log", "text/plain", b"x" * 400_000)])
    await page.press("#input", "Enter")
    error = page.locator(".msg.error").last
    await error.wait_for(timeout=15_000)
    assert await error.inner_text() == "huge.log: the file is larger than 300,000 bytes"
    assert await texts(page, ".msg.me") == [] and fake_llm.anthropic_requests() == []
    assert not [p for p in (home / "media" / "uploads").iterdir()]  # nothing of it kept


async def test_a_failed_message_is_retried_with_its_files_even_after_a_reload(
    browser: Browser, daemon: Daemon, home: Path, fake_llm: FakeLLM
) -> None:
    page = await opened(browser, daemon, home)
    fake_llm.script(Fault(400))
    await page.set_input_files(
        "#picker", [file("receipt.png", "image/png", picture(300, 200, fmt="PNG"))]
    )
    await page.fill("#input", "how much?")
    await page.press("#input", "Enter")
    await page.locator(".me.failed").wait_for(timeout=15_000)
    await page.reload()
    failed = page.locator(".me.failed")
    await failed.wait_for(timeout=15_000)
    assert (await failed.inner_text()).startswith("how much?\n📎 receipt.png")
    await failed.get_by_role("button", name="Retry").click()
    await page.locator(".msg.bot").get_by_text("echo: how much?").wait_for(timeout=15_000)
    content = fake_llm.anthropic_requests()[-1]["messages"][-1]["content"]
    assert [b["type"] for b in content] == ["image", "text"]
    assert image_size(base64.b64decode(content[0]["source"]["data"])) == (300, 200)
    assert await texts(page, ".msg.me") == ["how much?\n📎 receipt.png"]
