"""Tool search end to end: a real MCP server on the `mcp` SDK with 60 realistic tools
(tests/fakes/mcp_server.py, tests/fakes/mcp_catalog.py), the real gateway graph, and the bytes the
fake LLM received.

What must hold (issue #29): with `tools.search: on` the first request carries the core tools plus
tool_search and tool_call (at most 12 tools, 2,000 tokens of tool JSON); a search finds the weather
tool with its schema; a call through the bridge runs it and the result reaches the user; the tools
array and the system prompt are the same bytes on every request of the session, also after a restart
in which the server changed its tools (which only new sessions see); `off` sends all 60; `auto`
defers by the context window.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.main import main
from gateway.ops.wiring import Gateway
from gateway.sessions.compression import SUMMARY_SYSTEM
from gateway.sessions.flush import FLUSH_MARK
from tests.fakes.llm import FakeLLM, Reply, ToolCall, ToolCalls, estimate_tokens
from tests.fakes.mcp_zygote import server_command
from tests.helpers import RecordingAdapter, gateway_for, inbound, llm_url, require, write_config
from tests.jobs_support import fire_jobs, settle
from tests.lifecycle_support import FakeClock, last_user_text

# How long the fake server may take to connect: not a bound on anything these tests check (it
# starts in milliseconds from tests/fakes/mcp_zygote.py; a busy machine may hold it back).
CONNECT_S = 120
CORE = ["memory", "session_search", "skill_view", "skill_manage", "web_fetch", "schedule", "ask"]
WEATHER = "mcp_fake_weather_forecast"


def approve_all(home: Path) -> None:
    """The fake server's tools run unasked (`approval: never`)."""
    path = home / "config.yaml"
    text = path.read_text(encoding="utf-8")
    server = f"    connect_timeout_s: {CONNECT_S}\n"
    assert server in text
    path.write_text(text.replace(server, server + "    approval: never\n", 1), encoding="utf-8")


def configure(
    home: Path,
    fake: FakeLLM,
    *,
    search: str = "on",
    window: int | None = None,
    catalog: int = 60,
    version: str = "v1",
    extra: str = "",
    provider: str = "anthropic",
) -> None:
    tools_file = home.parent / "tools.json"
    offered = {"tools": [], "catalog": catalog, "version": version}
    tools_file.write_text(json.dumps(offered), encoding="utf-8")
    command, args = server_command("--tools", str(tools_file))
    servers = textwrap.dedent(f"""\
        mcp_servers:
          fake:
            command: {command}
            args: {json.dumps(args)}
            timeout_s: 10
            connect_timeout_s: {CONNECT_S}
        tools:
          search: {search}
        """)
    path = write_config(
        home,
        provider=provider,
        base_url=llm_url(fake, provider),
        extra=servers + textwrap.dedent(extra),
    )
    if window is not None:
        text = path.read_text(encoding="utf-8")
        sized = f"  timeout_s: 10\n  context_window: {window}\n"
        path.write_text(text.replace("  timeout_s: 10\n", sized, 1), encoding="utf-8")


@asynccontextmanager
async def running(
    home: Path, clock: FakeClock | None = None, background: bool = False
) -> AsyncIterator[tuple[Gateway, RecordingAdapter]]:
    """The real graph with the MCP server up; `background` starts the lifecycle (flushes) and the
    jobs runner."""
    adapter = RecordingAdapter()
    gw = gateway_for(home, [adapter], clock=clock)
    assert gw.mcp is not None and gw.lifecycle is not None
    await gw.mcp.start()
    try:
        assert gw.mcp.states["fake"].state == "up", gw.mcp.states["fake"].error
        if background:
            assert gw.jobs is not None
            await gw.lifecycle.start()
            await gw.jobs.start()
        yield gw, adapter
    finally:
        await settle(gw)
        if gw.jobs is not None and gw.jobs.started:
            await gw.jobs.stop(0)
        await gw.sessions.cancel_all()
        if gw.lifecycle.started or gw.lifecycle.flusher.running:
            await gw.lifecycle.stop(0)
        await gw.close_tools()
        await gw.llm.close()
        gw.store.close()


async def ask(gw: Gateway, adapter: RecordingAdapter, text: str, chat_id: str = "c1") -> str:
    before = len(adapter.sent)
    await gw.sessions.submit(inbound(text, chat_id=chat_id))
    await adapter.wait_for(before + 1, timeout=CONNECT_S)
    await gw.sessions.wait_idle()
    return adapter.sent[-1].text


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


def tool_tokens(body: dict[str, Any]) -> int:
    return sum(estimate_tokens(t) for t in body.get("tools", ()))


def raw_value(raw: bytes, key: str) -> bytes:
    """The exact bytes of a top-level key's value in a request body as the fake received it."""
    text = raw.decode("utf-8")
    want = json.loads(text)[key]
    decoder = json.JSONDecoder()
    at = text.find(f'"{key}":')
    while at >= 0:
        start = at + len(key) + 3
        value, end = decoder.raw_decode(text, start)
        if value == want:
            return text[start:end].encode("utf-8")
        at = text.find(f'"{key}":', at + 1)
    raise AssertionError(f"no top-level {key!r} in the request")


def answer_json(text: str) -> dict[str, Any]:
    """A tool_search answer's JSON, out of its untrusted-content frame."""
    head, _, rest = text.partition("\n")
    assert head.startswith('<untrusted_content source="tool descriptions of the MCP server')
    return json.loads(rest.rpartition("\n</untrusted_content>")[0])  # type: ignore[no-any-return]


def answer_with_result(body: dict[str, Any]) -> Reply:
    """The model's answer: the last tool result, as a model would pass it on."""
    return Reply(f"Here it is: {tool_results(body)[-1]['content']}")


async def test_search_finds_the_tool_the_bridge_runs_it_and_the_prefix_never_moves(
    home: Path, fake_llm: FakeLLM
) -> None:
    configure(home, fake_llm)
    fake_llm.script(
        ToolCall("tool_search", {"query": "forecast for a city"}),
        ToolCall("tool_call", {"name": WEATHER, "arguments": {"city": "Oslo", "days": 2}}),
        answer_with_result,
    )
    async with running(home) as (gw, adapter):
        reply = await ask(gw, adapter, "What will the weather be in Oslo?")
    assert "Forecast for Oslo: sunny, 18 °C, light wind for the next 2 days." in reply
    first, second, third = fake_llm.anthropic_requests()
    names = [t["name"] for t in first["tools"]]
    assert names == [*CORE, "tool_search", "tool_call"]
    assert len(names) <= 12 and tool_tokens(first) <= 2000
    search = "".join(t["description"] for t in first["tools"] if t["name"] == "tool_search")
    assert "Find tools of the MCP server fake that are not listed here" in search
    (found,) = tool_results(second)
    best = answer_json(found["content"])["tools"][0]
    assert best["name"] == WEATHER
    assert best["description"].startswith("Get the weather forecast for a city")
    assert best["parameters"]["required"] == ["city"]
    assert best["parameters"]["properties"]["days"]["type"] == "integer"
    assert "readOnlyHint" not in json.dumps(fake_llm.anthropic_requests())  # never sent
    result = tool_results(third)[-1]
    assert result["content"].startswith(f'<untrusted_content source="the MCP tool {WEATHER}">')

    # the same session after a restart in which the server changed its tools: same bytes and catalog
    configure(home, fake_llm, catalog=61, version="v2")
    fake_llm.script(
        ToolCall("tool_search", {"query": "weather forecast"}),
        answer_with_result,
        ToolCall("tool_search", {"query": "weather forecast"}),
        answer_with_result,
    )
    async with running(home) as (gw, adapter):
        again = await ask(gw, adapter, "and the forecast tools?")
        other = await ask(gw, adapter, "forecast tools please", chat_id="c2")
    raws = fake_llm.anthropic_raw()
    session, fresh = raws[:5], raws[5:]
    for key in ("tools", "system"):
        assert {raw_value(r, key) for r in session} == {raw_value(raws[0], key)}, key
    old = answer_json(tool_results(fake_llm.anthropic_requests()[4])[-1]["content"])["tools"]
    assert WEATHER + "_work" not in again and all(t["description"].endswith("v1") for t in old)
    new = answer_json(tool_results(fake_llm.anthropic_requests()[6])[-1]["content"])["tools"]
    assert WEATHER + "_work" in other and all(t["description"].endswith("v2") for t in new)
    # its catalog is today's, its tools array the same bytes: sessions of one server set share it
    assert raw_value(fresh[0], "tools") == raw_value(raws[0], "tools")


async def test_off_sends_every_tool_and_auto_follows_the_context_window(
    home: Path, fake_llm: FakeLLM
) -> None:
    sent: dict[str, list[str]] = {}
    for label, search, window in (
        ("off", "off", 20_000),
        ("auto small", "auto", 20_000),
        ("auto large", "auto", 2_000_000),
    ):
        configure(home, fake_llm, search=search, window=window)
        async with running(home) as (gw, adapter):
            await ask(gw, adapter, "hello", chat_id=label.replace(" ", "-"))
        sent[label] = [t["name"] for t in fake_llm.anthropic_requests()[-1]["tools"]]
    mcp = [n for n in sent["off"] if n.startswith("mcp_fake_")]
    assert len(mcp) == 60 and sent["off"] == [*CORE, *mcp]
    assert sent["auto small"] == [*CORE, "tool_search", "tool_call"]
    assert sent["auto large"] == sent["off"]


async def test_bridge_errors_name_the_problem_and_the_policy_applies_to_the_real_name(
    home: Path, fake_llm: FakeLLM
) -> None:
    # the delete tool is destructive: its approval has tests of its own (tests/test_approvals.py)
    configure(
        home,
        fake_llm,
        extra="""\
        agent:
          tools: [memory, "mcp_fake_*"]
        """,
    )
    approve_all(home)
    fake_llm.script(
        ToolCall("tool_call", {"name": "weather", "arguments": {"city": "Oslo"}}),
        ToolCall("tool_call", {"name": WEATHER, "arguments": {"days": "three"}}),
        ToolCall("tool_call", {"name": "mcp_fake_delete_file", "arguments": {"path": "a.txt"}}),
        Reply("done"),
    )
    async with running(home) as (gw, adapter):
        await ask(gw, adapter, "go")
    unknown, invalid, deleted = (tool_results(b)[-1] for b in fake_llm.anthropic_requests()[1:4])
    assert unknown["is_error"] and unknown["content"] == (
        "Unknown tool 'weather': use tool_search to find the tool and its full name. "
        f"Closest names: mcp_fake_weather_alerts, {WEATHER}."
    )
    assert invalid["is_error"] and invalid["content"] == (
        f"Invalid arguments for {WEATHER}: 'city' is a required property; days: 'three' is not "
        "of type 'integer'."
    )
    assert "is_error" not in deleted and "delete_file: path=a.txt" in deleted["content"]

    # the next start leaves delete tools out of agent.tools: the running session may no longer call
    # one, through the bridge or by its real name, though its frozen catalog still lists it
    configure(
        home,
        fake_llm,
        extra="""\
        agent:
          tools: [memory, "mcp_fake_[!d]*"]
        """,
    )
    fake_llm.script(
        ToolCall("tool_call", {"name": "mcp_fake_delete_file", "arguments": {"path": "b.txt"}}),
        ToolCall("mcp_fake_delete_file", {"path": "c.txt"}),
        ToolCall(WEATHER, {"city": "Bergen"}),
        Reply("ok"),
    )
    async with running(home) as (gw, adapter):
        await ask(gw, adapter, "again")
    bridged, direct, weather = (tool_results(b)[-1] for b in fake_llm.anthropic_requests()[-3:])
    for refused in (bridged, direct):
        assert refused["is_error"]
        assert refused["content"].startswith("Tool not available right now: 'mcp_fake_delete_file'")
    assert "Forecast for Bergen" in weather["content"]  # called by its real name, it runs too


async def test_the_catalog_keeps_annotations_for_the_core_and_survives_a_restart(
    home: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    configure(home, fake_llm)
    async with running(home) as (gw, adapter):
        await ask(gw, adapter, "hi")
        session = gw.store.active_session("cli:dm:c1")
        assert session is not None
    configure(home, fake_llm, catalog=0)  # the server has no tools now: the catalog is stored
    caplog.set_level("INFO", logger="gateway.agent.loop")
    fake_llm.script(
        ToolCall("tool_search", {"query": "weather"}),
        ToolCall("tool_call", {"name": WEATHER, "arguments": {"city": "Oslo"}}),
        Reply("It is gone."),
    )
    started: list[str] = []
    async with running(home) as (gw, adapter):
        row = gw.store.session(session.id)
        tools = gw.sessions.roster.main.tools.of(row)
        await gw.agent.run(
            system=row.system_prompt or "",
            history=[],
            ctx=gw.sessions.tool_context(row, "u1"),
            user_message={"role": "user", "content": "weather?"},
            tools=tools.specs,
            allowed_tools=gw.sessions.roster.main.tools.allowed(tools, "cli"),
            on_tool=started.append,
        )
    # the live preview and the log name the real tool; a tool gone from its server answers an error
    assert started == ["tool_search", WEATHER]
    assert f"tool {WEATHER} session={session.id} ok=False via=tool_call" in caplog.messages
    gone = tool_results(fake_llm.anthropic_requests()[-1])[-1]
    assert gone["is_error"] and "no longer offered by any MCP server" in gone["content"]
    assert tools.deferred is not None and len(tools.deferred) == 60
    weather, delete = tools.spec(WEATHER), tools.spec("mcp_fake_delete_file")
    assert weather is not None and delete is not None
    assert (weather.server, dict(weather.annotations)) == ("fake", {"readOnlyHint": True})
    assert dict(delete.annotations) == {"destructiveHint": True}
    assert tools.spec("memory") is not None and tools.spec("tool_call") is None
    assert [s.name for s in tools.deferred.search("remove a file from the workspace", 1)] == [
        "mcp_fake_delete_file"
    ]


# ---- flush, compression, scheduled runs ---------------------------------------------------------
async def test_the_flush_reads_the_same_prefix_and_may_not_search(
    home: Path, fake_llm: FakeLLM
) -> None:
    configure(home, fake_llm, extra="session_reset: {mode: idle, idle_minutes: 30}\n")
    fake_llm.script(
        ToolCall("tool_call", {"name": WEATHER, "arguments": {"city": "Oslo"}}), answer_with_result
    )
    async with running(home, FakeClock(), background=True) as (gw, adapter):
        await ask(gw, adapter, "weather in Oslo?")
        await ask(gw, adapter, "I am Ada, I live in Oslo")
        save = {"action": "add", "target": "user", "content": "Lives in Oslo"}
        fake_llm.script(
            ToolCalls([ToolCall("tool_search", {"query": "notes"}), ToolCall("memory", save)]),
            Reply("saved"),
        )
        await gw.sessions.submit(inbound("/new"))
        await gw.lifecycle.flusher.wait_idle()  # type: ignore[union-attr]
    raws = fake_llm.anthropic_raw()
    bodies = fake_llm.anthropic_requests()
    (start,) = [i for i, b in enumerate(bodies) if last_user_text(b).startswith(FLUSH_MARK)]
    flush = [start, start + 1]  # the flush's call, then the one with its tool results
    assert len(bodies) == start + 2
    assert {raw_value(r, "tools") for r in raws} == {raw_value(raws[0], "tools")}
    assert {raw_value(raws[i], "system") for i in flush} == {raw_value(raws[0], "system")}
    searched, saved = tool_results(bodies[flush[1]])[-2:]
    assert searched["is_error"]
    assert searched["content"].startswith("Tool not available right now: 'tool_search'")
    assert "is_error" not in saved
    profiles = (home / "memories" / "people").glob("*.md")
    assert any("Lives in Oslo" in p.read_text() for p in profiles)


async def test_compression_keeps_the_tools_and_the_catalog(home: Path, fake_llm: FakeLLM) -> None:
    configure(
        home,
        fake_llm,
        window=7000,
        extra="""\
        session_reset: {mode: none}
        memory: {flush_enabled: false}
        agent: {compress_at: 0.5, keep_recent: 4}
        """,
    )
    filler = "We compared neighbourhoods, budgets and timing at length before deciding. " * 5

    def step(body: dict[str, Any]) -> Any:
        if "".join(b["text"] for b in body["system"]) == SUMMARY_SYSTEM:
            return Reply("The user plans a move to Lisbon.")
        return None

    async with running(home) as (gw, adapter):
        for n in range(12):
            fake_llm.script(step)
            await ask(gw, adapter, f"Turn {n}: {filler}")
            if any(b["system"][0]["text"] == SUMMARY_SYSTEM for b in fake_llm.anthropic_requests()):
                break
        else:
            raise AssertionError("no compression happened")
        fake_llm.script(
            ToolCall("tool_call", {"name": WEATHER, "arguments": {"city": "Lisbon"}}),
            answer_with_result,
        )
        reply = await ask(gw, adapter, "and the weather there?")
    assert "Forecast for Lisbon" in reply
    turns = [
        r
        for r, b in zip(fake_llm.anthropic_raw(), fake_llm.anthropic_requests(), strict=True)
        if b["system"][0]["text"] != SUMMARY_SYSTEM
    ]
    assert {raw_value(r, "tools") for r in turns} == {raw_value(turns[0], "tools")}
    sent = [t["name"] for t in json.loads(raw_value(turns[0], "tools"))]
    assert sent[-2:] == ["tool_search", "tool_call"]


async def test_a_scheduled_run_finds_and_calls_a_deferred_tool(
    home: Path, fake_llm: FakeLLM
) -> None:
    configure(home, fake_llm)
    clock = FakeClock()
    job = {"action": "create", "when": "1h", "prompt": "Post the Oslo forecast."}
    fake_llm.script(
        ToolCall("schedule", job),
        Reply("I'll post it in an hour."),
        ToolCall("tool_search", {"query": "weather forecast"}),
        ToolCall("tool_call", {"name": WEATHER, "arguments": {"city": "Oslo", "days": 1}}),
        answer_with_result,
    )
    async with running(home, clock, background=True) as (gw, adapter):
        await ask(gw, adapter, "in an hour, post the Oslo forecast")
        clock.advance(hours=1)
        assert await fire_jobs(gw)
    run = fake_llm.anthropic_requests()[2]
    # a run's tools: the chat's without schedule, and the same bridge
    assert [t["name"] for t in run["tools"]] == [*CORE[:-2], "tool_search", "tool_call"]
    forecast = "Forecast for Oslo: sunny, 18 °C, light wind for the next 1 days."
    assert forecast in adapter.sent[-1].text


def test_tools_list_marks_the_deferred_tools(
    home: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(
        home,
        fake_llm,
        extra="""\
        agent:
          tools_by_platform:
            slack: [memory]
        """,
    )
    assert main(["--home", str(home), "tools", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {
        line.split()[0]: line.split(None, 2)[1:] for line in out[1:] if line.startswith(("m", "s"))
    }
    assert rows["memory"] == ["built-in", "all"]
    where = "telegram, discord, web, cli, cron; deferred (tool search)"
    assert rows[WEATHER] == ["mcp:fake", where]
    assert (
        "60 tools deferred: new sessions find them with tool_search and call them with "
        "tool_call (tools.search: on)"
    ) in out


# ---- a reference server from npm ----------------------------------------------------------------
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """npm's reference MCP server, installed from npm's cache only (no network at test time):
    skipped when it is not cached, a failure in CI (.ci/run caches it)."""
    npm = shutil.which("npm")
    require(None if npm else "npm is not installed (apt-get install npm)")
    assert npm is not None
    prefix = tmp_path_factory.mktemp("npm")
    done = subprocess.run(
        [
            npm,
            "install",
            "--offline",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--prefix",
            str(prefix),
            EVERYTHING,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = prefix / "node_modules" / ".bin" / "mcp-server-everything"
    require(
        None
        if done.returncode == 0 and found.exists()
        else f"{EVERYTHING} is not in npm's cache (npm install it once): {done.stderr[-300:]}"
    )
    return found


async def test_a_reference_server_from_npm_behind_tool_search(
    home: Path, fake_llm: FakeLLM, everything: Path
) -> None:
    write_config(
        home,
        base_url=llm_url(fake_llm, "anthropic"),
        extra=textwrap.dedent(f"""\
        mcp_servers:
          everything:
            command: {everything}
            args: [stdio]
            connect_timeout_s: {CONNECT_S}
        tools:
          search: on
        """),
    )
    fake_llm.script(
        ToolCall("tool_search", {"query": "add two numbers", "limit": 1}),
        ToolCall("tool_call", {"name": "mcp_everything_get-sum", "arguments": {"a": "2"}}),
        ToolCall("tool_call", {"name": "mcp_everything_get-sum", "arguments": {"a": 2, "b": 3}}),
        answer_with_result,
    )
    adapter = RecordingAdapter()
    gw = gateway_for(home, [adapter])
    assert gw.mcp is not None
    await gw.mcp.start()
    try:
        assert gw.mcp.states["everything"].state == "up", gw.mcp.states["everything"].error
        reply = await ask(gw, adapter, "what is 2 + 3?")
        session = gw.store.active_session("cli:dm:c1")
        assert session is not None
        tools = gw.sessions.roster.main.tools.of(session)
    finally:
        await gw.close_tools()
        await gw.llm.close()
        gw.store.close()
    assert "The sum of 2 and 3 is 5." in reply
    first, second, third, _ = fake_llm.anthropic_requests()
    assert [t["name"] for t in first["tools"]] == [*CORE, "tool_search", "tool_call"]
    (found,) = answer_json(tool_results(second)[-1]["content"])["tools"]
    assert found["name"] == "mcp_everything_get-sum"
    assert found["parameters"]["required"] == ["a", "b"]
    invalid = tool_results(third)[-1]
    assert invalid["is_error"] and invalid["content"] == (
        "Invalid arguments for mcp_everything_get-sum: 'b' is a required property; a: '2' is "
        "not of type 'number'."
    )
    assert tools.deferred is not None and len(tools.deferred) >= 10
    summed = tools.spec("mcp_everything_get-sum")
    toggle = tools.spec("mcp_everything_toggle-simulated-logging")
    assert summed is not None and summed.annotations["readOnlyHint"] is True
    assert toggle is not None and toggle.annotations["readOnlyHint"] is False


async def test_the_bridge_works_on_the_openai_wire_too(home: Path, fake_llm: FakeLLM) -> None:
    configure(home, fake_llm, provider="openai")

    def answer(body: dict[str, Any]) -> Reply:
        return Reply(f"Here it is: {body['messages'][-1]['content']}")

    fake_llm.script(
        ToolCall("tool_search", {"query": "forecast for a city", "limit": 1}),
        ToolCall("tool_call", {"name": WEATHER, "arguments": {"city": "Lima"}}),
        answer,
    )
    async with running(home) as (gw, adapter):
        reply = await ask(gw, adapter, "weather in Lima?")
    assert "Forecast for Lima" in reply
    first, second, _ = fake_llm.openai_requests()
    assert [t["function"]["name"] for t in first["tools"]] == [*CORE, "tool_search", "tool_call"]
    (found,) = answer_json(second["messages"][-1]["content"])["tools"]
    assert found["name"] == WEATHER


# ---- switching models ---------------------------------------------------------------------------
def small_model(fake: FakeLLM) -> str:
    return textwrap.dedent(f"""\
        models_switch: everyone
        models:
          small:
            provider: openai
            name: gpt-small
            base_url: {fake.openai_base_url}
            api_key: test-key
            max_retries: 0
            context_window: 20000
        """)


def openai_tools(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body["tools"]]


async def test_a_model_switch_defers_by_the_new_model_s_context_window(
    home: Path, fake_llm: FakeLLM
) -> None:
    """`auto` at 2,000,000 tokens sends the 60 MCP tools; /model to a model of 20,000 rebuilds the
    prompt and splits the session's own tools (not the server's newer ones) again for its window,
    where 60 tools would take a third of it; the tools array then stays the same bytes, after a
    restart too."""
    configure(home, fake_llm, search="auto", window=2_000_000, extra=small_model(fake_llm))
    async with running(home) as (gw, adapter):
        await ask(gw, adapter, "hello")
    assert len(fake_llm.anthropic_requests()[-1]["tools"]) == 67  # 7 built-in (ask too), 60 MCP
    # the server has a new tool (v2) by the time of the switch: this session never sees it
    configure(
        home,
        fake_llm,
        search="auto",
        window=2_000_000,
        catalog=61,
        version="v2",
        extra=small_model(fake_llm),
    )
    async with running(home) as (gw, adapter):
        assert (await ask(gw, adapter, "/model small")).startswith("Switched to small")
        await ask(gw, adapter, "and now?")
        await ask(gw, adapter, "again")
        session = gw.store.active_session("cli:dm:c1")
        assert session is not None and session.prompt_rebuild_reason == "model_change"
    fake_llm.script(
        ToolCall("tool_search", {"query": "weather forecast work"}),
        lambda body: Reply(body["messages"][-1]["content"]),
    )
    async with running(home) as (gw, adapter):
        found = await ask(gw, adapter, "after a restart, find the forecast tools")
    first, *later = fake_llm.openai_requests()
    assert openai_tools(first) == [*CORE, "tool_search", "tool_call"]
    assert len(later) == 3 and all(r["tools"] == first["tools"] for r in later)
    assert {r["messages"][0]["content"] for r in later} == {first["messages"][0]["content"]}
    assert WEATHER in found and WEATHER + "_work" not in found
