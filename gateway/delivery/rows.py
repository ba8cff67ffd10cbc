"""A reply as rows of the outbound table, and a stored row as the message an adapter sends. Pure."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from gateway.delivery.chunking import render_chunks
from gateway.events import ChatRef, OutboundKind, OutboundMessage, TextEntity
from gateway.prompt.hints import PlatformFacts
from gateway.store.rows import OutboundRow


def render_rows(
    turn_id: str,
    chat: ChatRef,
    markdown: str,
    facts: PlatformFacts,
    *,
    kind: OutboundKind,
    reply_to_id: str | None,
) -> list[dict[str, object]]:
    """Split one reply into chunk rows for the outbound table (pure; the same input gives the same
    rows)."""
    chunks: list[tuple[str, str, tuple[TextEntity, ...]]]
    if facts.flavor == "markdown":
        # The page renders the Markdown itself and never rejects it, so the plain fallback is never
        # sent: rendering one (a markdown-it parse of the whole reply) would be work for nothing.
        chunks = [(markdown, markdown, ())] if markdown.strip() else []
    else:
        rendered = render_chunks(
            markdown,
            facts.flavor,  # type: ignore[arg-type]
            limit=facts.max_length,
            unit=facts.length_unit,  # type: ignore[arg-type]
            max_lines=facts.max_lines,
        )
        chunks = [(c.text, c.plain, c.entities) for c in rendered]
    if not chunks:
        chunks = [("(empty reply)", "(empty reply)", ())]
    return [
        {
            "turn_id": turn_id,
            "chunk_index": i,
            "chunk_count": len(chunks),
            "platform": chat.platform,
            "chat_type": chat.chat_type,
            "chat_id": chat.chat_id,
            "thread_id": chat.thread_id,
            "kind": kind.value,
            "text": text,
            "plain": plain,
            "reply_to_id": reply_to_id,
            "account": chat.account,
            "entities": json.dumps([asdict(e) for e in entities]) if entities else None,
        }
        for i, (text, plain, entities) in enumerate(chunks)
    ]


def row_message(row: OutboundRow, *, use_plain: bool = False) -> OutboundMessage:
    entities = tuple(TextEntity(**e) for e in json.loads(row.entities)) if row.entities else ()
    return OutboundMessage(
        chat=row_chat(row),
        text=row.text,
        plain=row.plain,
        entities=entities,
        reply_to_id=row.reply_to_id,
        kind=OutboundKind(row.kind),
        chunk_index=row.chunk_index,
        chunk_count=row.chunk_count,
        use_plain=use_plain,
        key=f"{row.id}@{row.created_at}",
    )


def row_chat(row: OutboundRow) -> ChatRef:
    chat_type: Any = row.chat_type
    return ChatRef(row.platform, chat_type, row.chat_id, row.thread_id, row.account)
