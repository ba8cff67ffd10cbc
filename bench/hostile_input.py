"""Hostile input against a real `gateway run` on loopback (the web chat, the fake model), measured.

1. web_fetch reads a hostile page (default: 2 MB of `<div><p>a b c d e</p></div>`, which takes
   trafilatura minutes; `--page scripts`: 2 MB of `<script ` with no end, the regex that froze the
   daemon for hours). /healthz is probed every 250 ms for as long as the page is being read, and
   another chat sends a message 2 s in. Printed: every probe's latency (goal: each under 1 s), the
   other chat's reply time, and how long the page took.
2. Four pixel-bomb PNGs (7999×7999 RGBA, 248 KB each, 244 MB of pixels), one from each of four
   chats at once. The daemon's and the worker's RSS are sampled every 100 ms; printed: the daemon's
   RSS before, its peak (VmHWM) and after (goal: under 700 MB), the worker's peak, each answer.

Run:  PYTHONPATH=. python bench/hostile_input.py [--page slow|scripts] [--page-kb 2000]
      PYTHONPATH=. python bench/hostile_input.py --tree /path/to/other/checkout --page-kb 80
      (--tree runs the daemon from another checkout of the gateway, e.g. an older commit, for a
      before/after; keep the page small there, the old extraction takes hours on 2 MB)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from tests import webpages
from tests.daemon_proc import WebChatClient
from tests.fakes.llm import FakeLLM
from tests.hostile_daemon import (
    asks_for_pages,
    hostile_daemon,
    memory_mb,
    page_server,
    pixel_bomb,
    tool_results,
    upload,
    worker_pid,
)

PAGES = {"slow": "<div><p>a b c d e</p></div>", "scripts": "<script "}


async def probe(http: aiohttp.ClientSession, port: int) -> float:
    started = time.monotonic()
    async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
        await resp.read()
    return time.monotonic() - started


async def hostile_page(
    llm: FakeLLM, home: Path, unit: str, size: int, env: dict[str, str] | None
) -> None:
    body = webpages.repeated(unit, size)
    async with (
        page_server({"/page": body}) as (base, _),
        hostile_daemon(home, llm, env) as (daemon, port),
        aiohttp.ClientSession() as http,
    ):
        async with (
            WebChatClient(port, "reader", home=home) as reader,
            WebChatClient(port, "other", home=home) as other,
        ):
            started = time.monotonic()
            await reader.say(f"read {base}/page")
            answer = asyncio.create_task(reader.next("message", timeout=3600))
            latencies: list[float] = []
            other_reply = None
            while not answer.done():
                latencies.append(await probe(http, port))
                if other_reply is None and time.monotonic() - started > 2:
                    other_reply = asyncio.create_task(_timed_reply(other))
                await asyncio.sleep(0.25)
            page_s = time.monotonic() - started
            other_s = await other_reply if other_reply is not None else float("nan")
        outcome = (tool_results(llm) or ["(no tool result)"])[0]
        print(f"  page {size:,} bytes of {unit!r}: answered after {page_s:.1f} s")
        worst, median = max(latencies) * 1000, statistics.median(latencies) * 1000
        print(
            f"  /healthz while it was read: {len(latencies)} probes, max {worst:.0f} ms, median "
            f"{median:.0f} ms, over 1 s: {sum(1 for x in latencies if x > 1)}"
        )
        print(f"  the other chat's answer: {other_s:.2f} s after it was sent")
        print(f"  what the model got: {_gist(outcome)}")
        await daemon.stop()


async def _timed_reply(tab: WebChatClient) -> float:
    sent = time.monotonic()
    await tab.say("hello, anyone there?")
    await tab.next("message", timeout=3600)
    return time.monotonic() - sent


def _gist(result: str) -> str:
    for line in result.splitlines():
        if line.startswith(("[The page", "This page", "(no readable")):
            return line[:160]
    return result.splitlines()[3][:160] if len(result.splitlines()) > 3 else result[:160]


async def pixel_bombs(llm: FakeLLM, home: Path, env: dict[str, str] | None) -> None:
    bomb = pixel_bomb()
    async with hostile_daemon(home, llm, env) as (daemon, port):
        assert daemon.proc is not None
        pid = daemon.proc.pid
        tabs = [WebChatClient(port, f"tab{n}", home=home) for n in range(4)]
        for tab in tabs:
            await tab.__aenter__()
        files = [await upload(port, tabs[0].headers, bomb, f"bomb{n}.png") for n in range(4)]
        before = memory_mb(pid)
        samples: list[tuple[float, float]] = []
        sampling = asyncio.create_task(_sample(pid, samples))
        started = time.monotonic()
        for tab, file in zip(tabs, files, strict=True):
            assert tab.ws is not None
            await tab.ws.send_str(json.dumps({"text": "what is this?", "files": [file]}))
        answers = await asyncio.gather(*(_answer(tab, started) for tab in tabs))
        await asyncio.sleep(5)
        sampling.cancel()
        after = memory_mb(pid)
        for tab in tabs:
            await tab.__aexit__(None, None, None)
        print(
            f"  daemon RSS: {before:.0f} MB before, peak {memory_mb(pid, 'VmHWM'):.0f} MB "
            f"(sampled {max(d for d, _ in samples):.0f}), {after:.0f} MB 5 s after"
        )
        print(
            f"  worker RSS: peak sampled {max(w for _, w in samples):.0f} MB, "
            f"{memory_mb(worker_pid(pid)):.0f} MB 5 s after (it exits when idle for 5 min)"
        )
        for n, (text, took) in enumerate(answers):
            print(f"  bomb{n}.png: answered after {took:.1f} s: {text!r}")
        await daemon.stop()


async def _sample(pid: int, into: list[tuple[float, float]]) -> None:
    while True:
        into.append((memory_mb(pid), memory_mb(worker_pid(pid))))
        await asyncio.sleep(0.1)


async def _answer(tab: WebChatClient, started: float) -> tuple[str, float]:
    found = await tab.next("message", timeout=3600)
    return str(found["text"]), time.monotonic() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", choices=sorted(PAGES), default="slow")
    parser.add_argument("--page-kb", type=int, default=2000)
    parser.add_argument("--tree", type=Path, help="run the daemon from this checkout instead")
    parser.add_argument("--skip", choices=["page", "pictures"])
    args = parser.parse_args()
    env = {"PYTHONPATH": str(args.tree.resolve())} if args.tree else None  # gateway from there
    print(
        f"load average {os.getloadavg()[0]:.2f}; daemon from "
        f"{args.tree or Path(__file__).resolve().parent.parent}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        async with FakeLLM() as llm:
            if args.skip != "page":
                print("1. web_fetch on a hostile page")
                llm.script(*[asks_for_pages] * 10)
                await hostile_page(
                    llm, Path(scratch) / "page", PAGES[args.page], args.page_kb * 1000, env
                )
            if args.skip != "pictures":
                print("2. four pixel bombs at once")
                await pixel_bombs(llm, Path(scratch) / "pictures", env)


if __name__ == "__main__":
    asyncio.run(main())
