"""Live previews in the web chat: the whole daemon, a browser's WebSocket and the fake LLM streaming
for real. The page's own script is run too (in node, when the machine has it) on the frames the
daemon sent."""

from __future__ import annotations

import asyncio
import json
import subprocess
import textwrap
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp

from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.fakes.llm import FakeLLM, Paced, Reply, StreamGate
from tests.helpers import require_tool, write_config

ANSWER = (
    "A streamed answer, written in several "
    "pieces:\n\n```python\nprint('hi')\n```\nand a **bold** end."
)


async def _daemon(home: Path) -> Daemon:
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    return daemon


def socket_url(daemon: Daemon) -> str:
    return f"http://127.0.0.1:{daemon.web_port}/ws?client=tab1"


def auth(home: Path) -> dict[str, str]:
    return {"Authorization": f"Bearer {load_web_secret(home)}"}


class Tab:
    """A browser tab: its socket and every frame it got, in order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []

    async def until(self, predicate: Any, timeout: float = 10.0) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            for frame in self.frames:
                if predicate(frame):
                    return frame
            while True:
                frame = dict(json.loads((await self.ws.receive()).data))
                self.frames.append(frame)
                if predicate(frame):
                    return frame

        return await asyncio.wait_for(read(), timeout)

    async def drain(self, quiet: float = 0.1) -> None:
        """Read whatever else comes until the socket has been quiet for `quiet` seconds."""
        while True:
            try:
                msg = await self.ws.receive(timeout=quiet)
            except TimeoutError:
                return
            if msg.type != aiohttp.WSMsgType.TEXT:
                return
            self.frames.append(json.loads(msg.data))

    def replies(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == "message" and f["kind"] == "reply"]


def config(home: Path, llm: FakeLLM, extra: str = "") -> None:
    write_config(
        home, provider="anthropic", base_url=llm.base_url, extra="web:\n  port: 0\n" + extra
    )


async def test_the_answer_arrives_as_it_is_written_and_the_reply_replaces_the_draft(
    home: Path,
) -> None:
    gate = StreamGate()
    async with FakeLLM(stream_chunk_chars=12) as llm:
        config(home, llm)
        llm.script(Paced(Reply(ANSWER), gate=gate))
        daemon = await _daemon(home)
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(socket_url(daemon), headers=auth(home)) as ws,
            ):
                tab = Tab(ws)
                await ws.send_str(json.dumps({"text": "stream please"}))
                gate.release(1)
                draft = await tab.until(lambda f: f["type"] == "draft")
                assert draft["text"] == ANSWER[:12]
                gate.release(1)
                delta = await tab.until(lambda f: f["type"] == "delta")
                assert delta == {
                    "type": "delta",
                    "id": draft["id"],
                    "text": ANSWER[12:24],
                    # the message it answers: the page's "thinking…" goes
                    "reply_to": draft["reply_to"],
                }
                gate.release_all()
                final = await tab.until(lambda f: f["type"] == "message" and f["kind"] == "reply")
        finally:
            await daemon.stop()
    assert final["replaces"] == draft["id"] and final["text"] == ANSWER  # the stored answer, whole
    shown = "".join(
        f["text"] for f in tab.frames if f["type"] in ("draft", "delta") and f["id"] == draft["id"]
    )
    assert shown == ANSWER and len(tab.replies()) == 1
    assert llm.anthropic_requests()[-1]["stream"] is True


async def test_streaming_off_sends_the_same_reply_without_drafts(home: Path) -> None:
    async with FakeLLM(stream_chunk_chars=12) as llm:
        config(home, llm, "streaming:\n  mode: off\n")
        llm.script(Reply(ANSWER))
        daemon = await _daemon(home)
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(socket_url(daemon), headers=auth(home)) as ws,
            ):
                tab = Tab(ws)
                await ws.send_str(json.dumps({"text": "no stream"}))
                final = await tab.until(lambda f: f["type"] == "message" and f["kind"] == "reply")
        finally:
            await daemon.stop()
    assert final["text"] == ANSWER and "replaces" not in final
    assert (
        not [f for f in tab.frames if f["type"] in ("draft", "delta")]
        and "stream" not in llm.calls[-1].body
    )


async def test_a_kill_mid_stream_gives_exactly_one_answer_after_the_restart(home: Path) -> None:
    gate = StreamGate()
    async with FakeLLM(stream_chunk_chars=12) as llm:
        config(home, llm, "daemon:\n  drain_seconds: 0\n")
        llm.script(Paced(Reply(ANSWER), gate=gate), Reply(ANSWER))
        first = await _daemon(home)
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(socket_url(first), headers=auth(home)) as ws:
                tab = Tab(ws)
                await ws.send_str(json.dumps({"text": "stream please"}))
                gate.release(2)
                draft = await tab.until(lambda f: f["type"] == "delta")
                await first.stop()  # the turn is cut mid-stream and stays stored for the next start
            assert tab.replies() == []
            gate.release_all()
            second = await _daemon(home)
            try:
                async with http.ws_connect(socket_url(second), headers=auth(home)) as ws2:
                    tab2 = Tab(ws2)
                    final = await tab2.until(
                        lambda f: f["type"] == "message" and f["kind"] == "reply"
                    )
                    await second.gw.sessions.wait_idle()
                    await tab2.drain()
            finally:
                await second.stop()
    # the first life's draft, replaced
    assert final["text"] == ANSWER and final["replaces"] == draft["id"]
    assert len(tab2.replies()) == 1


def test_the_page_grows_the_draft_and_puts_the_reply_in_its_place(tmp_path: Path) -> None:
    require_tool("node", "nodejs")  # runs the page's script
    page = resources.files("adapters").joinpath("static/webchat.html").read_text(encoding="utf-8")
    script = page.split("<script>", 1)[1].split("</script>", 1)[0]
    frames = [
        {"type": "draft", "id": "d1", "text": "Hello"},
        {"type": "delta", "id": "d1", "text": " **wor"},
        {"type": "delta", "id": "d1", "text": "ld**"},
        {"type": "progress", "id": "p1", "text": "🔧 memory"},
        {
            "type": "message",
            "id": "web-1",
            "kind": "reply",
            "text": "Hello **world**!",
            "replaces": "d1",
        },
        {"type": "draft", "id": "d2", "text": "gone soon"},
        {"type": "retract", "id": "d2"},
    ]
    harness = (
        textwrap.dedent("""\
        const nodes = [];
        function el(tag) { return { tag, className: "", innerHTML: "", textContent: "",
          children: [], appendChild(c) { nodes.push(c); }, replaceChildren() {},
          remove() { this.removed = true; }, addEventListener() {}, scrollTop: 0, scrollHeight: 0,
          value: "" }; }
        const byId = { log: el("main"), input: el("textarea"), status: el("span"), form: el("form"),
          "new-chat": el("button"), banner: el("p"), picker: el("input"), files: el("div"),
          attach: el("button") };
        globalThis.document = { getElementById: (id) => byId[id], createElement: el,
                                addEventListener() {}, body: el("body") };
        globalThis.localStorage = { getItem: () => "c1", setItem() {} };
        globalThis.matchMedia = () => ({ matches: false, addEventListener() {} });
        globalThis.location = { protocol: "http:", host: "x", search: "" };
        globalThis.URLSearchParams = class { get() { return null; } };
        let sock;
        globalThis.WebSocket = class { constructor() { sock = this; } send() {} };
        globalThis.WebSocket.OPEN = 1;
        """)
        + script
        + textwrap.dedent(f"""
        for (const f of {json.dumps(frames)}) sock.onmessage({{ data: JSON.stringify(f) }});
        const shown = nodes.filter((n) => !n.removed);
        console.log(JSON.stringify(shown.map((n) => [n.className, n.innerHTML || n.textContent])));
        """)
    )
    path = tmp_path / "page.js"
    path.write_text(harness, encoding="utf-8")
    out = subprocess.run(
        ["node", str(path)], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert json.loads(out) == [
        ["msg bot", "<p>Hello <strong>world</strong>!</p>"],
        ["msg notice progress", "🔧 memory"],
    ]
