"""Benchmark the event loop while another process holds state.db's write lock: how long /readyz
takes while a message waits for the lock, against the same requests with nobody holding it.

Run:  PYTHONPATH=. python bench/store_lock.py [--requests N]
Prints the median and the slowest of N /readyz requests, in ms, for each case. The daemon is the
real one, in this process, on the fake model; tests/test_store_outage.py checks what happens
meanwhile, this script how fast (a statement on the loop waits LOOP_BUSY_TIMEOUT_MS at most for a
lock).
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

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import LOOP_BUSY_TIMEOUT_MS, build_gateway, platform_adapters
from tests.daemon_proc import WebChatClient
from tests.fakes.llm import FakeLLM
from tests.helpers import write_config
from tests.store_locks import LockHolder


async def readyz(http: aiohttp.ClientSession, port: int, n: int) -> list[float]:
    took = []
    for _ in range(n):
        started = time.perf_counter()
        async with http.get(f"http://127.0.0.1:{port}/readyz") as resp:
            await resp.read()
        took.append(time.perf_counter() - started)
    return took


def line(name: str, took: list[float]) -> str:
    return (
        f"{name:<34} median {statistics.median(took) * 1000:7.1f} ms   "
        f"slowest {max(took) * 1000:7.1f} ms"
    )


async def main(requests: int) -> None:
    print(f"load average {os.getloadavg()[0]:.2f}; LOOP_BUSY_TIMEOUT_MS {LOOP_BUSY_TIMEOUT_MS}")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        async with FakeLLM() as llm:
            write_config(home, provider="anthropic", base_url=llm.base_url)
            config = load_config(home, env={})
            gateway = build_gateway(
                config, env={}, adapters=platform_adapters(config), probe_ollama=False
            )
            daemon = Daemon(gateway, install_signals=False)
            await daemon.start()
            gateway.sessions.outage.submit_wait = 300
            port = daemon.web_port or 0
            try:
                async with aiohttp.ClientSession() as http:
                    print(line("nobody holds the lock", await readyz(http, port, requests)))
                    async with WebChatClient(port, home=home) as tab, LockHolder(home / "state.db"):
                        assert tab.ws is not None
                        await tab.ws.send_str(json.dumps({"text": "waits for the lock"}))
                        while gateway.store.health.reason != "busy":
                            await asyncio.sleep(0.01)
                        print(
                            line(
                                "a message waits for a held lock",
                                await readyz(http, port, requests),
                            )
                        )
            finally:
                await daemon.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50)
    asyncio.run(main(parser.parse_args().requests))
