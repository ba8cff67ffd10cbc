"""Prometheus metrics in the gateway's own registry (never the process-global one, so tests and two
gateways in one process do not collide).

Events the core reports as they happen (messages, turns, errors) are counters kept here; the rest
(adapter health, queue depth, token totals, flush outcomes) is read from the daemon's state at
scrape time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.events import AdapterHealth

TURN_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
ADAPTER_STATES = ("starting", "running", "backoff", "down", "stopped")
FLUSH_OUTCOMES = ("done", "nothing", "failed")


@dataclass(frozen=True, slots=True)
class State:
    """What the daemon knows at scrape time. Token and flush totals come from the database, so they
    survive restarts and only grow (flush outcomes are terminal states)."""

    adapters: Mapping[str, AdapterHealth] = field(default_factory=dict)
    # (model, kind) → total
    tokens: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # (model, purpose) → calls
    llm_calls: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # done / nothing / failed → count
    flushes: Mapping[str, int] = field(default_factory=dict)
    # pending / running → count
    flush_backlog: Mapping[str, int] = field(default_factory=dict)
    queued: int = 0
    turns_running: int = 0
    outbound_pending: int = 0
    sessions_active: int = 0
    draining: bool = False
    started_at: float = 0.0


def cache_hit_ratio(
    tokens: Mapping[tuple[str, str], int], model: str | None = None
) -> float | None:
    """Share of prompt tokens read from the provider's
    cache (of one model, or all); None before any call."""

    def total(kind: str) -> int:
        return sum(n for (m, k), n in tokens.items() if k == kind and (model is None or m == model))

    prompt = total("input") + total("cache_read") + total("cache_write")
    return total("cache_read") / prompt if prompt else None


def error_kind(exc: BaseException | type[BaseException]) -> str:
    """`LLMTimeout` → `llm_timeout`, `RateLimited` → `rate_limited`: a stable label from the
    exception class."""
    name = exc.__name__ if isinstance(exc, type) else type(exc).__name__
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


class Metrics:
    """The gateway's counters and the scrape-time view; `render()` is what `/metrics` serves."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages_in = Counter(
            "gateway_messages_in",
            "Messages handed in by adapters, by outcome of submit",
            ["platform", "outcome"],
            registry=r,
        )
        self.messages_out = Counter(
            "gateway_messages_out",
            "Chunks delivered to a platform",
            ["platform", "kind"],
            registry=r,
        )
        self.turns = Counter(
            "gateway_turns", "Agent turns finished, by outcome", ["platform", "outcome"], registry=r
        )
        self.turn_seconds = Histogram(
            "gateway_turn_duration_seconds",
            "Time from turn start to reply stored",
            ["platform"],
            buckets=TURN_BUCKETS,
            registry=r,
        )
        self.errors = Counter("gateway_errors", "Errors by kind", ["kind"], registry=r)
        self._source: Callable[[], State] | None = None
        r.register(_StateCollector(self))

    # ------------------------------------------------------------------ events
    def message_in(self, platform: str, outcome: str) -> None:
        self.messages_in.labels(platform, outcome).inc()

    def message_out(self, platform: str, kind: str) -> None:
        self.messages_out.labels(platform, kind).inc()

    def turn(self, platform: str, outcome: str, seconds: float) -> None:
        self.turns.labels(platform, outcome).inc()
        if outcome == "ok":
            self.turn_seconds.labels(platform).observe(max(seconds, 0.0))

    def error(self, kind: str) -> None:
        self.errors.labels(kind).inc()

    # ------------------------------------------------------------------ scrape time
    def watch(self, source: Callable[[], State]) -> None:
        """Where the scrape-time families come from (the daemon's ops view)."""
        self._source = source

    def state(self) -> State | None:
        return self._source() if self._source is not None else None

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _StateCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # families vary with the config; nothing to pre-register

    def collect(self) -> Iterator[Metric]:
        state = self.metrics.state()
        if state is None:
            return
        yield from _adapter_families(state.adapters)
        yield from _llm_families(state)
        flushes = CounterMetricFamily(
            "gateway_flushes", "Pre-reset memory flushes finished, by outcome", labels=["outcome"]
        )
        for outcome in FLUSH_OUTCOMES:
            flushes.add_metric([outcome], state.flushes.get(outcome, 0))
        yield flushes
        backlog = GaugeMetricFamily(
            "gateway_flush_backlog", "Sessions waiting for (or in) their flush", labels=["state"]
        )
        for name in ("pending", "running"):
            backlog.add_metric([name], state.flush_backlog.get(name, 0))
        yield backlog
        for name, doc, value in (
            ("gateway_queue_depth", "Stored messages waiting for their turn", state.queued),
            ("gateway_turns_running", "Turns in progress", state.turns_running),
            (
                "gateway_outbound_pending",
                "Reply chunks recorded but not yet delivered",
                state.outbound_pending,
            ),
            ("gateway_sessions_active", "Sessions not ended", state.sessions_active),
            ("gateway_draining", "1 while the daemon drains for shutdown", int(state.draining)),
            ("gateway_start_time_seconds", "Unix time the daemon started", state.started_at),
        ):
            yield GaugeMetricFamily(name, doc, value=value)


def _adapter_families(adapters: Mapping[str, AdapterHealth]) -> Iterator[Metric]:
    up = GaugeMetricFamily(
        "gateway_adapter_up", "1 if the adapter is connected and serving", labels=["platform"]
    )
    state = GaugeMetricFamily(
        "gateway_adapter_state",
        "The adapter's current state (1 for the current one)",
        labels=["platform", "state"],
    )
    restarts = CounterMetricFamily(
        "gateway_adapter_restarts", "Adapter restarts by the supervisor", labels=["platform"]
    )
    for platform, health in sorted(adapters.items()):
        up.add_metric([platform], 1 if health.state == "running" else 0)
        for name in ADAPTER_STATES:
            state.add_metric([platform, name], 1 if health.state == name else 0)
        restarts.add_metric([platform], health.restarts)
    yield from (up, state, restarts)


def _llm_families(state: State) -> Iterator[Metric]:
    tokens = CounterMetricFamily(
        "gateway_llm_tokens",
        "LLM tokens by model and kind (input excludes cache)",
        labels=["model", "kind"],
    )
    for (model, kind), n in sorted(state.tokens.items()):
        tokens.add_metric([model, kind], n)
    yield tokens
    calls = CounterMetricFamily(
        "gateway_llm_calls", "LLM requests by model and purpose", labels=["model", "purpose"]
    )
    for (model, purpose), n in sorted(state.llm_calls.items()):
        calls.add_metric([model, purpose], n)
    yield calls
    ratio = GaugeMetricFamily(
        "gateway_llm_cache_hit_ratio",
        "cache_read / (input + cache_read + cache_write) since the database was created",
        labels=["model"],
    )
    for model in sorted({m for m, _ in state.tokens}):
        value = cache_hit_ratio(state.tokens, model)
        if value is not None:
            ratio.add_metric([model], value)
    yield ratio
