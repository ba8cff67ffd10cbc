"""A scheduled job in the local web chat: the answer reaches the open tab at its time, and a
reloaded tab shows it as the agent's message (the gateway's note recorded before it is not shown as
something the person said)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import write_config
from tests.jobs_support import fire_jobs
from tests.lifecycle_support import FakeClock


async def next_of(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    while True:
        data: dict[str, Any] = json.loads((await ws.receive(timeout=10)).data)
        if data["type"] == kind and (kind != "message" or data["kind"] in ("reply", "error")):
            return data


async def test_a_web_chat_reminder_reaches_the_open_tab_and_its_history(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra="web:\n  port: 0\nschedule:\n  timezone: UTC\n",
    )
    config = load_config(home, env={})
    clock = FakeClock()
    daemon = Daemon(
        build_gateway(
            config, env={}, adapters=platform_adapters(config), probe_ollama=False, clock=clock
        ),
        install_signals=False,
    )
    await daemon.start()
    fake_llm.script(
        ToolCall(
            "schedule",
            {"action": "create", "when": "5m", "prompt": "Say the tea is ready.", "name": "tea"},
        ),
        Reply("In five minutes."),
        Reply("Your tea is ready."),
    )
    headers = {"Authorization": f"Bearer {load_web_secret(home)}"}
    url = f"http://127.0.0.1:{daemon.web_port}/ws?client=tab1"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url, headers=headers) as ws:
                await next_of(ws, "history")
                await ws.send_str(json.dumps({"text": "tea in 5 minutes please"}))
                assert (await next_of(ws, "message"))["text"] == "In five minutes."
                clock.advance(minutes=5)
                await fire_jobs(daemon.gw)
                posted = await next_of(ws, "message")
                assert (posted["kind"], posted["text"]) == (
                    "reply",
                    "⏰ **tea** (job #1)\n\nYour tea is ready.",
                )
            async with http.ws_connect(url, headers=headers) as ws:
                history = await next_of(ws, "history")
        assert history["messages"] == [
            {"role": "user", "text": "tea in 5 minutes please"},
            {"role": "assistant", "text": "In five minutes."},
            {"role": "assistant", "text": "⏰ **tea** (job #1)\n\nYour tea is ready."},
        ]
    finally:
        await daemon.stop()
