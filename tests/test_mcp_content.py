"""What an MCP server hands the model, checked where it lands (the fake LLM's recorded requests):
credentials a server writes into its own tool text are masked, the reference server's picture with a
bad optional chunk is shown, a text resource sent as base64 is text, and a result's caps (20,000
characters, 8 pictures) hold."""

from __future__ import annotations

import base64
import io
import json
import textwrap
import zlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from gateway.config.tools import McpServerConfig
from gateway.config.yamlload import Secret
from gateway.mcp.content import MAX_IMAGES, tool_output, without_bad_optional_chunks
from gateway.mcp.hub import McpHub
from gateway.mcp.vet import vet_tool
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.mcp_server import PNG, TINY_IMAGE
from tests.fakes.mcp_zygote import server_command
from tests.helpers import RecordingAdapter, llm_url, write_config
from tests.test_mcp import (
    CONNECT_S,
    _ask,
    _close,
    _started,
    _stdio_config,
    _tool_results,
    _tools_file,
    set_vision,
)

TOKEN = "fk_live_5b1f0c9e7d2a4c3b8e6f"


def _tool(request: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in request["tools"] if t["name"] == name)


async def test_a_credential_a_server_writes_into_its_tool_text_reaches_the_model_masked(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    command, args = server_command("--tools", str(_tools_file(tmp_path, ["careless", "echo"])))
    write_config(
        home,
        base_url=llm_url(fake_llm, "anthropic"),
        extra=textwrap.dedent(f"""\
        mcp_servers:
          fake:
            command: {command}
            args: {json.dumps(args)}
            env:
              FAKE_API_TOKEN: {TOKEN}
            connect_timeout_s: {CONNECT_S}
        """),
    )
    adapter = RecordingAdapter()
    fake_llm.script(Reply("fine"))
    gw = await _started(home, adapter)
    try:
        assert gw.mcp is not None
        listed = gw.mcp.tool("mcp_fake_careless")
        assert listed is not None and "FAKE_API_TOKEN=***" in listed.description
        await _ask(gw, adapter, "hello")
    finally:
        await _close(gw)
    (request,) = fake_llm.anthropic_requests()
    careless = _tool(request, "mcp_fake_careless")
    expected = "Look up an account. Authenticated with FAKE_API_TOKEN=*** (careless)."
    assert careless["description"].startswith(expected)
    prop = careless["input_schema"]["properties"]["account"]
    assert prop["description"] == "The account (default: the one of key ***)."
    assert TOKEN not in json.dumps(request)


def test_vet_masks_every_string_of_the_schema_keys_included() -> None:
    secret = "k_9f8e7d6c5b"
    hub = McpHub({"s": McpServerConfig(command="srv", env={"KEY": Secret(secret)})})
    schema = {"properties": {secret: {"enum": [f"a {secret}"], "default": secret}}}
    vetted = vet_tool(f"Uses {secret}.", schema, mask=hub.masked)
    assert secret not in json.dumps([vetted.description, vetted.schema])
    assert vetted.schema == {"properties": {"***": {"enum": ["a ***"], "default": "***"}}}


async def test_the_reference_servers_tiny_image_reaches_the_model(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """@modelcontextprotocol/server-everything's get-tiny-image: its iCCP chunk's CRC is wrong,
    which Pillow refuses by default; the chunk is optional, so it is left out and the picture
    shown."""
    adapter = _stdio_config(home, fake_llm, _tools_file(tmp_path, ["tiny_image"]))
    set_vision(home, True)
    fake_llm.script(ToolCall("mcp_fake_tiny_image", {}), Reply("the MCP logo"))
    gw = await _started(home, adapter)
    try:
        assert await _ask(gw, adapter, "show me the tiny image") == "the MCP logo"
    finally:
        await _close(gw)
    (result,) = _tool_results(fake_llm.anthropic_requests()[1])
    text, image = result["content"]
    assert "Here's the image you requested:" in text["text"]
    assert "could not be shown" not in text["text"]
    with Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))) as shown:
        assert shown.size == (20, 20)


def _chunks(data: bytes) -> list[tuple[bytes, bool]]:
    """(type, CRC right) of each chunk of a PNG."""
    found, pos = [], 8
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        body = data[pos + 4 : pos + 8 + length]
        crc = int.from_bytes(data[pos + 8 + length : pos + 12 + length], "big")
        found.append((body[:4], zlib.crc32(body) == crc))
        pos += 12 + length
    return found


def _with_chunk(png: bytes, kind: bytes, body: bytes, *, good_crc: bool) -> bytes:
    """`png` with a chunk inserted after IHDR."""
    crc = zlib.crc32(kind + body) ^ (0 if good_crc else 1)
    chunk = len(body).to_bytes(4, "big") + kind + body + crc.to_bytes(4, "big")
    return png[:33] + chunk + png[33:]


def test_only_optional_chunks_with_a_wrong_crc_are_left_out() -> None:
    tiny = base64.b64decode(TINY_IMAGE)
    assert (b"iCCP", False) in _chunks(tiny)
    assert [kind for kind, _ in _chunks(without_bad_optional_chunks(tiny))] == [
        b"IHDR",
        b"eXIf",
        b"pHYs",
        b"iTXt",
        b"IDAT",
        b"IEND",
    ]
    good_text = _with_chunk(PNG, b"tEXt", b"Comment\0fine", good_crc=True)
    assert without_bad_optional_chunks(good_text) == good_text  # nothing wrong: the same bytes
    bad_text = _with_chunk(PNG, b"tEXt", b"Comment\0bad", good_crc=False)
    assert without_bad_optional_chunks(bad_text) == PNG
    bad_critical = _with_chunk(PNG, b"PLTE", b"\0\0\0", good_crc=False)  # required: stays refused
    assert without_bad_optional_chunks(bad_critical) == bad_critical
    for odd in (b"GIF89a", PNG[:40], b""):  # not a PNG, or cut short: left alone
        assert without_bad_optional_chunks(odd) == odd


async def test_a_text_resource_sent_as_base64_is_text(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    adapter = _stdio_config(home, fake_llm, _tools_file(tmp_path, ["blob_notes"]))
    fake_llm.script(ToolCall("mcp_fake_blob_notes", {}), Reply("read"))
    gw = await _started(home, adapter)
    try:
        await _ask(gw, adapter, "the notes?")
    finally:
        await _close(gw)
    (result,) = _tool_results(fake_llm.anthropic_requests()[1])
    assert "[resource memo://blob]\nthe notes, café au lait" in result["content"]
    assert "binary resource" not in result["content"]


@pytest.mark.parametrize(
    ("mime", "blob", "shown"),
    [
        ("text/markdown", b"# title", "[resource r://x]\n# title"),
        ("application/json", b'{"a": 1}', '[resource r://x]\n{"a": 1}'),
        ("application/ld+json", b"{}", "[resource r://x]\n{}"),
        ("text/plain; charset=ISO-8859-1", "café".encode("latin-1"), "[resource r://x]\ncafé"),
        ("text/plain", b"\xff\xfe\xfa", "[binary resource r://x (text/plain, 3 bytes) not shown]"),
        (
            "text/plain; charset=rot13",
            b"abc",
            "[binary resource r://x (text/plain; charset=rot13, 3 bytes) not shown]",
        ),
        (
            "application/pdf",
            b"%PDF-1",
            "[binary resource r://x (application/pdf, 6 bytes) not shown]",
        ),
    ],
)
def test_a_blob_is_text_only_when_typed_as_text_and_decodable(
    mime: str, blob: bytes, shown: str
) -> None:
    resource = {"uri": "r://x", "mimeType": mime, "blob": base64.b64encode(blob).decode()}
    result = {"content": [{"type": "resource", "resource": resource}]}
    assert tool_output(result, max_chars=100).text == shown


def test_a_result_is_cut_at_its_character_cap_and_not_before() -> None:
    def text_of(chars: int) -> str:
        return tool_output({"content": [{"type": "text", "text": "x" * chars}]}, max_chars=50).text

    assert text_of(50) == "x" * 50
    assert text_of(51) == "x" * 50 + "\n[... cut at 50 of 51 characters]"


async def test_a_long_result_reaches_the_model_cut_at_20000_characters(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    adapter = _stdio_config(home, fake_llm, _tools_file(tmp_path, ["long_text"]))
    fake_llm.script(
        ToolCall("mcp_fake_long_text", {"chars": 20_000}),
        Reply("whole"),
        ToolCall("mcp_fake_long_text", {"chars": 30_000}),
        Reply("cut"),
    )
    gw = await _started(home, adapter)
    try:
        await _ask(gw, adapter, "a long one")
        await _ask(gw, adapter, "a longer one")
    finally:
        await _close(gw)
    requests = fake_llm.anthropic_requests()
    whole = _tool_results(requests[1])[-1]["content"]
    cut = _tool_results(requests[3])[-1]["content"]
    assert "000019990\n" in whole and "[... cut at" not in whole
    assert "000019990\n" in cut and "000020000" not in cut
    assert "[... cut at 20,000 of 30,000 characters]" in cut


def test_at_most_eight_pictures_of_a_result_are_pictures() -> None:
    data = base64.b64encode(PNG).decode()
    blocks = [
        {"type": "image", "data": data, "mimeType": "image/png"} for _ in range(MAX_IMAGES + 2)
    ]
    out = tool_output({"content": blocks}, max_chars=10_000, images=True)
    assert len(out.images) == 8 == MAX_IMAGES
    note = (
        "[image image/png, 77 bytes: returned by the tool, not shown to you (only the first 8 "
        "readable images of a result are shown)]"
    )
    assert out.text == f"{note}\n\n{note}"


async def test_a_result_with_ten_pictures_shows_the_model_eight(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    adapter = _stdio_config(home, fake_llm, _tools_file(tmp_path, ["many_pictures"]))
    set_vision(home, True)
    fake_llm.script(ToolCall("mcp_fake_many_pictures", {"count": 10}), Reply("ten red squares"))
    gw = await _started(home, adapter)
    try:
        await _ask(gw, adapter, "show them all")
    finally:
        await _close(gw)
    (result,) = _tool_results(fake_llm.anthropic_requests()[1])
    text, *images = result["content"]
    assert len(images) == 8 and {i["type"] for i in images} == {"image"}
    assert text["text"].count("only the first 8 readable images of a result are shown") == 2
    assert "picture 10" in text["text"]


def _server_everything() -> Path | None:
    """The reference server's entry point, when it was installed (`npm install
    @modelcontextprotocol/server-everything` in the folder GATEWAY_TEST_NODE_MODULES names)."""
    import os

    folder = os.environ.get("GATEWAY_TEST_NODE_MODULES")
    if not folder:
        return None
    entry = Path(folder) / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    return entry if entry.is_file() else None


@pytest.mark.skipif(_server_everything() is None, reason="the reference MCP server is not here")
async def test_the_real_reference_server_tiny_image_and_resources(
    home: Path, fake_llm: FakeLLM
) -> None:
    import shutil

    node = shutil.which("node")
    if node is None:
        pytest.skip("no node")
    write_config(
        home,
        base_url=llm_url(fake_llm, "anthropic"),
        extra=textwrap.dedent(f"""\
        mcp_servers:
          ref:
            command: {node}
            args: [{_server_everything()}, stdio]
            connect_timeout_s: {CONNECT_S}
        """),
    )
    set_vision(home, True)
    adapter = RecordingAdapter()
    blob_two = {"resourceType": "Blob", "resourceId": 2}
    fake_llm.script(
        ToolCall("mcp_ref_get-tiny-image", {}),
        Reply("the logo"),
        ToolCall("mcp_ref_get-resource-reference", blob_two),
        Reply("read"),
    )
    gw = await _started(home, adapter)
    try:
        assert await _ask(gw, adapter, "the tiny image") == "the logo"
        assert await _ask(gw, adapter, "resource 2 as a blob") == "read"
    finally:
        await _close(gw)
    requests = fake_llm.anthropic_requests()
    (result,) = _tool_results(requests[1])
    image = result["content"][1]
    assert "could not be shown" not in json.dumps(result)
    with Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))) as shown:
        assert shown.size == (20, 20)
    resource = _tool_results(requests[3])[-1]["content"]
    assert "Resource 2: This is a base64 blob created at" in resource and "binary" not in resource
