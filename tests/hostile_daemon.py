"""A real `gateway run` on loopback facing hostile input, for tests/test_hostile_input.py and
bench/hostile_input.py: the web chat on, web_fetch allowed onto 127.0.0.1 (where the hostile page
is served), the fake model asking for the page when a message says "read <url>", and ways to see
the daemon's worker process and the memory of both."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.daemon_proc import DaemonProc, free_port
from tests.fakes.llm import FakeLLM, ToolCall
from tests.helpers import write_config
from tests.mediafiles import blank_png

READ = re.compile(r"^read (http://\S+)$")


def asks_for_pages(body: dict[str, Any]) -> ToolCall | None:
    """The fake model's step: a user message "read <url>" gets a web_fetch call; anything else (the
    tool's result too) the default echo."""
    last = (body.get("messages") or [{}])[-1]
    content = last.get("content")
    text = (
        content
        if isinstance(content, str)
        else " ".join(
            b.get("text", "")
            for b in content or []
            if isinstance(b, dict) and b.get("type") == "text"
        )
    )
    found = READ.match(text.strip()) if last.get("role") == "user" else None
    return ToolCall("web_fetch", {"url": found.group(1)}) if found else None


def tool_results(llm: FakeLLM) -> list[str]:
    """The text of every web_fetch result the model has been sent so far."""
    found = []
    for body in llm.anthropic_requests():
        for message in body.get("messages") or []:
            for block in message.get("content") if isinstance(message.get("content"), list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    content = block.get("content")
                    found.append(content if isinstance(content, str) else json.dumps(content))
    return list(dict.fromkeys(found))


@asynccontextmanager
async def page_server(pages: dict[str, bytes]) -> AsyncIterator[tuple[str, list[str]]]:
    """Serves `pages` (path → HTML) on 127.0.0.1; yields the base URL and the paths served."""
    served: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        served.append(request.path)
        return web.Response(body=pages[request.path], content_type="text/html")

    app = web.Application()
    for path in pages:
        app.router.add_get(path, handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", served
    finally:
        await runner.cleanup()


@asynccontextmanager
async def hostile_daemon(
    home: Path,
    llm: FakeLLM,
    env: dict[str, str] | None = None,
    extra: str = "",
    read_cpu_s: float = 15,
) -> AsyncIterator[tuple[DaemonProc, int]]:
    """`gateway run` with the web chat on a free port (and `extra` config); yields the process
    and the port."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    write_config(
        home,
        provider="anthropic",
        base_url=llm.base_url,
        extra=(
            f"web:\n  port: {port}\ntools:\n  web_fetch:\n    allow_private: true\n"
            f"    read_cpu_s: {read_cpu_s}\n{extra}"
        ),
    )
    daemon = DaemonProc(home, env=env)
    await daemon.start()
    try:
        await daemon.wait_ready()
        yield daemon, port
    finally:
        await daemon.kill()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def worker_pid(daemon_pid: int) -> int | None:
    """The daemon's worker child, if one runs."""
    for child in children(daemon_pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        if b"gateway.worker.child" in command:
            return child
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def memory_mb(pid: int | None, key: str = "VmRSS") -> float:
    """VmRSS (or VmHWM, the peak) of a process in MB; 0 when it is gone."""
    if pid is None:
        return 0.0
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return 0.0
    found = re.search(rf"^{key}:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else 0.0


async def upload(port: int, headers: dict[str, str], data: bytes, name: str) -> dict[str, Any]:
    form = aiohttp.FormData()
    form.add_field("file", data, filename=name, content_type="image/png")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{port}/upload", data=form, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            found: dict[str, Any] = await resp.json()
            return found


def pixel_bomb() -> bytes:
    """7999×7999 RGBA, all black: 248 KB on disk, 244 MB of pixels (the issue's picture)."""
    return blank_png(7999, 7999, mode="RGBA")


async def until(predicate: Callable[[], object], timeout: float = 120.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)
