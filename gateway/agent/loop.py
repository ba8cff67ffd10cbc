"""The agent loop: one turn = model call → tool calls → model call … until the model answers in
text.

It knows nothing of sessions or platforms: it gets the stored system prompt, the history and the new
user message, and returns the messages the turn produced. Persisting them is the caller's job. Every
tool call runs by its real name through `Agent.dispatch`, also one the model makes through tool
search's `tool_call` (gateway/agent/tools/deferred.py); a call that waits for a person stops the
turn there (`TurnResult.waiting`) and `resume` goes on from it (gateway/agent/holds.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.agent.holds import Resume, ToolCallView, Waiting
from gateway.agent.tools.deferred import CALL, SEARCH, Bridged, catalog_of
from gateway.agent.tools.registry import Held, ToolContext, ToolRegistry, ToolResult, ToolSpec
from gateway.llm.types import ChatMessage, History, LLMClient, LLMReply, TextSink, Usage

log = logging.getLogger(__name__)

STOPPED_TEXT = (
    "I stopped after {n} tool steps without reaching an answer. Tell me how you'd like "
    "me to continue."
)


@dataclass(slots=True)
class TurnResult:
    text: str
    messages: list[ChatMessage]  # assistant/tool messages produced by the turn, in order
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

    async def run(
        self,
        *,
        system: str,
        history: Sequence[ChatMessage],
        user_message: ChatMessage,
        ctx: ToolContext,
        tools: Sequence[ToolSpec],
        allowed_tools: Collection[str] | None = None,
        max_iterations: int | None = None,
        on_reply: Callable[[LLMReply], None] | None = None,
        stream: TextSink | None = None,
        on_tool: Callable[[str], None] | None = None,
        resume: Resume | None = None,
    ) -> TurnResult:
        """Run one turn. `tools` is the session's stored tool list (part of the cached prefix, so it
        is always sent whole, byte for byte); `allowed_tools` narrows what may actually execute (the
        policy, the flush). `stream` gets each model call's text as it is written; `on_tool` each
        tool's real name as it starts (a live preview). A call that waits for a person ends the run
        with `waiting` set; `resume` goes on from there."""
        convo, result, pending, first = _begin(history, user_message, resume)
        limit = max_iterations or self.max_iterations
        calls = TurnTools(tools, ctx, allowed_tools, on_tool)
        asked = 0
        while True:
            if pending:
                result.waiting = await self._answers(pending, first, convo, result, calls)
                if result.waiting is not None:
                    return result
                first = None
            if result.iterations >= limit:
                break
            if stream is not None and asked:
                stream.restart()  # the answer is the last call's text alone
            reply = await self.llm.complete(
                system=system, messages=convo, tools=tools, stream=stream
            )
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
            pending = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls
            ]
            step: ChatMessage = {
                "role": "assistant",
                "content": reply.text,
                "tool_calls": list(pending),
            }
            convo.append(step)
            result.messages.append(step)
        result.text = STOPPED_TEXT.format(n=limit)
        result.messages.append({"role": "assistant", "content": result.text})
        return result

    async def _answers(
        self,
        pending: Sequence[ToolCallView],
        first: ToolResult | None,
        convo: History,
        result: TurnResult,
        calls: TurnTools,
    ) -> Waiting | None:
        """Answer one step's calls in order (the first already answered by `first` on a resume);
        stop at one that waits for a person."""
        for i, call in enumerate(pending):
            if i == 0 and first is not None:
                outcome = first
            else:
                outcome = await self._call(call["name"], call["arguments"], calls)
                if isinstance(outcome, Held) and outcome.hold is not None:
                    return Waiting(tuple(pending[i:]), outcome.hold)
            result.tool_calls += 1
            message: ChatMessage = {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": outcome.text,
                "is_error": outcome.is_error,
            }
            if outcome.images:
                message["images"] = [dict(image) for image in outcome.images]
            convo.append(message)
            result.messages.append(message)
        return None

    async def _call(
        self, name: str, arguments: str | Mapping[str, Any] | None, calls: TurnTools
    ) -> ToolResult:
        """One tool call as the model made it: tool_search answers from the session's catalog;
        tool_call is unwrapped and dispatched by the real name it gives; any other call is
        dispatched as it is."""
        catalog = calls.catalog
        if catalog is None or name not in (SEARCH, CALL):
            return await self.dispatch(name, arguments, calls)
        if calls.allowed is not None and name not in calls.allowed:  # a flush only saves
            return self.tools.refusal(name, calls.allowed)
        if not catalog.ready:  # its first search: the index is built off the event loop
            await asyncio.to_thread(catalog.prepare)
        if name == SEARCH:
            if calls.on_tool is not None:
                calls.on_tool(SEARCH)
            found = catalog.answer(arguments)
            log.info("tool %s session=%s ok=%s", SEARCH, calls.ctx.session_id, not found.is_error)
            return found
        target = catalog.unwrap(arguments, calls.shown)
        if not isinstance(target, Bridged):
            log.info("tool %s session=%s ok=False", CALL, calls.ctx.session_id)
            return target
        return await self.dispatch(target.name, target.arguments, calls, via=CALL)

    async def dispatch(
        self,
        name: str,
        arguments: str | Mapping[str, Any] | None,
        calls: TurnTools,
        *,
        via: str = "",
        approved: bool = False,
    ) -> ToolResult:
        """The one path of every tool call, by the tool's real name, whether the model called it
        directly or through tool_call: the policy (`allowed`), the argument check against the schema
        the session holds, the approval check (a `Held` result: the call waits for a person and
        did not run), the log line and the live preview. `approved` runs a call a person said yes
        to (gateway/approvals/waits.py)."""
        if calls.on_tool is not None:
            calls.on_tool(name)
        spec = calls.spec(name)
        outcome = await self.tools.call(
            name,
            arguments,
            calls.ctx,
            allowed=calls.allowed,
            parameters=spec.parameters if spec is not None else None,
            approved=approved,
        )
        how = f" via={via}" if via else ""
        if isinstance(outcome, Held):
            log.info("tool %s session=%s waits for a person%s", name, calls.ctx.session_id, how)
        else:
            log.info(
                "tool %s session=%s ok=%s%s%s",
                name,
                calls.ctx.session_id,
                not outcome.is_error,
                how,
                " approved" if approved else "",
            )
        return outcome


class TurnTools:
    """What a turn's tool calls need: the session's tools (those sent, and the deferred catalog its
    tool_search / tool_call are bound to), who calls, what may run, where tool starts are told."""

    def __init__(
        self,
        tools: Sequence[ToolSpec],
        ctx: ToolContext,
        allowed: Collection[str] | None,
        on_tool: Callable[[str], None] | None,
    ) -> None:
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


def _begin(
    history: Sequence[ChatMessage], user_message: ChatMessage, resume: Resume | None
) -> tuple[History, TurnResult, Sequence[ToolCallView], ToolResult | None]:
    """The conversation and result a run starts from: fresh, or where a stopped turn was (its
    messages so far, the step's calls left, the first one answered)."""
    convo = History.of(history).plus(user_message)  # the stored part shared: see History
    result = TurnResult(text="", messages=[])
    if resume is None:
        return convo, result, (), None
    convo.extend(resume.messages)
    result.messages.extend(resume.messages)
    result.iterations, result.tool_calls = resume.iterations, resume.tool_calls
    return convo, result, resume.calls, resume.outcome
