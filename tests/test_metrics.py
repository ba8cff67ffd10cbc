"""Observability on the web listener: /metrics parsed by Prometheus' own text parser after real
turns against the fake LLM, /healthz, /readyz, /status (loopback only) and `gateway status`."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from gateway.config.settings import load_config
from gateway.events import AdapterHealth
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import build_gateway, platform_adapters
from gateway.telemetry.metrics import Metrics, State, cache_hit_ratio, error_kind
from gateway.telemetry.status_client import render_status
from tests.daemon_proc import WebChatClient
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM
from tests.helpers import closed_port, write_config

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
async def daemon(home: Path, fake_llm: FakeLLM) -> AsyncIterator[Daemon]:
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra="web:\n  port: 0\n  auth_token: ops-test-token-123\n",
    )
    config = load_config(home, env={})
    d = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


async def get(
    daemon: Daemon, path: str, headers: dict[str, str] | None = None
) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as http:
        async with http.get(
            f"http://127.0.0.1:{daemon.web_port}{path}", headers=headers or {}
        ) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


def ws_client(daemon: Daemon) -> WebChatClient:
    client = WebChatClient(daemon.web_port or 0)
    client.url += "&token=ops-test-token-123"
    return client


async def test_metrics_after_turns_parse_with_the_expected_series(
    daemon: Daemon, fake_llm: FakeLLM
) -> None:
    # the fake emulates Anthropic's prompt cache: the 2nd turn reads the 1st one's prefix
    fake_llm.cache = True
    async with ws_client(daemon) as tab:
        for text in ("hello", "and again"):
            await tab.say(text)
            reply = await tab.next("message")
            assert reply["kind"] == "reply"
    status, content_type, body = await get(daemon, "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    samples = parse(body)

    assert value(samples, "gateway_messages_in_total", platform="web", outcome="accepted") == 2
    assert value(samples, "gateway_messages_out_total", platform="web", kind="reply") == 2
    assert value(samples, "gateway_turns_total", platform="web", outcome="ok") == 2
    assert value(samples, "gateway_turn_duration_seconds_count", platform="web") == 2
    assert value(samples, "gateway_turn_duration_seconds_bucket", platform="web", le="+Inf") == 2

    used = fake_llm.usages
    assert len(used) == 2 and used[1].cache_read > 0
    expect = {
        "input": sum(u.input_tokens for u in used),
        "output": sum(u.output_tokens for u in used),
        "cache_read": sum(u.cache_read for u in used),
        "cache_write": sum(u.cache_creation for u in used),
    }
    for kind, total in expect.items():
        assert value(samples, "gateway_llm_tokens_total", model="claude-test", kind=kind) == total
    assert value(samples, "gateway_llm_calls_total", model="claude-test", purpose="turn") == 2
    ratio = expect["cache_read"] / (expect["input"] + expect["cache_read"] + expect["cache_write"])
    assert value(samples, "gateway_llm_cache_hit_ratio", model="claude-test") == pytest.approx(
        ratio
    )

    assert value(samples, "gateway_adapter_up", platform="web") == 1
    assert value(samples, "gateway_adapter_state", platform="web", state="running") == 1
    assert value(samples, "gateway_adapter_state", platform="web", state="backoff") == 0
    assert value(samples, "gateway_adapter_restarts_total", platform="web") == 0
    assert value(samples, "gateway_queue_depth") == 0
    assert value(samples, "gateway_turns_running") == 0
    assert value(samples, "gateway_outbound_pending") == 0
    assert value(samples, "gateway_sessions_active") == 1
    assert value(samples, "gateway_draining") == 0
    for outcome in ("done", "nothing", "failed"):
        assert value(samples, "gateway_flushes_total", outcome=outcome) == 0
    assert value(samples, "gateway_flush_backlog", state="pending") == 0


async def test_a_failed_turn_counts_as_an_error_by_kind(daemon: Daemon, fake_llm: FakeLLM) -> None:
    fake_llm.script(Fault(500))
    async with ws_client(daemon) as tab:
        await tab.say("hi")
        reply = await tab.next("message")
    assert reply["kind"] == "error"
    samples = parse((await get(daemon, "/metrics"))[2])
    assert value(samples, "gateway_turns_total", platform="web", outcome="error") == 1
    assert value(samples, "gateway_errors_total", kind="llm_unavailable") == 1
    assert value(samples, "gateway_messages_out_total", platform="web", kind="error") == 1
    assert ("gateway_turn_duration_seconds_count", frozenset({("platform", "web")})) not in samples


async def test_healthz_and_readyz(daemon: Daemon) -> None:
    status, _, body = await get(daemon, "/healthz")
    assert status == 200 and json.loads(body) == {"ok": True, "draining": False}
    status, _, body = await get(daemon, "/readyz")
    assert status == 200
    assert json.loads(body) == {
        "ready": True,
        "store": "ok",
        "draining": False,
        "model": "anthropic/claude-test",
        "adapters": {"web": "running"},
    }
    daemon.ops.draining = True
    status, _, body = await get(daemon, "/readyz")
    assert status == 503 and json.loads(body)["draining"] is True


async def test_status_is_for_loopback_clients_or_the_login_secret(daemon: Daemon) -> None:
    status, _, body = await get(daemon, "/status")
    data = json.loads(body)
    assert status == 200
    assert data["adapters"]["web"]["state"] == "running" and data["ready"] is True
    assert (data["model"], data["model_source"]) == ("anthropic/claude-test", "configured")
    assert render_status(data).splitlines()[1] == "model: anthropic/claude-test (configured)"
    assert {
        "sessions_active",
        "queued",
        "turns_running",
        "outbound_pending",
        "flush",
        "cache_hit_ratio",
        "uptime_s",
        "version",
        "pid",
    } <= set(data)
    proxied = {"X-Forwarded-For": "203.0.113.9"}
    assert (await get(daemon, "/status", headers=proxied))[0] == 401
    assert (
        await get(
            daemon, "/status", headers={**proxied, "Authorization": "Bearer ops-test-token-123"}
        )
    )[0] == 200


async def test_metrics_through_a_proxy_need_the_token(daemon: Daemon) -> None:
    proxied = {"X-Forwarded-For": "203.0.113.9"}
    assert (await get(daemon, "/metrics", headers=proxied))[0] == 401
    assert (await get(daemon, "/metrics", headers={**proxied, "Authorization": "Bearer wrong"}))[
        0
    ] == 401
    ok = await get(
        daemon, "/metrics", headers={**proxied, "Authorization": "Bearer ops-test-token-123"}
    )
    assert ok[0] == 200 and "gateway_adapter_up" in ok[2]


async def test_gateway_status_prints_what_the_daemon_reports(daemon: Daemon, home: Path) -> None:
    async with ws_client(daemon) as tab:
        await tab.say("hello")
        await tab.next("message")
    (home / "config.yaml").write_text(
        (home / "config.yaml").read_text().replace("port: 0", f"port: {daemon.web_port}")
    )
    gateway = str(Path(sys.executable).parent / "gateway")
    proc = await asyncio.create_subprocess_exec(
        gateway,
        "--home",
        str(home),
        "status",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert "· ready" in text
    assert "web       running" in text
    assert "sessions: 1 active · turns: 0 running, 0 queued · replies pending: 0" in text
    assert "prompt cache hit ratio:" in text
    assert "flush backlog: 0 pending, 0 running" in text


async def test_gateway_status_without_a_daemon_says_so(home: Path) -> None:
    gateway = str(Path(sys.executable).parent / "gateway")
    with closed_port() as port:
        (home / "config.yaml").write_text(f"web:\n  port: {port}\n")
        proc = await asyncio.create_subprocess_exec(
            gateway,
            "--home",
            str(home),
            "status",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert f"no daemon answers on 127.0.0.1:{port}" in err.decode()


def test_adapter_health_series_and_own_registry() -> None:
    metrics = Metrics()
    since = datetime(2026, 1, 1, tzinfo=UTC)
    metrics.watch(
        lambda: State(
            adapters={
                "telegram": AdapterHealth(
                    "telegram", state="backoff", restarts=3, last_error="boom"
                ),
                "web": AdapterHealth("web", state="running", connected_since=since),
            },
            queued=4,
            turns_running=1,
        )
    )
    metrics.message_in("telegram", "duplicate")
    samples = parse(metrics.render()[0].decode())
    assert value(samples, "gateway_adapter_up", platform="telegram") == 0
    assert value(samples, "gateway_adapter_state", platform="telegram", state="backoff") == 1
    assert value(samples, "gateway_adapter_restarts_total", platform="telegram") == 3
    assert value(samples, "gateway_adapter_up", platform="web") == 1
    assert (
        value(samples, "gateway_queue_depth") == 4 and value(samples, "gateway_turns_running") == 1
    )
    assert (
        value(samples, "gateway_messages_in_total", platform="telegram", outcome="duplicate") == 1
    )
    assert (
        REGISTRY.get_sample_value(
            "gateway_messages_in_total", {"platform": "telegram", "outcome": "duplicate"}
        )
        is None
    )
    # a second gateway in the same process starts from zero
    other = parse(Metrics().render()[0].decode())
    assert not [key for key in other if key[0] == "gateway_messages_in_total"]


def test_error_kinds_and_cache_ratio() -> None:
    from gateway.errors import LLMTimeout, PlatformUnavailable, RateLimited

    assert error_kind(LLMTimeout("x")) == "llm_timeout"
    assert error_kind(RateLimited("telegram", 3)) == "rate_limited"
    assert error_kind(PlatformUnavailable) == "platform_unavailable"
    tokens = {
        ("a", "input"): 10,
        ("a", "cache_read"): 30,
        ("b", "input"): 60,
        ("b", "cache_write"): 0,
    }
    assert cache_hit_ratio(tokens, "a") == 0.75
    assert cache_hit_ratio(tokens) == 0.3
    assert cache_hit_ratio({}) is None


def test_render_status_lists_adapter_errors() -> None:
    text = render_status(
        {
            "version": "0.1.0",
            "pid": 7,
            "uptime_s": 3725,
            "ready": False,
            "draining": False,
            "adapters": {"telegram": {"state": "backoff", "restarts": 2, "last_error": "HTTP 502"}},
            "sessions_active": 3,
            "queued": 1,
            "turns_running": 1,
            "outbound_pending": 4,
            "flush": {"pending": 2, "running": 0, "done": 5, "nothing": 1, "failed": 1},
            "cache_hit_ratio": 0.8123,
            "models": {"m": {"cache_hit_ratio": 0.8123}},
        }
    )
    assert text.splitlines() == [
        "agent-gateway 0.1.0 · pid 7 · up 1h02m · not ready",
        "adapters:",
        "  telegram  backoff · restarts 2 · last error: HTTP 502",
        "sessions: 3 active · turns: 1 running, 1 queued · replies pending: 4",
        "prompt cache hit ratio: 81% (m 81%)",
        "flush backlog: 2 pending, 0 running · done 5, nothing 1, failed 1",
    ]
