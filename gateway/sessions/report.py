"""`gateway sessions list|show`: what the store knows about sessions, for the operator's terminal.

Shows each session's reset policy and deadline (active) or end reason (ended), and its flush state
and error.
"""

from __future__ import annotations

from gateway.sessions.lifecycle import Policies
from gateway.store.database import Store
from gateway.store.rows import SessionRow, parse_iso

__all__ = ["find_session", "list_sessions", "show_session"]


def _when(policies: Policies, text: str | None) -> str:
    moment = parse_iso(text)
    return policies.local(moment) if moment else "-"


def _state(policies: Policies, s: SessionRow) -> str:
    if s.ended_at is not None:
        return f"ended {_when(policies, s.ended_at)} ({s.end_reason or '?'})"
    found = policies.session_deadline(s)
    return (
        f"active, resets {policies.local(found.at)} ({found.reason})"
        if found
        else "active, no reset"
    )


def _flush(s: SessionRow) -> str:
    if s.flush_state is None:
        return "-"
    attempts = f"{s.flush_attempts} attempt{'s' if s.flush_attempts != 1 else ''}"
    text = f"{s.flush_state} ({attempts})" if s.flush_attempts else s.flush_state
    if s.flush_state == "failed" and s.flush_error:
        text += f": {s.flush_error}"
    return text


def list_sessions(
    store: Store, policies: Policies, *, active: bool | None = None, limit: int = 100
) -> str:
    """One line per session, newest first."""
    rows = store.list_sessions(active=active, limit=limit)
    if not rows:
        return "no sessions"
    header = ("ID", "KEY", "LAST USER MESSAGE", "STATE", "FLUSH")
    table = [header] + [
        (str(s.id), s.key, _when(policies, s.last_user_at), _state(policies, s), _flush(s))
        for s in rows
    ]
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in table
    )


def find_session(store: Store, key_or_id: str) -> SessionRow | None:
    """A session id, or a key (its active session, else its latest one)."""
    if key_or_id.isdigit():
        row = store.one("SELECT id FROM sessions WHERE id = ?", (int(key_or_id),))
        if row is not None:
            return store.session(int(row[0]))
    return store.active_session(key_or_id) or store.latest_session(key_or_id)


def show_session(store: Store, policies: Policies, s: SessionRow) -> str:
    policy = policies.policy(s.platform, s.chat_type)
    lines = [
        f"Session {s.id}",
        f"  key:        {s.key}",
        f"  chat:       {s.platform} {s.chat_type} {s.chat_id}"
        + (f" thread {s.thread_id}" if s.thread_id else "")
        + (f", user {s.user_id}" if s.user_id else ""),
        f"  parent:     {s.parent_id if s.parent_id is not None else '-'}",
        f"  started:    {_when(policies, s.created_at)}",
        f"  last user:  {_when(policies, s.last_user_at)}",
        f"  messages:   {store.count_messages(s.id)}",
        f"  model:      {s.model or '-'} ({s.provider or '-'})",
        *_model_lines(store, s),
        (
            f"  tokens:     {s.input_tokens:,} in, {s.output_tokens:,} out; cache "
            f"{s.cache_read_tokens:,} read, {s.cache_write_tokens:,} written"
        ),
        f"  policy:     {policies.describe(policy)}",
    ]
    if s.ended_at is None:
        found = policies.session_deadline(s)
        lines.append(
            f"  deadline:   {policies.local(found.at)} ({found.reason})"
            if found
            else "  deadline:   none"
        )
    else:
        lines.append(f"  ended:      {_when(policies, s.ended_at)} ({s.end_reason or '?'})")
    lines.append(f"  flush:      {s.flush_state or '-'}")
    if s.flush_state is not None:
        lines.append(f"  attempts:   {s.flush_attempts}")
        lines.append(f"  finished:   {_when(policies, s.flush_finished_at)}")
        if s.flush_error:
            lines.append(f"  last error: {s.flush_error}")
    return "\n".join(lines)


def _model_lines(store: Store, s: SessionRow) -> list[str]:
    """What /model chose for the conversation, and the prompt's rebuilds, when there are any."""
    lines = []
    chosen = store.model_choice(s.key)
    if chosen is not None:
        lines.append(f"  chosen:     {chosen} (/model)")
    if s.prompt_rebuilds:
        times = "once" if s.prompt_rebuilds == 1 else f"{s.prompt_rebuilds} times"
        lines.append(f"  prompt:     rebuilt {times}, last for {s.prompt_rebuild_reason or '?'}")
    return lines
