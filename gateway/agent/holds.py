"""Where a turn stops for a person and how it goes on: the loop's side of gateway/approvals/.

The agent loop only stops (a `Waiting` in its result, when the registry holds a call) and resumes (a
`Resume`: the turn's messages so far, the calls of the step still to answer and the outcome of the
first); storing the turn, asking the person and running the approved call are the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.agent.tools.registry import Hold, ToolResult
from gateway.llm.types import ChatMessage

ToolCallView = dict[str, Any]  # {"id", "name", "arguments"}: a call as the assistant step stores it


@dataclass(frozen=True, slots=True)
class Waiting:
    """The turn stopped at `calls[0]`, which waits for a person (`hold`); the rest of its step
    follows it."""

    calls: tuple[ToolCallView, ...]
    hold: Hold

    @property
    def call(self) -> ToolCallView:
        return self.calls[0]


@dataclass(frozen=True, slots=True)
class Resume:
    """Go on from a stop: `messages` are the turn's so far (after the user message), `calls` the
    step's calls still unanswered, the first of them answered by `outcome` (run, denied, expired or
    the person's answer)."""

    messages: tuple[ChatMessage, ...]
    calls: tuple[ToolCallView, ...]
    outcome: ToolResult
    iterations: int = 0
    tool_calls: int = 0
