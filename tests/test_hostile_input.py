"""Hostile input against a real `gateway run` on loopback: while web_fetch reads a 2 MB page that
takes trafilatura minutes, /healthz answers and another user's message (on Telegram) is answered,
the worker still busy on the page when they do; then the page comes back as its visible text.
Four pixel-bomb PNGs sent at once from four chats each get their answer, and the daemon lives on.
(bench/hostile_input.py measures the same runs: healthz latency, the daemon's RSS.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from tests import webpages
from tests.daemon_proc import WebChatClient
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.hostile_daemon import (
    alive,
    asks_for_pages,
    cpu_seconds,
    hostile_daemon,
    page_server,
    pixel_bomb,
    tool_results,
    until,
    upload,
    worker_pid,
)

pytestmark = pytest.mark.chaos
ALICE = 1001


async def test_a_page_that_keeps_the_worker_busy_stalls_nobody(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """The owner asks for the page in the web chat; Alice writes on Telegram meanwhile. The page
    may take 4 s of processor time here (15 by default): the worker is still on it meanwhile."""
    fake_llm.script(*[asks_for_pages] * 10)
    telegram = (
        f"telegram:\n  token: '{TOKEN}'\n  api_server: {fake_telegram.base_url}\n"
        f"  polling_timeout: 1\n  allowed_users: ['{ALICE}']\n"
    )
    async with (
        page_server({"/slow": webpages.SLOW_FOR_TRAFILATURA}) as (base, served),
        hostile_daemon(tmp_path / "home", fake_llm, extra=telegram, read_cpu_s=4) as (daemon, port),
    ):
        assert daemon.proc is not None
        pid = daemon.proc.pid
        async with (
            WebChatClient(port, "reader", home=daemon.home) as reader,
            aiohttp.ClientSession() as http,
        ):
            await reader.say(f"read {base}/slow")
            await until(lambda: served == ["/slow"] and worker_pid(pid) is not None)
            worker = worker_pid(pid)
            assert worker is not None
            busy_from = cpu_seconds(worker)
            await until(lambda: cpu_seconds(worker) > busy_from + 0.5)  # parsing the page
            for _ in range(5):
                async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    assert resp.status == 200
            fake_telegram.inject_message(ALICE, "hello, anyone there?")
            reply = await fake_telegram.wait_for_sent(ALICE, timeout=120)
            assert reply.text == "echo: hello, anyone there? [users=1]"
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert resp.status == 200
            # all of that while the page was still being read: the same worker, no result yet
            assert worker_pid(pid) == worker and tool_results(fake_llm) == []
            answer = await reader.next("message", timeout=300)
        assert answer["text"].startswith("echo: read ")
        (result,) = tool_results(fake_llm)
        assert "The page's main text could not be picked out (reading it took" in result
        assert "a b c d e\na b c d e" in result
        assert await daemon.stop() == 0, daemon.output()[-3000:]
        await until(lambda: not alive(worker))  # it stops with the daemon


async def test_four_pixel_bombs_at_once_each_get_an_answer(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """7999×7999 RGBA PNGs (248 KB each, 244 MB of pixels), one from each of four chats at once:
    each is decoded in the worker, one at a time, and each chat gets its answer with its picture."""
    bomb = pixel_bomb()
    async with hostile_daemon(tmp_path / "home", fake_llm) as (daemon, port):
        tabs = [WebChatClient(port, f"tab{n}", home=daemon.home) for n in range(4)]
        for tab in tabs:
            await tab.__aenter__()
        try:
            files = [await upload(port, tabs[0].headers, bomb, f"bomb{n}.png") for n in range(4)]
            for tab, file in zip(tabs, files, strict=True):
                assert tab.ws is not None
                await tab.ws.send_str(json.dumps({"text": "what is this?", "files": [file]}))
            answers = await asyncio.gather(*(tab.next("message", timeout=300) for tab in tabs))
        finally:
            for tab in tabs:
                await tab.__aexit__(None, None, None)
        assert [a["text"] for a in answers] == [
            f"echo: what is this?\n[image: bomb{n}.png] [users=1]" for n in range(4)
        ]
        images = [
            b
            for body in fake_llm.anthropic_requests()
            for b in body["messages"][-1]["content"]
            if b.get("type") == "image"
        ]
        assert len(images) == 4
        assert await daemon.stop() == 0, daemon.output()[-3000:]
