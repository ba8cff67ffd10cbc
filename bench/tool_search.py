"""Benchmark tool search: what a request costs with 0, 60 and 500 MCP tools, search off and on, and
how fast a search over 500 tools answers.

Run:  PYTHONPATH=. python bench/tool_search.py [--sizes 0,60,500] [--queries 400]

For each size and `tools.search` (off, on) the real gateway graph starts the fake MCP server
(tests/fakes/mcp_server.py) with that many of tests/fakes/mcp_catalog.py's tools (0: no server) and
sends one message over the Anthropic wire to the fake LLM. Printed: the tools in the first request,
their tokens and the request's input tokens (the fake's estimate: canonical JSON / 4). Then, on the
500-tool session's frozen catalog: the index build, and p50 / p95 / max of `tool_search` as the
agent loop runs it (rank + JSON answer) over realistic queries (goal: p95 < 5 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: tests/ holds fakes

from gateway.agent.tools.deferred import DeferredCatalog
from gateway.config.settings import load_config
from gateway.ops.wiring import build_gateway
from tests.fakes.llm import FakeLLM, estimate_tokens
from tests.helpers import RecordingAdapter, inbound, write_config

SERVER = Path(__file__).resolve().parent.parent / "tests" / "fakes" / "mcp_server.py"
QUERIES = (
    "forecast for a city",
    "send an email",
    "open an issue in a repository",
    "merge pull request",
    "convert dollars to euros",
    "what time is it in Tokyo",
    "turn off the lights",
    "play a song",
    "find a free slot for a meeting",
    "read a file",
    "restart the api service",
    "track my parcel",
    "translate into German",
    "search my notes",
    "stock price",
    "book a flight to Oslo",
    "delete the calendar event",
    "air quality and pollen",
    "add a todo for tomorrow",
    "query the analytics database",
)


@dataclass(frozen=True, slots=True)
class Figure:
    tools: int
    search: str
    sent: int
    tool_tokens: int
    input_tokens: int


async def one_request(
    root: Path, fake: FakeLLM, tools: int, search: str
) -> tuple[Figure, DeferredCatalog | None]:
    home = root / f"{tools}-{search}" / "home"
    home.mkdir(parents=True)
    spec = home.parent / "tools.json"
    spec.write_text(json.dumps({"tools": [], "catalog": tools}), encoding="utf-8")
    servers = (
        textwrap.dedent(f"""\
        mcp_servers:
          fake:
            command: {sys.executable}
            args: [{SERVER}, --tools, {spec}]
            connect_timeout_s: 60
        """)
        if tools
        else ""
    )
    write_config(home, base_url=fake.base_url, extra=servers + f"tools: {{search: {search}}}\n")
    adapter = RecordingAdapter()
    gw = build_gateway(load_config(home), env={}, adapters=[adapter], probe_ollama=False)
    try:
        if gw.mcp is not None:
            await gw.mcp.start()
        before = len(fake.anthropic_requests())
        await gw.sessions.submit(inbound("hello"))
        await adapter.wait_for(1, timeout=120)
        await gw.sessions.wait_idle()
        body = fake.anthropic_requests()[before]
        session = gw.store.active_session("cli:dm:c1")
        assert session is not None
        deferred = gw.sessions.roster.main.tools.of(session).deferred
    finally:
        await gw.close_tools()
        await gw.llm.close()
        gw.store.close()
    tool_tokens = sum(estimate_tokens(t) for t in body.get("tools", ()))
    return Figure(
        tools, search, len(body.get("tools", ())), tool_tokens, fake.usages[before].prompt_total
    ), deferred


def time_searches(catalog: DeferredCatalog, count: int) -> tuple[float, list[float]]:
    """The first search's time (it builds the index) and each later one's, in milliseconds."""
    started = time.perf_counter()
    catalog.answer({"query": QUERIES[0]})
    first = (time.perf_counter() - started) * 1000
    times = []
    for i in range(count):
        started = time.perf_counter()
        catalog.answer({"query": QUERIES[i % len(QUERIES)]})
        times.append((time.perf_counter() - started) * 1000)
    return first, times


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="0,60,500")
    parser.add_argument("--queries", type=int, default=400)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f}")
    figures: list[Figure] = []
    biggest: DeferredCatalog | None = None
    async with FakeLLM() as fake:
        with tempfile.TemporaryDirectory() as tmp:
            for tools in (int(n) for n in args.sizes.split(",")):
                for search in ("off", "on"):
                    figure, deferred = await one_request(Path(tmp), fake, tools, search)
                    figures.append(figure)
                    if deferred is not None and (biggest is None or len(deferred) > len(biggest)):
                        biggest = deferred
    print(
        f"\n{'MCP tools':>9}  {'search':<6}  {'tools sent':>10}  {'tool tokens':>11}  "
        f"{'request tokens':>14}"
    )
    for f in figures:
        print(
            f"{f.tools:>9}  {f.search:<6}  {f.sent:>10}  {f.tool_tokens:>11,}  "
            f"{f.input_tokens:>14,}"
        )
    if biggest is not None:
        first, times = time_searches(biggest, args.queries)
        p95 = statistics.quantiles(times, n=20)[-1]
        print(
            f"\ntool_search over {len(biggest)} tools: first search (builds the index) "
            f"{first:.2f} ms; {len(times)} searches: p50 {statistics.median(times):.3f} ms, "
            f"p95 {p95:.3f} ms, max {max(times):.3f} ms"
        )
        for query in QUERIES[:5]:
            print(f"  {query!r}: {', '.join(s.name for s in biggest.search(query, 3))}")


if __name__ == "__main__":
    asyncio.run(main())
