"""What the dashboard shows, as JSON-ready data: the model, each adapter's health, sessions, memory
flushes, pairing requests, requests waiting for a person's answer and scheduled jobs. Read-only;
every text that may hold a secret passes the redactor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gateway.access.pairing import PairingBook
from gateway.approvals.book import ApprovalBook
from gateway.events import AdapterHealth
from gateway.scheduling import text
from gateway.scheduling.jobstore import JobStore
from gateway.store.database import Store
from gateway.store.rows import iso

Redact = Callable[[str], str]
SESSIONS_SHOWN = 50
FLUSHES_SHOWN = 30
JOBS_SHOWN = 50


@dataclass(frozen=True, slots=True)
class ModelView:
    """The model that answers and how it was chosen (None: no model; every turn gets the hint to fix
    it), and why the chosen one cannot answer when that is the case (its key variable is not
    set)."""

    name: str | None
    source: str
    problem: str | None = None


def adapters(
    health: Mapping[str, AdapterHealth], now: datetime, redact: Redact
) -> list[dict[str, Any]]:
    out = []
    for name, h in sorted(health.items()):
        up = h.connected_since is not None and h.state == "running"
        out.append(
            {
                "platform": name,
                "state": h.state,
                "uptime_s": round((now - h.connected_since).total_seconds())
                if up and h.connected_since
                else None,
                "connected_since": iso(h.connected_since),
                "last_inbound_at": iso(h.last_inbound_at),
                "reconnects": h.restarts,
                "last_error": redact(h.last_error) if h.last_error else None,
            }
        )
    return out


def sessions(store: Store) -> dict[str, Any]:
    """Active sessions: how many per platform and per agent, and the most recently used ones with
    their agent, bot account, tokens and cache (the page groups them by agent)."""
    per_platform = {
        str(r[0]): int(r[1])
        for r in store.all(
            "SELECT platform, COUNT(*) FROM sessions WHERE "
            "ended_at IS NULL GROUP BY platform ORDER BY platform"
        )
    }
    per_agent = {
        str(r[0]): int(r[1])
        for r in store.all(
            "SELECT agent, COUNT(*) FROM sessions WHERE ended_at IS NULL GROUP BY agent"
            " ORDER BY agent"
        )
    }
    rows = store.all(
        "SELECT s.id, s.key, s.platform, s.chat_type, s.user_id, s.created_at, s.model,"
        " s.agent, s.account,"
        " COALESCE(s.last_user_at, s.created_at) AS last_activity, s.input_tokens, s.output_tokens,"
        " s.cache_read_tokens, s.cache_write_tokens,"
        " (SELECT COUNT(*) FROM messages m WHERE m.session_id "
        "= s.id AND m.role IN ('user', 'assistant')"
        "  AND m.active > 0) AS messages"
        " FROM sessions s WHERE s.ended_at IS NULL ORDER BY last_activity DESC LIMIT ?",
        (SESSIONS_SHOWN,),
    )
    listed = []
    for r in rows:
        prompt = r["input_tokens"] + r["cache_read_tokens"] + r["cache_write_tokens"]
        listed.append(
            {
                "id": r["id"],
                "key": r["key"],
                "platform": r["platform"],
                "chat_type": r["chat_type"],
                "agent": r["agent"],
                "account": r["account"],
                "user_id": r["user_id"],
                "started_at": r["created_at"],
                "last_activity": r["last_activity"],
                "model": r["model"],
                "messages": r["messages"],
                "input_tokens": r["input_tokens"],
                "output_tokens": r["output_tokens"],
                "cache_read_tokens": r["cache_read_tokens"],
                "cache_write_tokens": r["cache_write_tokens"],
                "cache_hit_ratio": round(r["cache_read_tokens"] / prompt, 4) if prompt else None,
            }
        )
    return {
        "active": sum(per_platform.values()),
        "per_platform": per_platform,
        "per_agent": per_agent,
        "recent": listed,
    }


def flushes(store: Store, redact: Redact) -> dict[str, Any]:
    """The flush log: each ended session's memory flush, newest first (done, nothing to save,
    failed + why)."""
    counts = {
        str(r[0]): int(r[1])
        for r in store.all(
            "SELECT flush_state, COUNT(*) FROM sessions WHERE "
            "flush_state IS NOT NULL GROUP BY flush_state"
        )
    }
    rows = store.all(
        "SELECT id, key, platform, ended_at, end_reason, "
        "flush_state, flush_attempts, flush_error, flush_finished_at"
        " FROM sessions WHERE flush_state IS NOT NULL ORDER BY "
        "COALESCE(flush_finished_at, ended_at) DESC, id DESC"
        " LIMIT ?",
        (FLUSHES_SHOWN,),
    )
    log = [
        {
            "session": r["id"],
            "key": r["key"],
            "platform": r["platform"],
            "ended_at": r["ended_at"],
            "end_reason": r["end_reason"],
            "state": r["flush_state"],
            "attempts": r["flush_attempts"],
            "error": redact(r["flush_error"]) if r["flush_error"] else None,
            "finished_at": r["flush_finished_at"],
        }
        for r in rows
    ]
    return {"counts": counts, "log": log}


def pairing(book: PairingBook, now: datetime) -> dict[str, Any]:
    return {
        "pending": [
            {
                "platform": p.platform,
                "user_id": p.user_id,
                "user_name": p.user_name,
                "asked_at": iso(p.created_at),
                "expires_at": iso(p.expires_at),
            }
            for p in book.pending(now)
        ],
        "approved": [
            {
                "platform": a.platform,
                "user_id": a.user_id,
                "user_name": a.user_name,
                "approved_at": iso(a.approved_at),
                "approved_by": a.approved_by,
            }
            for a in book.approved()
        ],
        "locked": [
            {"platform": lock.platform, "until": iso(lock.locked_until)}
            for lock in book.lockouts(now)
            if lock.locked_until is not None
        ],
    }


def approvals(store: Store, redact: Redact) -> list[dict[str, Any]]:
    """Requests waiting for a person: a tool call to allow or deny, or an `ask` question
    (docs/tools.md)."""
    return [
        {
            "id": r.id,
            "kind": r.kind,
            "platform": r.platform,
            "chat_id": r.chat_id,
            "requester": r.requester,
            "requester_name": r.requester_name,
            "tool": r.tool,
            "request": redact(r.request)[:500],
            "code": r.code,
            "asked_at": r.created_at,
            "expires_at": r.expires_at,
        }
        for r in ApprovalBook(store).pending()
    ]


def jobs(store: Store) -> dict[str, Any] | None:
    """Scheduled jobs (gateway/scheduling), active ones first, with how each last run ended; None
    when nobody has set one up yet (the page leaves the panel out)."""
    found = JobStore(store).list_jobs(limit=JOBS_SHOWN)
    if not found:
        return None
    listed = []
    for job in found:
        runs = JobStore(store).runs_of(job.id, limit=1)
        listed.append(
            {
                "id": job.id,
                "title": job.title,
                "prompt": job.prompt[:200],
                "when": text.timing(job),
                "chat": text.where(job.chat),
                "state": job.state,
                "state_reason": job.state_reason,
                "next_run_at": job.next_run_at if job.state == "active" else None,
                "last_run_at": job.last_run_at,
                "runs": job.runs,
                "last_run": runs[0].status if runs else None,
            }
        )
    return {"jobs": listed}
