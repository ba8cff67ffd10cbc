"""Approvals and questions in the web chat: the daemon with its web listener, a real MCP server
whose `delete_file` is annotated destructive and records each run, the fake LLM; tabs over the real
websocket (a click is a `choice` frame, a refusal a `notice`, the answer an `update`), and the
buttons in a real browser (headless Chromium), with a screenshot
(GATEWAY_SCREENSHOTS=docs/screenshots keeps it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.approvals_support import DELETE, mcp_yaml, result_of, runs
from tests.browser import needs_browser, screenshot
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import write_config
from tests.lifecycle_support import FakeClock

if TYPE_CHECKING:
    from playwright.async_api import Browser

Frame = dict[str, Any]


@asynccontextmanager
async def daemon(
    home: Path, llm: FakeLLM, folder: Path, clock: FakeClock | None = None
) -> AsyncIterator[Daemon]:
    write_config(home, base_url=llm.base_url, extra="web:\n  port: 0\n" + mcp_yaml(folder))
    config = load_config(home, env={})
    running = Daemon(
        build_gateway(
            config,
            env={},
            adapters=platform_adapters(config),
            probe_ollama=False,
            clock=clock or FakeClock(),
        ),
        install_signals=False,
    )
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


class Tab:
    """One browser tab's socket (client id = the chat): every frame it got, in order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.frames: list[Frame] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            self.frames.append(json.loads(msg.data))
            self._changed.set()

    async def wait(self, predicate: Callable[[Frame], bool], timeout: float = 30.0) -> Frame:
        async def loop() -> Frame:
            while True:
                found = [f for f in self.frames if predicate(f)]
                if found:
                    return found[-1]
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(loop(), timeout)

    async def say(self, text: str) -> None:
        await self.ws.send_str(json.dumps({"text": text}))

    async def click(self, choices: Frame, value: str) -> None:
        await self.ws.send_str(
            json.dumps({"type": "choice", "token": choices["token"], "value": value})
        )

    def replies(self) -> list[str]:
        return [f["text"] for f in self.frames if f["type"] == "message" and f["kind"] == "reply"]


@asynccontextmanager
async def tab(home: Path, port: int, client: str = "tab1") -> AsyncIterator[Tab]:
    headers = {"Authorization": f"Bearer {load_web_secret(home)}"}
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"http://127.0.0.1:{port}/ws?client={client}", headers=headers) as ws,
    ):
        opened = Tab(ws)
        try:
            yield opened
        finally:
            opened._reader.cancel()


def request(frame: Frame) -> bool:
    return frame["type"] == "message" and "choices" in frame


def update_of(message_id: str) -> Callable[[Frame], bool]:
    return lambda f: f["type"] == "update" and f["id"] == message_id


async def test_another_tab_is_refused_and_allow_once_runs_once(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/report.txt"}), Reply("Deleted the report."))
    async with (
        daemon(home, fake_llm, tmp_path) as running,
        tab(home, running.web_port or 0) as owner,
    ):
        await owner.say("delete the report")
        asked = await owner.wait(request)
        labels = [o["label"] for o in asked["choices"]["options"]]
        assert labels == ["Allow once", "Allow for this session", "Deny"]
        assert "mcp_fake_delete_file" in asked["text"] and "/approve" not in asked["text"]
        async with tab(home, running.web_port or 0, "another-browser") as other:
            await other.click(asked["choices"], "once")  # it never got the buttons: a forged click
            refusal = await other.wait(lambda f: f["type"] == "notice")
        # another chat: unknown
        assert refusal["text"] == "This request is no longer waiting for an answer."
        assert runs(tmp_path) == []
        await owner.click(asked["choices"], "once")
        done = await owner.wait(update_of(asked["id"]))
        assert done["text"].endswith("✅ Allowed once by you.")
        await owner.wait(lambda f: f["type"] == "message" and f["kind"] == "reply")
        await owner.click(asked["choices"], "once")
        again = await owner.wait(lambda f: f["type"] == "notice")
        await running.gw.sessions.wait_idle()
    assert again["text"].startswith("Already answered. ✅ Allowed once by you")
    assert owner.replies() == ["Deleted the report."]
    assert runs(tmp_path) == ["delete_file /srv/report.txt"]


async def test_deny_runs_nothing_and_the_model_says_so(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/a"}), Reply("All right, /srv/a stays."))
    async with (
        daemon(home, fake_llm, tmp_path) as running,
        tab(home, running.web_port or 0) as owner,
    ):
        await owner.say("delete /srv/a")
        asked = await owner.wait(request)
        await owner.click(asked["choices"], "deny")
        done = await owner.wait(update_of(asked["id"]))
        await owner.wait(lambda f: f["type"] == "message" and f["kind"] == "reply")
    assert done["text"].endswith("🚫 Denied by you. Nothing was run.")
    assert owner.replies() == ["All right, /srv/a stays."] and runs(tmp_path) == []
    assert "denied" in str(result_of(fake_llm)["content"])


async def test_a_restart_while_pending_then_allow_from_the_reloaded_tab(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """After the restart a reloaded tab gets the request, with its buttons, in its history; a click
    on them completes the turn once."""
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/b"}), Reply("Deleted /srv/b."))
    clock = FakeClock()
    async with (
        daemon(home, fake_llm, tmp_path, clock) as running,
        tab(home, running.web_port or 0) as owner,
    ):
        await owner.say("delete /srv/b")
        asked = await owner.wait(request)
    clock.advance(minutes=3)
    async with (
        daemon(home, fake_llm, tmp_path, clock) as running,
        tab(home, running.web_port or 0) as owner,
    ):
        history = await owner.wait(lambda f: f["type"] == "history")
        (shown,) = [line for line in history["messages"] if line.get("choices")]
        assert (shown["id"], shown["choices"]["token"]) == (asked["id"], asked["choices"]["token"])
        await owner.click(shown["choices"], "once")
        await owner.wait(update_of(asked["id"]))
        await owner.wait(lambda f: f["type"] == "message" and f["kind"] == "reply")
    assert owner.replies() == ["Deleted /srv/b."]
    assert runs(tmp_path) == ["delete_file /srv/b"] and len(fake_llm.anthropic_requests()) == 2


async def test_an_expired_request_runs_nothing(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(
        ToolCall(DELETE, {"path": "/srv/c"}), Reply("Nobody allowed it, so /srv/c stays.")
    )
    clock = FakeClock()
    async with (
        daemon(home, fake_llm, tmp_path, clock) as running,
        tab(home, running.web_port or 0) as owner,
    ):
        assert running.gw.waits is not None
        await owner.say("delete /srv/c")
        asked = await owner.wait(request)
        clock.advance(minutes=10)
        assert running.gw.waits.expire_due() == 1
        done = await owner.wait(update_of(asked["id"]))
        await owner.wait(lambda f: f["type"] == "message" and f["kind"] == "reply")
    assert done["text"].endswith("⌛ Expired: nobody answered within 10 minutes. Nothing was run.")
    assert owner.replies() == ["Nobody allowed it, so /srv/c stays."] and runs(tmp_path) == []


async def test_ask_with_two_options_returns_the_clicked_one(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(
        ToolCall("ask", {"question": "Tea or coffee?", "options": ["Tea", "Coffee"]}),
        Reply("Coffee it is."),
    )
    async with (
        daemon(home, fake_llm, tmp_path) as running,
        tab(home, running.web_port or 0) as owner,
    ):
        await owner.say("make me a drink")
        asked = await owner.wait(request)
        labels = [o["label"] for o in asked["choices"]["options"]]
        assert labels == ["Tea", "Coffee", "Something else"]
        await owner.click(asked["choices"], "2")
        done = await owner.wait(update_of(asked["id"]))
        await owner.wait(lambda f: f["type"] == "message" and f["kind"] == "reply")
    assert done["text"].endswith("💬 you answered: Coffee") and owner.replies() == ["Coffee it is."]
    assert result_of(fake_llm)["content"] == "The user answered: Coffee"


@needs_browser()
async def test_the_buttons_in_a_real_browser(
    browser: Browser, home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/report.txt"}), Reply("Deleted the report."))
    async with daemon(home, fake_llm, tmp_path) as running:
        page = await (await browser.new_context(viewport={"width": 900, "height": 640})).new_page()
        await page.goto(f"http://127.0.0.1:{running.web_port}/?token={load_web_secret(home)}")
        await page.wait_for_function(
            "document.getElementById('status').textContent === 'connected'"
        )
        await page.fill("#input", "please delete the report")
        await page.press("#input", "Enter")
        allow = page.get_by_role("button", name="Allow once")
        await allow.wait_for(timeout=30_000)
        shown = await page.locator(".choices button").all_inner_texts()
        assert shown == ["Allow once", "Allow for this session", "Deny"]
        # nothing to wait for: the question is on screen
        assert await page.locator(".typing").count() == 0
        request = page.locator(".msg.request")
        assert "mcp_fake_delete_file" in await request.inner_text()
        await screenshot(page, "web-chat-approval")
        await allow.click()
        await page.get_by_text("Deleted the report.").wait_for(timeout=30_000)
        await page.get_by_text("Allowed once by you.").wait_for(timeout=30_000)
        # the buttons are gone, the outcome is shown
        assert await page.locator(".choices button").count() == 0
        await screenshot(page, "web-chat-approval-allowed")
    assert runs(tmp_path) == ["delete_file /srv/report.txt"]
