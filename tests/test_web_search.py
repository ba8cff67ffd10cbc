"""web_search against fakes of the three providers' APIs (tests/fakes/websearch.py), through the
real gateway graph: the key from the environment, results as the model reads them, refusals as tool
errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.ops.wiring import build_gateway
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.websearch import BRAVE_KEY, TAVILY_KEY, FakeWebSearch
from tests.helpers import RecordingAdapter, inbound, llm_url, write_config


@pytest.fixture
async def search_api() -> AsyncIterator[FakeWebSearch]:
    async with FakeWebSearch() as fake:
        yield fake


def _section(provider: str, fake: FakeWebSearch) -> str:
    base = fake.brave_base_url if provider == "brave" else fake.base_url
    key = {
        "brave": "\n            api_key_env: BRAVE_API_KEY",
        "tavily": "\n            api_key_env: TAVILY_API_KEY",
        "searxng": "",
    }[provider]
    return f"""\
        tools:
          web_search:
            provider: {provider}
            base_url: {base}{key}
        """


async def _search(
    home: Path,
    llm: FakeLLM,
    provider: str,
    fake: FakeWebSearch,
    query: str,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    write_config(home, base_url=llm_url(llm, "anthropic"), extra=_section(provider, fake))
    adapter = RecordingAdapter()
    llm.script(ToolCall("web_search", {"query": query, "count": 2}), Reply("found"))
    env = {"BRAVE_API_KEY": BRAVE_KEY, "TAVILY_API_KEY": TAVILY_KEY} if env is None else env
    gw = build_gateway(load_config(home), env=env, adapters=[adapter], probe_ollama=False)
    try:
        await gw.sessions.submit(inbound("search please"))
        await adapter.wait_for(1)
        await gw.sessions.wait_idle()
    finally:
        await gw.close_tools()
        await gw.llm.close()
        gw.store.close()
    first, second = llm.anthropic_requests()[-2:]
    assert "web_search" in [t["name"] for t in first["tools"]]
    return next(
        b
        for m in second["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )


@pytest.mark.parametrize("provider", ["searxng", "brave", "tavily"])
async def test_each_provider_returns_results_to_the_model(
    provider: str, home: Path, fake_llm: FakeLLM, search_api: FakeWebSearch
) -> None:
    result = await _search(home, fake_llm, provider, search_api, "tidal power")
    text = result["content"]
    assert not result.get("is_error")
    assert text.startswith(f'<untrusted_content source="a web search ({provider})">')
    assert "1. Tidal power - Wikipedia\n   https://en.wikipedia.org/wiki/Tidal_power" in text
    assert "2. Orkney tidal turbines" in text and "Green tea" not in text
    assert "<strong>" not in text
    (call,) = search_api.calls_to(provider)
    if provider == "tavily":
        assert call.body == {"query": "tidal power", "max_results": 2, "search_depth": "basic"}
    elif provider == "brave":
        assert call.query == {"q": "tidal power", "count": "2"}
    else:
        assert call.query == {"q": "tidal power", "format": "json"}


async def test_a_rate_limit_is_a_tool_error(
    home: Path, fake_llm: FakeLLM, search_api: FakeWebSearch
) -> None:
    search_api.fail("brave", Fault(429, headers={"Retry-After": "7"}))
    result = await _search(home, fake_llm, "brave", search_api, "tidal")
    assert result["is_error"] and "rate-limiting searches for 7 s" in result["content"]


async def test_a_wrong_key_is_reported_without_the_key(
    home: Path, fake_llm: FakeLLM, search_api: FakeWebSearch
) -> None:
    result = await _search(
        home, fake_llm, "tavily", search_api, "tidal", env={"TAVILY_API_KEY": "tvly-wrong-secret"}
    )
    assert result["is_error"] and "refused the API key" in result["content"]
    assert "tvly-wrong-secret" not in result["content"]


async def test_searxng_without_json_format_says_so(home: Path, fake_llm: FakeLLM) -> None:
    async with FakeWebSearch(searxng_json=False) as fake:
        result = await _search(home, fake_llm, "searxng", fake, "tidal")
    assert result["is_error"] and "json format" in result["content"]


async def test_web_search_is_off_until_configured(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"))
    gw = build_gateway(load_config(home), env={}, probe_ollama=False)
    try:
        assert gw.tool_names("telegram")[-3:] == ["web_fetch", "schedule", "ask"]
        assert "web_search" not in gw.tool_names("telegram")
    finally:
        await gw.close_tools()
        await gw.llm.close()
        gw.store.close()
