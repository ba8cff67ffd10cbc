"""The turn as it stood when it stopped for a person, stored with its request and read back: the
user message, the model's messages so far, the calls of the step still to answer and the counters
(pictures as file names: their bytes are read back from disk); and a call's stored result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.agent.holds import Resume, ToolCallView
from gateway.agent.loop import TurnResult
from gateway.agent.tools.registry import ToolResult
from gateway.approvals import request as texts
from gateway.approvals.book import ApprovalRow
from gateway.llm.types import ChatMessage
from gateway.store.transcript import with_image_data


def checkpoint(user_message: ChatMessage, result: TurnResult) -> str:
    """The turn as it stood: the user message, the model's messages so far, the step's calls left
    (the first is the one that waits) and the counters; images as file names (their bytes are read
    back from disk)."""
    assert result.waiting is not None
    return json.dumps(
        {
            "user": _bare(user_message),
            "messages": [_bare(m) for m in result.messages],
            "calls": list(result.waiting.calls),
            "iterations": result.iterations,
            "tool_calls": result.tool_calls,
        },
        ensure_ascii=False,
    )


def user_of(row: ApprovalRow, home: Path) -> ChatMessage:
    """The user message a stopped turn answers, its images' bytes read back."""
    return with_image_data([json.loads(row.checkpoint)["user"]], home)[0]


def resume_from(row: ApprovalRow, outcome: ToolResult, home: Path) -> Resume:
    point = json.loads(row.checkpoint)
    messages = with_image_data(point["messages"], home)
    calls: tuple[ToolCallView, ...] = tuple(point["calls"])
    return Resume(tuple(messages), calls, outcome, point["iterations"], point["tool_calls"])


def _bare(message: ChatMessage) -> dict[str, Any]:
    out = dict(message)
    if out.get("images"):
        out["images"] = [
            {"media_type": i["media_type"], "file": i["file"]}
            for i in out["images"]
            if i.get("file")
        ]
    return out


def arguments_of(call: ToolCallView) -> dict[str, Any]:
    raw = call.get("arguments")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raw = {}
    return dict(raw) if isinstance(raw, Mapping) else {}


def loads(text: str) -> Any:
    return json.loads(text)


def stored_result(outcome: ToolResult) -> dict[str, Any]:
    return {
        "text": outcome.text,
        "is_error": outcome.is_error,
        "images": [dict(i) for i in outcome.images],
    }


def result_of(stored: dict[str, Any]) -> ToolResult:
    return ToolResult(
        str(stored.get("text", "")),
        bool(stored.get("is_error")),
        tuple(dict(i) for i in stored.get("images") or ()),
    )


def unknown_result(minutes: float) -> ToolResult:
    return ToolResult(texts.result_text("unknown", None, minutes=minutes), is_error=True)
