"""A newcomer's first run, seen in a real browser (headless Chromium, tests/browser.py): `gateway
init --yes`, then `gateway run` as subprocesses against the fake model, then the web chat (an
answer, a command that leaves no "thinking…" behind, a failed message that survives a reload and is
retried, a new chat) and the dashboard (the model, the adapter, the chart, pairing requests approved
and denied, live updates), and the no-model banner.

With GATEWAY_SCREENSHOTS=docs/screenshots these tests save the pictures in docs/ (tests/browser.py).
"""

from __future__ import annotations

import asyncio
import os
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
from tests.daemon_proc import GATEWAY, DaemonProc, WebChatClient, free_port
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, inbound, write_config

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

pytestmark = needs_browser()
WAIT_MS = 20_000


async def cli(home: Path, *args: str, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        GATEWAY,
        "--home",
        str(home),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode()


async def expect_text(page: Page, selector: str, pattern: str) -> None:
    from playwright.async_api import expect

    await expect(page.locator(selector)).to_have_text(re.compile(pattern), timeout=WAIT_MS)


async def test_init_then_run_then_chat_in_the_browser(
    tmp_path: Path, fake_llm: FakeLLM, browser: Browser
) -> None:
    from playwright.async_api import expect

    home, port = tmp_path / "home", free_port()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "MY_MODEL_KEY": "test-key"}
    code, out = await cli(
        home,
        "init",
        "--yes",
        "--provider",
        "anthropic",
        "--model",
        "claude-test",
        "--base-url",
        fake_llm.base_url,
        "--api-key-env",
        "MY_MODEL_KEY",
        "--web-port",
        str(port),
        env=env,
    )
    assert code == 0, out
    assert (
        "ok   model     anthropic/claude-test answered" in out
        and f"wrote {home}/config.yaml" in out
    )

    daemon = DaemonProc(home, env=env, args=("run",))
    await daemon.start()
    try:
        await daemon.wait_ready()
        async with asyncio.timeout(30):
            # the banner is on its way through the pipe (its reader is a task)
            while b"  dashboard  " not in daemon.stdout:
                await asyncio.sleep(0.05)
        lines = daemon.stdout.decode().splitlines()
        assert lines[0].startswith("agent-gateway ")
        assert lines[1:5] == [
            f"  home       {home}",
            f"  config     {home}/config.yaml",
            "  model      anthropic/claude-test (configured)",
            "  platforms  web",
        ]
        assert (
            lines[5]
            == f"  web chat   http://127.0.0.1:{port}/ (`gateway web-url` prints its login link)"
        )
        assert lines[6] == f"  dashboard  http://127.0.0.1:{port}/dashboard"
        code, login = await cli(home, "web-url", env=env)
        assert code == 0 and login.startswith(f"http://127.0.0.1:{port}/?token=")

        context = await browser.new_context(viewport={"width": 1100, "height": 760})
        page = await context.new_page()
        await page.goto(login.strip())
        assert page.url == f"http://127.0.0.1:{port}/"
        await expect_text(page, "#status", "^connected$")
        await expect(page.locator("#banner")).to_be_hidden()
        await expect(page.locator(".empty")).to_have_text(
            re.compile("^Say hello: anthropic/claude-test answers here")
        )
        # an icon, not a font's emoji
        await expect(page.get_by_role("button", name="Attach files")).to_be_visible()

        await say(page, "hello there")
        await expect(page.get_by_text("echo: hello there [users=1]")).to_be_visible(timeout=WAIT_MS)
        await expect(page.locator(".empty")).to_have_count(0)
        await say(page, "/status")
        await expect(page.get_by_text(re.compile(r"^Session 1: started"))).to_be_visible(
            timeout=WAIT_MS
        )
        # no "thinking…" left behind
        await expect(page.locator(".typing")).to_have_count(0, timeout=WAIT_MS)

        fake_llm.script(Fault(400))
        await say(page, "this one fails")
        await expect(page.locator(".msg.error")).to_contain_text(
            "couldn't get an answer", timeout=WAIT_MS
        )
        await expect(page.locator(".me.failed")).to_have_count(1)
        await page.reload()
        failed = page.locator(".me.failed")
        # kept across the reload
        await expect(failed).to_contain_text("this one fails", timeout=WAIT_MS)
        await expect(page.locator(".msg.error")).to_have_count(1)
        await screenshot(page, "web-chat-failed")
        await failed.get_by_role("button", name="Retry").click()
        await expect(page.get_by_text("echo: this one fails [users=2]")).to_be_visible(
            timeout=WAIT_MS
        )
        await expect(page.locator(".me.failed")).to_have_count(0)
        await expect(page.locator(".typing")).to_have_count(0, timeout=WAIT_MS)
        await page.reload()  # the retried message is an ordinary exchange now
        await expect(page.get_by_text("echo: this one fails [users=2]")).to_be_visible(
            timeout=WAIT_MS
        )
        await expect(page.locator(".msg.error")).to_have_count(0)
        await screenshot(page, "web-chat")

        await page.get_by_role("button", name="New chat").click()
        await expect(page.get_by_text("Started a new conversation.", exact=False)).to_be_visible(
            timeout=WAIT_MS
        )
        await expect(page.locator(".me")).to_have_count(0)

        dash = await context.new_page()
        await dash.goto(f"http://127.0.0.1:{port}/dashboard")
        await expect_text(dash, "#live", "^live$")
        await expect_text(dash, "#model-name", "^anthropic/claude-test$")
        await expect_text(dash, "#model-source", "configured")
        await expect(dash.locator("#no-model")).to_be_hidden()
        cells = dash.locator("#adapters tbody tr").first.locator("td")
        await expect(cells.nth(0)).to_have_text("web", timeout=WAIT_MS)
        await expect(cells.nth(1)).to_have_text("running")
        await expect(cells.nth(3)).to_have_text("0")  # reconnects
        await expect(dash.locator("#messages-chart rect")).not_to_have_count(0, timeout=WAIT_MS)
        await expect_text(dash, "#messages-total", r"\(5 in 24h\)")
        await expect(dash.locator("#flushes tbody")).to_contain_text("command", timeout=WAIT_MS)
    finally:
        stopped = await daemon.stop()
        await daemon.kill()  # closes the notify socket
    assert stopped == 0, daemon.output()


async def say(page: Page, text: str) -> None:
    await page.fill("#input", text)
    await page.press("#input", "Enter")


@pytest.fixture
async def busy_daemon(
    home: Path, fake_llm: FakeLLM
) -> AsyncIterator[tuple[Daemon, RecordingAdapter]]:
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra="web:\n  port: 0\nmemory:\n  flush_min_messages: 2\n",
    )
    config = load_config(home, env={})
    telegram = RecordingAdapter("telegram")
    daemon = Daemon(
        build_gateway(
            config, env={}, adapters=[*platform_adapters(config), telegram], probe_ollama=False
        ),
        install_signals=False,
    )
    await daemon.start()
    try:
        yield daemon, telegram
    finally:
        await daemon.stop()


async def test_the_dashboard_shows_the_day_and_takes_pairing_decisions(
    busy_daemon: tuple[Daemon, RecordingAdapter], home: Path, fake_llm: FakeLLM, browser: Browser
) -> None:
    from playwright.async_api import expect

    daemon, telegram = busy_daemon
    port = daemon.web_port or 0
    fake_llm.cache = True
    async with WebChatClient(port, "owner-tab", home=home) as tab:
        for text in (
            "Plan my week, please.",
            "Move the dentist to Friday.",
            "And the gym to Monday.",
        ):
            await tab.say(text)
            await tab.next("message")
        fake_llm.script(
            ToolCall(
                "memory", {"action": "add", "target": "user", "content": "Dentist on Friday."}
            ),
            Reply("(saved)"),
        )
        await tab.say("/new")
        await tab.next("message")
    assert daemon.gw.lifecycle is not None
    await daemon.gw.lifecycle.flusher.wait_idle()
    for user, name in (("501", "Ada"), ("502", "Mallory")):
        await telegram.submit(
            inbound("hello?", platform="telegram", chat_id=user, user_id=user, user_name=name)
        )
    await telegram.wait_for(2)
    codes = {
        m.chat.chat_id: re.search(r"this bot: `?([A-Z0-9]{8})", m.plain).group(1)  # type: ignore[union-attr]
        for m in telegram.sent
    }

    page = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
    await page.goto(f"http://127.0.0.1:{port}/dashboard?token={load_web_secret(home)}")
    assert page.url == f"http://127.0.0.1:{port}/dashboard"
    await expect_text(page, "#live", "^live$")
    await expect_text(page, "#model-name", "^anthropic/claude-test$")
    await expect_text(page, "#sessions-count", "^0 active$")
    await expect_text(page, "#flush-counts", "saved 1")
    await expect(page.locator("#cache-chart circle")).not_to_have_count(0)
    await expect_text(page, "#cache-total", r"^\(\d+% of prompt tokens, all model calls, 24h\)$")
    await expect(page.locator("#sessions th")).to_have_text(
        [
            "platform",
            "chat",
            "user",
            "last activity",
            "messages",
            "prompt / output tokens",
            "cache hit (session)",
        ]
    )
    rows = page.locator("#pairing tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.nth(0)).to_contain_text("telegram:501 (Ada)")

    async with WebChatClient(port, "owner-tab", home=home) as tab:  # live: the page is not reloaded
        await tab.say("Back again.")
        await tab.next("message")
    await expect_text(page, "#sessions-count", "^1 active$")
    await screenshot(page, "dashboard")
    # a phone: every panel fits, nothing scrolls sideways
    await page.set_viewport_size({"width": 420, "height": 900})
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    await page.set_viewport_size({"width": 1280, "height": 900})

    await rows.nth(0).locator("input.code").fill(codes["501"].lower())
    await rows.nth(0).get_by_role("button", name="Approve").click()
    await expect_text(page, "#pairing-result", "^Approved telegram user 501 \\(Ada\\)")
    await expect(page.locator("#approved")).to_contain_text("telegram:501 (Ada), by web")
    await telegram.wait_for(3)
    assert telegram.sent[-1].text.startswith("You're approved")
    await page.locator("#pairing tbody tr").nth(0).get_by_role("button", name="Deny").click()
    await expect_text(page, "#pairing-result", "^Denied telegram:502")
    await expect(page.locator("#pairing tbody")).to_contain_text("nobody is waiting")


async def test_without_a_model_both_pages_say_how_to_fix_it(home: Path, browser: Browser) -> None:
    from playwright.async_api import expect

    (home / "config.yaml").write_text("web:\n  port: 0\n")
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    try:
        page = await (await browser.new_context()).new_page()
        await page.goto(f"http://127.0.0.1:{daemon.web_port}/?token={load_web_secret(home)}")
        banner = page.locator("#banner")
        await expect(banner).to_be_visible(timeout=WAIT_MS)
        await expect(banner).to_contain_text("No model is configured")
        await expect(banner.locator("code").first).to_have_text("gateway init")
        await expect(page.locator(".empty")).to_have_count(0)  # the banner says it all
        await say(page, "anyone there?")
        await expect(page.locator(".me.failed")).to_contain_text("Retry", timeout=WAIT_MS)
        # no stray backticks
        await expect(page.locator(".msg.error code").first).to_have_text("gateway init")
        await page.set_viewport_size({"width": 400, "height": 700})
        new_chat = await page.get_by_role("button", name="New chat").bounding_box()
        assert new_chat is not None and new_chat["height"] < 40  # one line, not "New / chat"
        await page.set_viewport_size({"width": 1280, "height": 720})
        await screenshot(page, "web-chat-no-model")
        await page.goto(f"http://127.0.0.1:{daemon.web_port}/dashboard")
        await expect(page.locator("#no-model")).to_be_visible(timeout=WAIT_MS)
        await expect_text(page, "#model-name", "^none$")
        await expect_text(page, "#ready", "^not ready$")
    finally:
        await daemon.stop()


async def test_a_streamed_answer_grows_on_the_page_and_stays_one_message(
    home: Path, browser: Browser
) -> None:
    from playwright.async_api import expect

    from tests.fakes.llm import Paced, StreamGate

    answer = "Here is a plan, written as it comes:\n\n1. **Tea** first\n2. Then the *inbox*"
    gate = StreamGate()
    async with FakeLLM(stream_chunk_chars=10) as llm:
        write_config(home, provider="anthropic", base_url=llm.base_url, extra="web:\n  port: 0\n")
        llm.script(Paced(Reply(answer), gate=gate))
        config = load_config(home, env={})
        daemon = Daemon(
            build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
            install_signals=False,
        )
        await daemon.start()
        try:
            page = await (await browser.new_context()).new_page()
            await page.goto(f"http://127.0.0.1:{daemon.web_port}/?token={load_web_secret(home)}")
            await expect_text(page, "#status", "^connected$")
            await say(page, "plan my morning")
            await expect(page.locator(".typing")).to_have_count(1, timeout=WAIT_MS)
            gate.release(2)
            draft = page.locator(".msg.bot.draft")
            # two pieces of 10
            await expect(draft).to_have_text("Here is a plan, writ", timeout=WAIT_MS)
            # the answer is showing: not "thinking…"
            await expect(page.locator(".typing")).to_have_count(0)
            gate.release(1)
            # it grew: a delta
            await expect(draft).to_have_text("Here is a plan, written as it", timeout=WAIT_MS)
            gate.release_all()
            await expect(page.locator(".msg.bot strong")).to_have_text("Tea", timeout=WAIT_MS)
            # the reply took the draft's place
            await expect(page.locator(".msg.bot")).to_have_count(1)
            await expect(page.locator(".msg.bot.draft")).to_have_count(0)
            await expect(page.locator(".msg.bot li")).to_have_text(["Tea first", "Then the inbox"])
        finally:
            await daemon.stop()


async def test_a_model_without_its_key_is_named_on_both_pages(home: Path, browser: Browser) -> None:
    from playwright.async_api import expect

    (home / "config.yaml").write_text(
        "model:\n  provider: anthropic\n  name: claude-sonnet-4-5\n  api_key_env: MY_KEY\n"
        "web:\n  port: 0\n"
    )
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    try:
        page = await (await browser.new_context()).new_page()
        await page.goto(f"http://127.0.0.1:{daemon.web_port}/?token={load_web_secret(home)}")
        await expect(page.locator("#banner")).to_have_text(
            re.compile(
                r"^The configured model can't answer yet: model "
                r"claude-sonnet-4-5: no API key \(set MY_KEY "
            ),
            timeout=WAIT_MS,
        )
        await page.goto(f"http://127.0.0.1:{daemon.web_port}/dashboard")
        banner = page.locator("#no-model")
        await expect(banner).to_be_visible(timeout=WAIT_MS)
        await expect(banner).to_have_text(
            re.compile(r"The configured model cannot answer: .*set MY_KEY")
        )
        # what is shown
        await expect(banner).not_to_contain_text("gateway init", use_inner_text=True)
        await expect_text(page, "#model-name", "^cannot answer$")
        await expect_text(page, "#model-source", r"^\(configured\)$")
    finally:
        await daemon.stop()


async def test_at_phone_width_nothing_scrolls_sideways(
    home: Path, fake_llm: FakeLLM, browser: Browser
) -> None:
    """On a 360 or 390 px phone the header (title, status, New chat, dashboard) fits, and an answer
    with a long unbroken word and a wide code block stays inside its bubble: the code block scrolls,
    the page does not."""
    from playwright.async_api import expect

    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra="web:\n  port: 0\n")
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    wide = (
        "A link: "
        + "x" * 120
        + "\n\n```python\nprint('"
        + "a long line of code " * 8
        + "')\n```\n\n"
        "| plan | when | notes |\n|:---|---:|---|\n| **tea** | 07:00 | "
        + "then the inbox, " * 6
        + "|\n| walk | 08:00 | |"
    )
    fake_llm.script(Reply(wide))
    try:
        page = await (
            await browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
        ).new_page()
        errors: list[str] = []
        page.on(
            "console",
            lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None,
        )
        await page.goto(f"http://127.0.0.1:{daemon.web_port}/?token={load_web_secret(home)}")
        await expect_text(page, "#status", "^connected$")
        await say(page, "show me something wide")
        await expect(page.locator(".msg.bot pre")).to_be_visible(timeout=WAIT_MS)
        # the web hint promises the model that tables display
        table = page.locator(".msg.bot table")
        await expect(table.locator("th")).to_have_text(["plan", "when", "notes"])
        await expect(table.locator("tbody tr")).to_have_count(2)
        await expect(table.locator("tbody strong")).to_have_text("tea")
        for cell in ("plan", "when"):
            # a short word stays whole (not "pl / an" in a squeezed column)
            box = await table.locator("th", has_text=cell).bounding_box()
            assert box is not None and box["height"] < 36, (cell, box)
        for width in (390, 360):
            await page.set_viewport_size({"width": width, "height": 800})
            scroll, client = await page.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert scroll <= client == width, f"{width} px: the page is {scroll} px wide"
            for name in ("New chat", "dashboard"):
                control = page.get_by_role("button" if name == "New chat" else "link", name=name)
                box = await control.bounding_box()
                assert (
                    box is not None and box["x"] + box["width"] <= width and box["height"] < 40
                ), (width, name)
            bubble = await page.locator(".msg.bot").last.bounding_box()
            assert bubble is not None and bubble["x"] + bubble["width"] <= width, (width, bubble)
            code_fits = await page.locator(".msg.bot pre").evaluate(
                "e => e.scrollWidth > e.clientWidth"
            )
            assert code_fits, "the code block scrolls inside the bubble"
            await expect(page.locator("#input")).to_have_attribute(
                "placeholder", "Message the agent"
            )
        # the keys hint is back where it fits
        await page.set_viewport_size({"width": 1100, "height": 800})
        await expect(page.locator("#input")).to_have_attribute(
            "placeholder", re.compile(r"Enter to send")
        )
        await page.set_viewport_size({"width": 390, "height": 844})
        await screenshot(page, "web-chat-phone")
        await page.goto(f"http://127.0.0.1:{daemon.web_port}/dashboard")
        await expect_text(page, "#live", "^live$")
        scroll, client = await page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert scroll <= client == 390, f"the dashboard is {scroll} px wide"
        for chart in ("#messages-chart", "#cache-chart"):
            # its labels keep their shape (not squeezed to fit)
            squeeze = await page.locator(f"{chart} text").last.evaluate(
                "t => t.getBoundingClientRect().width / t.getBBox().width"
            )
            assert 0.95 < squeeze < 1.05, f"{chart}: labels drawn at {squeeze:.2f} of their width"
        await screenshot(page, "dashboard-phone")
        # nothing failed to load (a /favicon.ico request answered 404 on both pages)
        assert errors == []
    finally:
        await daemon.stop()
