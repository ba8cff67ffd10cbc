"""Files in the web chat: uploaded over HTTP (the owner only, streamed to disk, bounded), named in
the socket message, and seen by the model like any platform's attachments."""

from __future__ import annotations

import asyncio
import base64
import json
import stat
import subprocess
import textwrap
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp

from adapters.webchat import WebChatAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.fakes.llm import FakeLLM
from tests.fakes.transcription import FakeTranscription
from tests.helpers import require_tool, write_config
from tests.mediafiles import CORRUPT_PDF, VOICE_NOTE, image_size, make_pdf, picture


async def start(home: Path, llm: FakeLLM, extra: str = "") -> Daemon:
    write_config(
        home, provider="anthropic", base_url=llm.base_url, extra=f"web:\n  port: 0\n{extra}"
    )
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    return daemon


def auth(home: Path) -> dict[str, str]:
    return {"Authorization": f"Bearer {load_web_secret(home)}"}


async def upload(
    port: int,
    home: Path,
    data: bytes,
    name: str,
    kind: str,
    *,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    form = aiohttp.FormData()
    form.add_field("file", data, filename=name, content_type=kind)
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{port}/upload",
            data=form,
            headers=auth(home) if headers is None else headers,
        ) as resp:
            return resp.status, await resp.json(content_type=None) if resp.status != 401 else {}


async def say(
    port: int, home: Path, body: dict[str, Any], *, until: str = "reply"
) -> list[dict[str, Any]]:
    """Send one socket message; everything the page gets until the reply, or a message of the kind
    `until` (or an error frame)."""
    got: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(
            f"http://127.0.0.1:{port}/ws?client=tab1", headers=auth(home)
        ) as ws:
            await ws.send_str(json.dumps(body))
            async for msg in ws:
                data = json.loads(msg.data)
                if data["type"] in ("history", "hello", "draft", "delta", "progress"):
                    continue  # what a tab hears on connect, and the live preview of the answer
                got.append(data)
                if data["type"] == "error" or (
                    data["type"] == "message" and data["kind"] in (until, "error")
                ):
                    break
    return got


async def test_an_uploaded_picture_and_pdf_reach_the_model(home: Path, fake_llm: FakeLLM) -> None:
    daemon = await start(home, fake_llm)
    try:
        assert daemon.web_port
        status, photo = await upload(
            daemon.web_port, home, picture(2000, 1000, fmt="PNG"), "plot.png", "image/png"
        )
        assert status == 200 and photo["name"] == "plot.png" and photo["type"] == "image/png"
        uploads = home / "media" / "uploads"
        assert [
            stat.S_IMODE(p.stat().st_mode) for p in (uploads.parent, uploads, uploads / photo["id"])
        ] == [0o700, 0o700, 0o600]
        status, pdf = await upload(
            daemon.web_port, home, make_pdf(["Total: 42"]), "bill.pdf", "application/pdf"
        )
        assert status == 200
        frames = await say(daemon.web_port, home, {"text": "explain", "files": [photo, pdf]})
        assert frames[0]["type"] == "ack" and frames[0]["outcome"] == "accepted"
        assert frames[-1]["text"].startswith(
            "echo: explain\n[image: plot.png]\n[Document: bill.pdf (application/pdf"
        )
        content = fake_llm.anthropic_requests()[-1]["messages"][-1]["content"]
        assert content[0]["type"] == "image"
        assert image_size(base64.b64decode(content[0]["source"]["data"])) == (1516, 758)
        assert '<document name="bill.pdf">\nTotal: 42\n</document>' in content[1]["text"]
    finally:
        await daemon.stop()


async def test_uploads_are_bounded_owner_only_and_named_by_real_ids(
    home: Path, fake_llm: FakeLLM
) -> None:
    daemon = await start(home, fake_llm, "media:\n  max_bytes: 1000\n")
    try:
        assert daemon.web_port
        status, body = await upload(daemon.web_port, home, b"z" * 5000, "big.txt", "text/plain")
        assert status == 413 and body["error"] == "the file is larger than 1,000 bytes"
        assert list((home / "media" / "uploads").iterdir()) == []  # nothing kept of it
        status, _ = await upload(daemon.web_port, home, b"hi", "a.txt", "text/plain", headers={})
        assert status == 401
        frames = await say(
            daemon.web_port, home, {"text": "x", "files": [{"id": "../../state.db", "name": "db"}]}
        )
        assert frames == [
            {
                "type": "error",
                "text": "a file of this message was not uploaded (or is gone); attach it again",
            }
        ]
        assert fake_llm.anthropic_requests() == []
    finally:
        await daemon.stop()


async def test_a_message_of_only_a_file_is_answered(home: Path, fake_llm: FakeLLM) -> None:
    daemon = await start(home, fake_llm)
    try:
        assert daemon.web_port
        _, note = await upload(
            daemon.web_port, home, b"buy milk\nbuy eggs\n", "todo.md", "text/markdown"
        )
        frames = await say(daemon.web_port, home, {"text": "", "files": [note]})
        assert '<document name="todo.md">\nbuy milk\nbuy eggs\n\n</document>' in frames[-1]["text"]
    finally:
        await daemon.stop()


async def test_a_recording_is_transcribed_and_a_corrupt_pdf_is_answered_plainly(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with FakeTranscription(api_key=None) as stt:
        stt.says(VOICE_NOTE, "call the plumber tomorrow")
        daemon = await start(
            home, fake_llm, f"media:\n  transcription:\n    base_url: {stt.v1_url}\n"
        )
        try:
            assert daemon.web_port
            _, memo = await upload(daemon.web_port, home, VOICE_NOTE, "memo.ogg", "audio/ogg")
            frames = await say(daemon.web_port, home, {"text": "", "files": [memo]})
            assert (
                frames[-1]["text"]
                == "echo: [audio memo.ogg, transcribed] call the plumber tomorrow [users=1]"
            )
            assert stt.uploads[0].filename == "memo.ogg" and stt.uploads[0].data == VOICE_NOTE
            _, broken = await upload(
                daemon.web_port, home, CORRUPT_PDF, "scan.pdf", "application/pdf"
            )
            frames = await say(
                daemon.web_port, home, {"text": "", "files": [broken]}, until="notice"
            )
            assert [f["text"] for f in frames if f["type"] == "message"] == [
                "I couldn't use scan.pdf: the PDF is damaged or not a PDF at all."
            ]
            assert len(fake_llm.anthropic_requests()) == 1
        finally:
            await daemon.stop()


async def test_a_stalled_upload_is_dropped_and_leaves_nothing(
    home: Path, fake_llm: FakeLLM
) -> None:
    daemon = await start(home, fake_llm)
    try:
        assert daemon.web_port
        web_adapter = daemon.gw.adapters["web"]
        assert isinstance(web_adapter, WebChatAdapter)
        web_adapter.upload_stall_s = 0.2
        boundary = "XyZ"

        async def slow_body() -> AsyncIterator[bytes]:
            yield (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="s.txt"\r\n'
                "Content-Type: text/plain\r\n\r\nfirst bytes"
            ).encode()
            await asyncio.sleep(1.0)  # then nothing: a client holding the connection open
            yield f"\r\n--{boundary}--\r\n".encode()

        headers = {**auth(home), "Content-Type": f"multipart/form-data; boundary={boundary}"}
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"http://127.0.0.1:{daemon.web_port}/upload", data=slow_body(), headers=headers
            ) as resp:
                assert resp.status == 408 and "stalled" in (await resp.json())["error"]
        assert list((home / "media" / "uploads").iterdir()) == []
    finally:
        await daemon.stop()


def test_the_page_uploads_the_chosen_file_then_names_it_in_the_message(tmp_path: Path) -> None:
    require_tool("node", "nodejs")  # runs the page's script
    page = resources.files("adapters").joinpath("static/webchat.html").read_text(encoding="utf-8")
    script = page.split("<script>", 1)[1].split("</script>", 1)[0]
    harness = (
        textwrap.dedent("""\
        function el(tag) { return { tag, className: "", innerHTML: "", textContent: "",
          children: [], dataset: {}, classList: { add() {}, remove() {} }, h: {},
          appendChild(c) {}, replaceChildren(...c) { this.children = c; }, remove() {},
          addEventListener(t, f) { this.h[t] = f; }, focus() {}, click() {}, scrollTop: 0,
          scrollHeight: 0, value: "" }; }
        const byId = { log: el("main"), input: el("textarea"), status: el("span"), form: el("form"),
          "new-chat": el("button"), banner: el("p"), picker: el("input"), files: el("div"),
          attach: el("button") };
        globalThis.document = { getElementById: (id) => byId[id], createElement: el,
                                addEventListener() {}, body: el("body") };
        globalThis.localStorage = { getItem: () => "c1", setItem() {} };
        globalThis.matchMedia = () => ({ matches: false, addEventListener() {} });
        globalThis.location = { protocol: "http:", host: "x", search: "" };
        const uploads = [], frames = [];
        globalThis.FormData = class { append(key, file, name) { uploads.push([key, name]); } };
        const uploaded = { id: "0123456789abcdef0123456789abcdef", name: "cat.png",
          type: "image/png", size: 3 };
        globalThis.fetch = async (url, opts) => ({ ok: true, json: async () => uploaded });
        let sock;
        globalThis.WebSocket = class { constructor() { sock = this; this.readyState = 1; }
                                       send(f) { frames.push(JSON.parse(f)); } };
        globalThis.WebSocket.OPEN = 1;
        """)
        + script
        + textwrap.dedent("""
        (async () => {
          byId.picker.files = [{ name: "cat.png" }];
          byId.picker.h.change();
          const chips = byId.files.children.map((c) => c.textContent);
          byId.input.value = "what is it?";
          await byId.form.h.submit({ preventDefault() {} });
          console.log(JSON.stringify({ chips, uploads, frames, left: byId.files.children.length,
                                       input: byId.input.value }));
        })();
        """)
    )
    path = tmp_path / "page.js"
    path.write_text(harness, encoding="utf-8")
    out = json.loads(
        subprocess.run(
            ["node", str(path)], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    )
    assert out["chips"] == ["📎 cat.png"] and out["uploads"] == [["file", "cat.png"]]
    [frame] = out["frames"]
    assert frame["text"] == "what is it?" and frame["files"] == [
        {
            "id": "0123456789abcdef0123456789abcdef",
            "name": "cat.png",
            "type": "image/png",
            "size": 3,
        }
    ]
    assert out["left"] == 0 and out["input"] == ""  # sent: the chips and the text box are cleared


async def test_forgetting_the_owner_removes_the_web_chats_uploads(
    home: Path, fake_llm: FakeLLM
) -> None:
    """A PDF, a photo and a recording the owner sent, and one uploaded but never sent: `gateway
    users forget web:owner` leaves none of them in media/uploads/ (nor their prepared copies)."""
    import io

    from gateway.cli import users
    from gateway.cli.main import build_parser

    async with FakeTranscription(api_key=None) as stt:
        stt.says(VOICE_NOTE, "call the plumber")
        extra = f"media:\n  transcription:\n    base_url: {stt.v1_url}\n"
        daemon = await start(home, fake_llm, extra)
        try:
            port = daemon.web_port
            assert port
            files = (
                (make_pdf(["Total: 42"]), "bill.pdf", "application/pdf"),
                (picture(64, 48, fmt="PNG"), "plot.png", "image/png"),
                (VOICE_NOTE, "memo.ogg", "audio/ogg"),
            )
            sent = [(await upload(port, home, *file))[1] for file in files]
            status, _ = await upload(port, home, b"never sent", "draft.txt", "text/plain")
            assert status == 200
            frames = await say(port, home, {"text": "look", "files": sent})
            answer = frames[-1]["text"]
            assert "call the plumber" in answer and "Total: 42" in answer
            assert "[image: plot.png]" in answer
        finally:
            await daemon.stop()
    uploads = home / "media" / "uploads"
    assert len(list(uploads.iterdir())) == 4
    out = io.StringIO()
    argv = ["--home", str(home), "users", "forget", "web:owner", "--yes"]
    args = build_parser().parse_args(argv)
    assert users.run(args, load_config(home, env={}), stdin=io.StringIO(), out=out) == 0
    assert list(uploads.iterdir()) == []
    assert "4 web chat upload(s)" in out.getvalue()
    assert [p for p in (home / "media").rglob("*") if p.is_file()] == []
