"""The local web chat: the page is served and a browser's
socket gets answers (and a visible error line).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM, Reply
from tests.helpers import closed_port, write_config


async def _daemon(home: Path) -> Daemon:
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    return daemon


def _auth(home: Path) -> dict[str, str]:
    return {"Authorization": f"Bearer {load_web_secret(home)}"}


async def _exchange(
    port: int, text: str, client: str = "tab1", *, home: Path
) -> list[dict[str, str]]:
    got: list[dict[str, str]] = []
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            f"http://127.0.0.1:{port}/ws?client={client}", headers=_auth(home)
        ) as ws:
            await ws.send_str(json.dumps({"text": text}))
            async for msg in ws:
                data = json.loads(msg.data)
                if data["type"] in ("hello", "history"):
                    continue
                got.append(data)
                if data["type"] == "message" and data["kind"] in ("reply", "error"):
                    break
    return got


async def test_page_and_socket_round_trip(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra="web:\n  port: 0\n")
    daemon = await _daemon(home)
    try:
        assert daemon.web_port
        # the link `gateway web-url` prints
        login = f"http://127.0.0.1:{daemon.web_port}/?token={load_web_secret(home)}"
        jar = aiohttp.CookieJar(unsafe=True)  # like a browser, keep cookies from an IP address
        async with aiohttp.ClientSession(cookie_jar=jar) as http, http.get(login) as resp:
            page = await resp.text()
            assert resp.status == 200 and resp.content_type == "text/html"
        assert (
            "<title>agent-gateway" in page
            and "new WebSocket" in page
            and "function markdown" in page
        )
        first = await _exchange(daemon.web_port, "hello **there**", home=home)
        assert first[0]["type"] == "ack" and first[0]["outcome"] == "accepted"
        assert (
            first[-1]["kind"] == "reply" and first[-1]["text"] == "echo: hello **there** [users=1]"
        )
        # same client id → same session
        second = await _exchange(daemon.web_port, "again", home=home)
        assert second[-1]["text"] == "echo: again [users=2]"
    finally:
        await daemon.stop()


async def test_unreachable_model_shows_an_error_line(home: Path) -> None:
    with closed_port() as port:
        write_config(home, provider="openai", base_url=f"http://127.0.0.1:{port}/v1")
        daemon = await _daemon(home)
        try:
            got = await _exchange(daemon.web_port or 0, "hi", home=home)
            assert got[-1]["kind"] == "error"
            assert "couldn't get an answer from the model" in got[-1]["text"]
        finally:
            await daemon.stop()


async def test_a_reloaded_tab_gets_the_conversation_so_far(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra="web:\n  port: 0\n")
    daemon = await _daemon(home)
    try:
        port = daemon.web_port or 0
        await _exchange(port, "remember **this**", client="tabA", home=home)
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(
                f"http://127.0.0.1:{port}/ws?client=tabA", headers=_auth(home)
            ) as ws:
                greeting = json.loads((await ws.receive()).data)
                first = json.loads((await ws.receive()).data)
            async with http.ws_connect(
                f"http://127.0.0.1:{port}/ws?client=someone-else", headers=_auth(home)
            ) as ws:
                await ws.receive()
                other = json.loads((await ws.receive()).data)
        assert greeting == {"type": "hello", "model": "anthropic/claude-test", "notice": None}
        assert first == {
            "type": "history",
            "messages": [
                {"role": "user", "text": "remember **this**"},
                {"role": "assistant", "text": "echo: remember **this** [users=1]"},
            ],
        }
        assert other == {"type": "history", "messages": []}
    finally:
        await daemon.stop()


async def _frames(
    ws: aiohttp.ClientWebSocketResponse, until: str, kind: str | None = None
) -> list[dict[str, Any]]:
    """Frames up to and including the first of type `until` (and `kind`, for messages)."""
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(15):
        async for msg in ws:
            got.append(json.loads(msg.data))
            if got[-1]["type"] == until and (kind is None or got[-1].get("kind") == kind):
                return got
    raise AssertionError(f"socket closed before a {until!r} frame: {got}")


async def test_a_failed_message_survives_a_reload_until_it_is_retried(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra="web:\n  port: 0\n")
    fake_llm.script(Fault(400), Reply("Now it works."))
    daemon = await _daemon(home)
    url = f"http://127.0.0.1:{daemon.web_port}/ws?client=tabF"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url, headers=_auth(home)) as ws:
                await ws.send_str(json.dumps({"text": "first try", "id": "page-msg-0001"}))
                got = await _frames(ws, "message", "error")
                assert got[-3]["type"] == "history" and got[-2] == {
                    "type": "ack",
                    "id": "page-msg-0001",
                    "outcome": "accepted",
                    "reason": "",
                }
                assert got[-1]["reply_to"] == "page-msg-0001"
                error = got[-1]["text"]
            async with http.ws_connect(url, headers=_auth(home)) as ws:  # the tab is reloaded
                history = (await _frames(ws, "history"))[-1]
                assert history["messages"] == [
                    {"role": "user", "text": "first try", "id": "page-msg-0001", "error": error}
                ]
                await ws.send_str(
                    json.dumps(
                        {"text": "first try", "id": "page-msg-0002", "retry_of": "page-msg-0001"}
                    )
                )
                assert (await _frames(ws, "message", "reply"))[-1]["text"] == "Now it works."
            async with http.ws_connect(url, headers=_auth(home)) as ws:
                history = (await _frames(ws, "history"))[-1]
                assert history["messages"] == [
                    {"role": "user", "text": "first try"},
                    {"role": "assistant", "text": "Now it works."},
                ]
        rows = daemon.gw.store.all("SELECT platform_message_id, status FROM inbound ORDER BY id")
        assert [tuple(r) for r in rows] == [
            ("page-msg-0001", "retried"),
            ("page-msg-0002", "answered"),
        ]
    finally:
        await daemon.stop()


async def test_a_resent_message_is_stored_once_and_a_command_says_so_in_its_ack(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra="web:\n  port: 0\n")
    daemon = await _daemon(home)
    url = f"http://127.0.0.1:{daemon.web_port}/ws?client=tabR"
    try:
        async with aiohttp.ClientSession() as http, http.ws_connect(url, headers=_auth(home)) as ws:
            await ws.send_str(json.dumps({"text": "once", "id": "page-msg-0001"}))
            await _frames(ws, "message", "reply")
            # e.g. after a dropped link
            await ws.send_str(json.dumps({"text": "once", "id": "page-msg-0001"}))
            assert (await _frames(ws, "ack"))[-1]["outcome"] == "duplicate"
            await ws.send_str(json.dumps({"text": "/status", "id": "page-msg-0002"}))
            got = await _frames(ws, "message", "notice")
            ack = next(f for f in got if f["type"] == "ack")
            # the page stops "thinking…" on it
            assert (ack["outcome"], ack["reason"]) == ("accepted", "command")
            assert got[-1]["reply_to"] == "page-msg-0002" and got[-1]["text"].startswith("Session ")
        assert len(fake_llm.calls) == 1
    finally:
        await daemon.stop()


async def test_without_a_model_the_tab_hears_how_to_configure_one(home: Path) -> None:
    (home / "config.yaml").write_text("web:\n  port: 0\n")
    daemon = await _daemon(home)
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(
                f"http://127.0.0.1:{daemon.web_port}/ws?client=t", headers=_auth(home)
            ) as ws,
        ):
            hello = json.loads((await ws.receive()).data)
        assert hello["type"] == "hello" and hello["model"] is None
        assert "run `gateway init`" in hello["notice"]
    finally:
        await daemon.stop()
