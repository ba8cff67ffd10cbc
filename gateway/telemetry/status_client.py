"""`gateway status`'s side of `/status` (gateway/ops/status.py serves it): ask the daemon on this
machine and render its answer. Standard library only, so the command starts in a blink."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any


def connect_host(host: str) -> str:
    """Where a local client connects to reach a listener
    bound to `host` (wildcards mean loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def fetch_status(
    host: str, port: int, *, timeout: float = 5.0, secret: str | None = None
) -> dict[str, Any]:
    """GET /status from the daemon on this machine (raises OSError when nothing answers). The login
    secret, when given, is sent as Bearer: a listener bound to a non-loopback address sees this
    machine as any other peer."""
    url = f"http://{connect_host(host)}:{port}/status"
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {secret}"} if secret else {}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            data: dict[str, Any] = json.load(resp)
    except urllib.error.HTTPError as exc:
        raise OSError(f"HTTP {exc.code} from {url}") from None
    except (urllib.error.URLError, ValueError) as exc:
        raise OSError(str(getattr(exc, "reason", exc))) from None
    return data


def render_status(data: Mapping[str, Any]) -> str:
    """The human view of `/status`."""
    state = "draining" if data.get("draining") else ("ready" if data.get("ready") else "not ready")
    lines = [
        (
            f"agent-gateway {data.get('version')} · pid "
            f"{data.get('pid')} · up {_duration(data.get('uptime_s'))}"
            f" · {state}"
        )
    ]
    if "model" in data:  # a daemon from before the model was reported says nothing here
        how = f" ({data['model_source']})" if data.get("model_source") else ""
        lines.append(
            f"model: {data['model']}{how}"
            if data["model"]
            else f"model: {data['model_source']}, but it cannot answer: {data['model_problem']}"
            if data.get("model_problem")
            else "model: none, so every message gets an error (`gateway init` sets one up)"
        )
    lines.append("adapters:")
    adapters: Mapping[str, Mapping[str, Any]] = data.get("adapters") or {}
    for name, h in adapters.items():
        bits = [f"  {name:<9} {h.get('state', '?'):<8}"]
        if h.get("connected_since"):
            bits.append(f"since {h['connected_since']}")
        if h.get("last_inbound_at"):
            bits.append(f"last message {h['last_inbound_at']}")
        if h.get("restarts"):
            bits.append(f"restarts {h['restarts']}")
        if h.get("last_error"):
            bits.append(f"last error: {h['last_error']}")
        lines.append(
            " · ".join([bits[0].rstrip(), *bits[1:]]) if len(bits) > 1 else bits[0].rstrip()
        )
    if not adapters:
        lines.append("  (none)")
    lines.append(
        f"sessions: {data.get('sessions_active', 0)} active "
        f"· turns: {data.get('turns_running', 0)} running,"
        f" {data.get('queued', 0)} queued · replies pending: {data.get('outbound_pending', 0)}"
    )
    ratio = data.get("cache_hit_ratio")
    cache = f"{ratio:.0%}" if isinstance(ratio, (int, float)) else "no calls yet"
    per_model = ", ".join(
        f"{m} {v['cache_hit_ratio']:.0%}"
        for m, v in (data.get("models") or {}).items()
        if isinstance(v.get("cache_hit_ratio"), (int, float))
    )
    lines.append(f"prompt cache hit ratio: {cache}{f' ({per_model})' if per_model else ''}")
    flush = data.get("flush") or {}
    lines.append(
        f"flush backlog: {flush.get('pending', 0)} pending, {flush.get('running', 0)} running"
        f" · done {flush.get('done', 0)}, nothing "
        f"{flush.get('nothing', 0)}, failed {flush.get('failed', 0)}"
    )
    if data.get("jobs") is not None:
        lines.append(_jobs_line(data["jobs"]))
    return "\n".join(lines)


def _jobs_line(jobs: Mapping[str, Any]) -> str:
    line = f"jobs: {jobs.get('active', 0)} active, {jobs.get('running', 0)} running"
    if jobs.get("stopped"):
        line += f", {jobs['stopped']} stopped (creator lost access)"
    nxt = jobs.get("next")
    if nxt:
        label = f"#{nxt['id']}" + (f' "{nxt["name"]}"' if nxt.get("name") else "")
        line += f" · next {label} at {nxt['at']}"
    day = jobs.get("last_24h") or {}
    if any(day.values()):
        line += " · last 24 h: " + ", ".join(f"{n} {status}" for status, n in day.items() if n)
    return line


def _duration(seconds: Any) -> str:
    try:
        total = int(float(seconds))
    except (TypeError, ValueError):
        return "?"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"
