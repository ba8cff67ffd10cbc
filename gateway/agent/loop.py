"""The agent loop: one turn = model call → tool calls → model call … until the model answers in text.

It knows nothing of sessions or platforms: it gets the stored system prompt, the history and the new
user message, and returns the messages the turn produced. Persisting them is the caller's job. Every
tool call runs by its real name through `Agent.dispatch`, also one the model makes through tool
search's `tool_call` (gateway/agent/tools/deferred.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.agent.tools.deferred import CALL, SEARCH, Bridged, catalog_of
from gateway.agent.tools.registry import ToolContext, ToolRegistry, ToolResult, ToolSpec
from gateway.llm.types import ChatMessage, History, LLMClient, LLMReply, TextSink, ToolCall, Usage

log = logging.getLogger(__name__)

STOPPED_TEXT = ("I stopped after {n} tool steps without reaching an answer. Tell me how you'd like "
                "me to continue.")


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
                  ctx: ToolContext, tools: Sequence[ToolSpec],
                  allowed_tools: Collection[str] | None = None, max_iterations: int | None = None,
                  on_reply: Callable[[LLMReply], None] | None = None,
                  stream: TextSink | None = None,
                  on_tool: Callable[[str], None] | None = None) -> TurnResult:
        """Run one turn. `tools` is the session's stored tool list (part of the cached prefix, so it
        is always sent whole, byte for byte); `allowed_tools` narrows what may actually execute (the
        policy, the flush). `stream` gets each model call's text as it is written; `on_tool` each
        tool's real name as it starts (a live preview)."""
        convo = History.of(history).plus(user_message)  # the stored part shared: see History
        result = TurnResult(text="", messages=[])
        limit = max_iterations or self.max_iterations
        calls = TurnTools(tools, ctx, allowed_tools, on_tool)
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
            added = [step, *[await self._answer(call, calls) for call in reply.tool_calls]]
            result.tool_calls += len(reply.tool_calls)
            convo.extend(added)
            result.messages.extend(added)
        result.text = STOPPED_TEXT.format(n=limit)
        result.messages.append({"role": "assistant", "content": result.text})
        return result

    async def _answer(self, call: ToolCall, calls: TurnTools) -> ChatMessage:
        """The tool message that answers one call."""
        outcome = await self._call(call, calls)
        message: ChatMessage = {"role": "tool", "tool_call_id": call.id, "content": outcome.text,
                                "is_error": outcome.is_error}
        if outcome.images:
            message["images"] = [dict(image) for image in outcome.images]
        return message

    async def _call(self, call: ToolCall, calls: TurnTools) -> ToolResult:
        """One tool call as the model made it: tool_search answers from the session's catalog;
        tool_call is unwrapped and dispatched by the real name it gives; any other call is
        dispatched as it is."""
        catalog = calls.catalog
        if catalog is None or call.name not in (SEARCH, CALL):
            return await self.dispatch(call.name, call.arguments, calls)
        if calls.allowed is not None and call.name not in calls.allowed:  # a flush only saves
            return self.tools.refusal(call.name, calls.allowed)
        if not catalog.ready:  # its first search: the index is built off the event loop
            await asyncio.to_thread(catalog.prepare)
        if call.name == SEARCH:
            if calls.on_tool is not None:
                calls.on_tool(SEARCH)
            found = catalog.answer(call.arguments)
            log.info("tool %s session=%s ok=%s", SEARCH, calls.ctx.session_id, not found.is_error)
            return found
        target = catalog.unwrap(call.arguments, calls.shown)
        if not isinstance(target, Bridged):
            log.info("tool %s session=%s ok=False", CALL, calls.ctx.session_id)
            return target
        return await self.dispatch(target.name, target.arguments, calls, via=CALL)

    async def dispatch(self, name: str, arguments: str | Mapping[str, Any] | None,
                       calls: TurnTools, *, via: str = "") -> ToolResult:
        """The one path of every tool call, by the tool's real name, whether the model called it
        directly or through tool_call: the policy (`allowed`), the argument check against the schema
        the session holds, the log line and the live preview. A check every call must pass (an
        approval) belongs here."""
        if calls.on_tool is not None:
            calls.on_tool(name)
        spec = calls.spec(name)
        outcome = await self.tools.call(name, arguments, calls.ctx, allowed=calls.allowed,
                                        parameters=spec.parameters if spec is not None else None)
        log.info("tool %s session=%s ok=%s%s", name, calls.ctx.session_id, not outcome.is_error,
                 f" via={via}" if via else "")
        return outcome


class TurnTools:
    """What a turn's tool calls need: the session's tools (those sent, and the deferred catalog its
    tool_search / tool_call are bound to), who calls, what may run, where tool starts are told."""

    def __init__(self, tools: Sequence[ToolSpec], ctx: ToolContext,
                 allowed: Collection[str] | None, on_tool: Callable[[str], None] | None) -> None:
        self.shown = {t.name: t for t in tools}
        self.catalog = catalog_of(tools)
        self.ctx = ctx
        self.allowed = allowed
        self.on_tool = on_tool

    def spec(self, name: str) -> ToolSpec | None:
        """The tool `name` as the session holds it (sent or deferred; its schema, server and
        annotations), or None."""
        found = self.shown.get(name)
        if found is None and self.catalog is not None:
            found = self.catalog.get(name)
        return found
