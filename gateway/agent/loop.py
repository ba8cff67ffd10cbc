"""The agent loop: one turn = model call → tool calls → model call … until the model answers in text.

It knows nothing of sessions or platforms: it gets the stored system prompt, the history and the new user
message, and returns the messages the turn produced. Persisting them is the caller's job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from gateway.agent.tools.registry import ToolContext, ToolRegistry, ToolSpec
from gateway.llm.types import ChatMessage, History, LLMClient, LLMReply, TextSink, Usage

log = logging.getLogger(__name__)

STOPPED_TEXT = "I stopped after {n} tool steps without reaching an answer. Tell me how you'd like me to continue."


@dataclass(slots=True)
class TurnResult:
    text: str
    messages: list[ChatMessage]          # assistant/tool messages produced by the turn, in order
    usage: Usage = field(default_factory=Usage)
    iterations: int = 0
    tool_calls: int = 0


class Agent:
    def __init__(self, llm: LLMClient, tools: ToolRegistry, *, max_iterations: int = 20) -> None:
        self.llm = llm
        self.tools = tools
        self.max_iterations = max_iterations

    async def run(self, *, system: str, history: Sequence[ChatMessage], user_message: ChatMessage,
                  ctx: ToolContext, tools: Sequence[ToolSpec], allowed_tools: Collection[str] | None = None,
                  max_iterations: int | None = None, on_reply: Callable[[LLMReply], None] | None = None,
                  stream: TextSink | None = None, on_tool: Callable[[str], None] | None = None) -> TurnResult:
        """Run one turn. `tools` is the session's stored tool list (part of the cached prefix, so it is always sent
        whole, byte for byte); `allowed_tools` narrows what may actually execute (the policy, the flush). `stream`
        gets each model call's text as it is written; `on_tool` each tool's name as it starts (a live preview)."""
        convo = History.of(history).plus(user_message)  # the stored part shared: see History
        result = TurnResult(text="", messages=[])
        limit = max_iterations or self.max_iterations
        for step_no in range(limit):
            if stream is not None and step_no:
                stream.restart()  # the answer is the last call's text alone
            reply = await self.llm.complete(system=system, messages=convo, tools=tools, stream=stream)
            result.iterations += 1
            result.usage = result.usage + reply.usage
            if on_reply is not None:
                on_reply(reply)
            if not reply.tool_calls:
                final: ChatMessage = {"role": "assistant", "content": reply.text}
                result.messages.append(final)
                result.text = reply.text
                return result
            step: ChatMessage = {"role": "assistant", "content": reply.text, "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls]}
            convo.append(step)
            result.messages.append(step)
            for call in reply.tool_calls:
                if on_tool is not None:
                    on_tool(call.name)
                outcome = await self.tools.call(call.name, call.arguments, ctx, allowed=allowed_tools)
                result.tool_calls += 1
                log.info("tool %s session=%s ok=%s", call.name, ctx.session_id, not outcome.is_error)
                tool_msg: ChatMessage = {"role": "tool", "tool_call_id": call.id, "content": outcome.text,
                                         "is_error": outcome.is_error}
                if outcome.images:
                    tool_msg["images"] = [dict(image) for image in outcome.images]
                convo.append(tool_msg)
                result.messages.append(tool_msg)
        result.text = STOPPED_TEXT.format(n=limit)
        result.messages.append({"role": "assistant", "content": result.text})
        return result
