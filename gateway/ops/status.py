"""Operations routes on the web listener: `/healthz`, `/readyz`, `/metrics`, and `/status` (who may
read which is decided in gateway/ops/web_guard.py).

It reads the daemon's state (store, supervisor, metrics) and never changes it. `/status` is the data
behind `gateway status`; the same snapshot gives systemd its one-line `STATUS=`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from aiohttp import web

from gateway.errors import StoreError
from gateway.events import AdapterHealth
from gateway.llm.factory import UnconfiguredLLM, model_problem
from gateway.llm.types import LLMClient
from gateway.scheduling.jobstore import JobStore
from gateway.store.database import Store
from gateway.store.rows import iso
from gateway.telemetry.logs import redact_tree
from gateway.telemetry.metrics import TOKEN_KINDS, Metrics, State, cache_hit_ratio

Health = Callable[[], Mapping[str, AdapterHealth]]


def package_version() -> str:
    try:
        return version("agent-gateway")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class UsageTally:
    """Token and call totals from the `llm_calls` log, read incrementally (only rows newer than the
    last read)."""

    last_id: int = 0
    tokens: dict[tuple[str, str], int] = field(default_factory=dict)
    calls: dict[tuple[str, str], int] = field(default_factory=dict)

    def update(self, store: Store) -> None:
        rows = store.all(
            "SELECT id, model, purpose, input_tokens, output_tokens, cache_read_tokens,"
            " cache_write_tokens FROM llm_calls WHERE id > ? ORDER BY id",
            (self.last_id,),
        )
        for row in rows:
            model = row["model"]
            self.calls[(model, row["purpose"])] = self.calls.get((model, row["purpose"]), 0) + 1
            for kind in TOKEN_KINDS:
                column = f"{kind}_tokens"
                self.tokens[(model, kind)] = self.tokens.get((model, kind), 0) + int(
                    row[column] or 0
                )
            self.last_id = row["id"]


class Ops:
    """The daemon's read-only view for probes, scrapes and `gateway status`."""

    def __init__(
        self,
        *,
        store: Store,
        metrics: Metrics,
        health: Health,
        wall: Callable[[], float] = time.time,
        model: LLMClient | None = None,
        redact: Callable[[str], str] = str,
        model_source: str = "",
    ) -> None:
        self.store = store
        self.redact = redact  # an adapter's last error can quote a URL with its token in it
        self.metrics = metrics
        self.health = health
        self.model = model
        self.model_source = model_source  # how it was chosen: configured, auto-detected from …
        self.wall = wall
        self.started_at = wall()
        self.draining = False
        self.tally = UsageTally()
        # Who may read what /readyz holds beyond ready or
        # not: the daemon sets its web guard's check here.
        self.operator: Callable[[web.Request], bool] = lambda request: False
        metrics.watch(self.state)

    # ------------------------------------------------------------------ state
    def state(self) -> State:
        self.tally.update(self.store)
        inbound = self._counts(
            "SELECT status, COUNT(*) FROM inbound WHERE status IN ('pending', 'running')"
            " GROUP BY status"
        )
        flush = self._counts(
            "SELECT flush_state, COUNT(*) FROM sessions WHERE flush_state IS NOT NULL"
            " GROUP BY flush_state"
        )
        outbound = self.store.one("SELECT COUNT(*) FROM outbound WHERE status = 'pending'")
        active = self.store.one("SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL")
        return State(
            adapters=dict(self.health()),
            tokens=dict(self.tally.tokens),
            llm_calls=dict(self.tally.calls),
            flushes={k: v for k, v in flush.items() if k in ("done", "nothing", "failed")},
            flush_backlog={k: v for k, v in flush.items() if k in ("pending", "running")},
            queued=inbound.get("pending", 0),
            turns_running=inbound.get("running", 0),
            outbound_pending=int(outbound[0]) if outbound else 0,
            sessions_active=int(active[0]) if active else 0,
            draining=self.draining,
            started_at=self.started_at,
        )

    def _counts(self, sql: str) -> dict[str, int]:
        return {str(row[0]): int(row[1]) for row in self.store.all(sql)}

    def store_ok(self) -> bool:
        """The store answers and takes writes (a full disk or a broken file leaves reads working);
        another process holding the write lock for a moment is no outage."""
        if self.store.health.reason not in (None, "busy"):
            return False
        try:
            self.store.one("SELECT 1")
        except StoreError:
            return False
        return True

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready = a message sent now would be answered: the store answers, the daemon is not
        draining, a model is configured (or auto-detected) and every adapter is running. The model
        is not called: a probe every few seconds would cost tokens and rate limit, and a provider's
        outage is a turn error, not a restart."""
        store = self.store_ok()
        adapters = {name: h.state for name, h in sorted(self.health().items())}
        model = model_name(self.model)
        ready = (
            store
            and not self.draining
            and model is not None
            and all(state == "running" for state in adapters.values())
        )
        return ready, {
            "ready": ready,
            "store": "ok" if store else self._store_problem(),
            "draining": self.draining,
            "model": model,
            "adapters": adapters,
        }

    def _store_problem(self) -> str:
        problem = self.store.health.problem
        return f"unavailable: {problem}" if problem else "unavailable"

    def snapshot(self) -> dict[str, Any]:
        """Everything `gateway status` prints, as JSON-ready data."""
        state = self.state()
        ready, _ = self.readiness()
        models = sorted({m for m, _ in state.tokens})
        data = {
            "version": package_version(),
            "pid": os.getpid(),
            "started_at": state.started_at,
            "model": model_name(self.model),
            "model_source": self.model_source,
            "model_problem": model_problem(self.model),
            "uptime_s": round(self.wall() - state.started_at, 1),
            "ready": ready,
            "draining": state.draining,
            "adapters": {name: _health_json(h) for name, h in sorted(state.adapters.items())},
            "sessions_active": state.sessions_active,
            "queued": state.queued,
            "turns_running": state.turns_running,
            "outbound_pending": state.outbound_pending,
            "flush": {
                "pending": state.flush_backlog.get("pending", 0),
                "running": state.flush_backlog.get("running", 0),
                **{k: state.flushes.get(k, 0) for k in ("done", "nothing", "failed")},
            },
            "jobs": self.jobs(),
            "cache_hit_ratio": cache_hit_ratio(state.tokens),
            "models": {
                m: {
                    "cache_hit_ratio": cache_hit_ratio(state.tokens, m),
                    **{k: state.tokens.get((m, k), 0) for k in TOKEN_KINDS},
                }
                for m in models
            },
        }
        # every string, not only the errors we know of
        redacted: dict[str, Any] = redact_tree(data, self.redact)
        return redacted

    def jobs(self) -> dict[str, Any]:
        """Scheduled jobs: how many of each state, runs in flight, the last day's outcomes, the next
        one due."""
        jobs = JobStore(self.store)
        counts = jobs.job_counts(since=datetime.fromtimestamp(self.wall() - 86_400, UTC))
        nxt = jobs.next_job()
        return {
            **{state: counts.get(f"jobs_{state}", 0) for state in ("active", "stopped")},
            "running": counts.get("runs_running", 0),
            "last_24h": {
                status: counts.get(f"runs_{status}", 0)
                for status in ("done", "failed", "missed", "interrupted")
            },
            "next": None
            if nxt is None
            else {
                "id": nxt.id,
                "name": nxt.name,
                "at": nxt.next_run_at,
                "posts_to": f"{nxt.platform}:{nxt.chat_id}",
            },
        }

    def status_line(self) -> str:
        """The one line systemd shows in `systemctl status` (STATUS=)."""
        health = self.health()
        parts = [f"{name} {h.state}" for name, h in sorted(health.items())] or ["no adapters"]
        line = ", ".join(parts)
        try:
            state = self.state()
        except StoreError:
            return f"{line}; store unavailable"
        ratio = cache_hit_ratio(state.tokens)
        cache = f"; cache {ratio:.0%}" if ratio is not None else ""
        drain = "draining; " if self.draining else ""
        return (
            f"{drain}{line}; {state.sessions_active} sessions; queue {state.queued}; "
            f"{state.turns_running} running{cache}"
        )

    # ------------------------------------------------------------------ routes
    def attach(self, app: web.Application) -> None:
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/status", self._status)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "draining": self.draining})

    async def _readyz(self, request: web.Request) -> web.Response:
        ready, body = self.readiness()
        if not self.operator(request):
            body = public_readiness(body)
        return web.json_response(body, status=200 if ready else 503)

    # Who may read these is decided in one place for every route: gateway/ops/web_guard.py.
    async def _metrics(self, request: web.Request) -> web.Response:
        body, content_type = self.metrics.render()
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())


def model_name(llm: LLMClient | None) -> str | None:
    """`provider/model`, or None when no model is configured (the stand-in that answers every turn
    with a hint)."""
    if llm is None or isinstance(llm, UnconfiguredLLM):
        return None
    return f"{llm.provider}/{llm.model}"


def public_readiness(body: Mapping[str, Any]) -> dict[str, Any]:
    """/readyz for anyone who is not an operator: ready or not and why, without the model's name (a
    fine-tuned model's name carries the organisation's) or the store's error text."""
    return {
        **body,
        "model": None if body.get("model") is None else "configured",
        "store": "ok" if body.get("store") == "ok" else "unavailable",
    }


def _health_json(health: AdapterHealth) -> dict[str, Any]:
    data = asdict(health)
    for key in ("connected_since", "last_inbound_at"):
        data[key] = iso(data[key])
    data["extra"] = dict(health.extra)
    return data
