"""The agent loop: one turn = model call → tool calls → model call … until the model answers in text.

It knows nothing of sessions or platforms: it gets the stored system prompt, the history and the new user
message, and returns the messages the turn produced. Persisting them is the caller's job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from gateway.agent.holds import Resume, ToolCallView, Waiting
from gateway.agent.tools.registry import Held, ToolContext, ToolRegistry, ToolResult, ToolSpec
from gateway.llm.types import ChatMessage, LLMClient, LLMReply, TextSink, Usage

log = logging.getLogger(__name__)

STOPPED_TEXT = "I stopped after {n} tool steps without reaching an answer. Tell me how you'd like me to continue."


@dataclass(slots=True)
class TurnResult:
    text: str
    messages: list[ChatMessage]          # assistant/tool messages produced by the turn, in order
    usage: Usage = field(default_factory=Usage)
    iterations: int = 0
    tool_calls: int = 0
    # the turn stopped at a call that waits for a person (gateway/approvals)
    waiting: Waiting | None = None


class Agent:
    def __init__(self, llm: LLMClient, tools: ToolRegistry, *, max_iterations: int = 20) -> None:
        self.llm = llm
        self.tools = tools
        self.max_iterations = max_iterations

    async def run(self, *, system: str, history: Sequence[ChatMessage], user_message: ChatMessage,
                  ctx: ToolContext, tools: Sequence[ToolSpec], allowed_tools: Collection[str] | None = None,
                  max_iterations: int | None = None, on_reply: Callable[[LLMReply], None] | None = None,
                  stream: TextSink | None = None, on_tool: Callable[[str], None] | None = None,
                  resume: Resume | None = None) -> TurnResult:
        """Run one turn. `tools` is the session's stored tool list (part of the cached prefix, so it
        is always sent whole, byte for byte); `allowed_tools` narrows what may actually execute (the
        policy, the flush). `stream` gets each model call's text as it is written; `on_tool` each
        tool's name as it starts (a live preview). A call that waits for a person ends the run with
        `waiting` set; `resume` goes on from there."""
        convo, result, calls, first = _begin(history, user_message, resume)
        limit = max_iterations or self.max_iterations
        asked = 0
        while True:
            if calls:
                result.waiting = await self._calls(calls, first, convo, result, ctx, allowed_tools,
                                                   on_tool)
                if result.waiting is not None:
                    return result
                first = None
            if result.iterations >= limit:
                break
            if stream is not None and asked:
                stream.restart()  # the answer is the last call's text alone
            reply = await self.llm.complete(system=system, messages=convo, tools=tools, stream=stream)
            asked += 1
            result.iterations += 1
            result.usage = result.usage + reply.usage
            if on_reply is not None:
                on_reply(reply)
            if not reply.tool_calls:
                final: ChatMessage = {"role": "assistant", "content": reply.text}
                result.messages.append(final)
                result.text = reply.text
                return result
            calls = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                     for c in reply.tool_calls]
            step: ChatMessage = {"role": "assistant", "content": reply.text,
                                 "tool_calls": list(calls)}
            convo.append(step)
            result.messages.append(step)
        result.text = STOPPED_TEXT.format(n=limit)
        result.messages.append({"role": "assistant", "content": result.text})
        return result

    async def _calls(self, calls: Sequence[ToolCallView], first: ToolResult | None,
                     convo: list[ChatMessage],
                     result: TurnResult, ctx: ToolContext, allowed: Collection[str] | None,
                     on_tool: Callable[[str], None] | None) -> Waiting | None:
        """Run one step's calls in order (the first already answered by `first` on a resume); stop
        at one that waits for a person."""
        for i, call in enumerate(calls):
            if i == 0 and first is not None:
                outcome = first
            else:
                if on_tool is not None:
                    on_tool(call["name"])
                outcome = await self.tools.call(call["name"], call["arguments"], ctx,
                                                allowed=allowed)
                if isinstance(outcome, Held) and outcome.hold is not None:
                    return Waiting(tuple(calls[i:]), outcome.hold)
            result.tool_calls += 1
            log.info("tool %s session=%s ok=%s", call["name"], ctx.session_id, not outcome.is_error)
            tool_msg: ChatMessage = {"role": "tool", "tool_call_id": call["id"],
                                     "content": outcome.text,
                                     "is_error": outcome.is_error}
            if outcome.images:
                tool_msg["images"] = [dict(image) for image in outcome.images]
            convo.append(tool_msg)
            result.messages.append(tool_msg)
        return None


def _begin(history: Sequence[ChatMessage], user_message: ChatMessage, resume: Resume | None
           ) -> tuple[list[ChatMessage], TurnResult, Sequence[ToolCallView], ToolResult | None]:
    """The conversation and result a run starts from: fresh, or where a stopped turn was (its
    messages so far, the step's calls left, the first one answered)."""
    convo: list[ChatMessage] = [*history, user_message]
    result = TurnResult(text="", messages=[])
    if resume is None:
        return convo, result, (), None
    convo.extend(resume.messages)
    result.messages.extend(resume.messages)
    result.iterations, result.tool_calls = resume.iterations, resume.tool_calls
    return convo, result, resume.calls, resume.outcome
