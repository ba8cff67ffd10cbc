"""Context compression: when a session's next request would outgrow the model's window, the middle
of its history becomes one summary written by the model.

It keeps the first exchange and the last `agent.keep_recent` messages, never separates a tool call
from its result, and lets the memory flush save what the dropped part taught before it goes.
Rebuilding the stored prompt afterwards (the one planned rebuild) is the session manager's job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gateway.agent.tools.registry import Callers
from gateway.agents.runtime import Roster
from gateway.config.settings import Config
from gateway.errors import GatewayError, LLMError
from gateway.llm.types import ChatMessage, History, ToolDef, message_chars
from gateway.sessions.flush import flush_instruction, memory_tools, owner_context, run_flush_call
from gateway.store.database import Store
from gateway.store.rows import MessageRow, SessionRow
from gateway.store.transcript import history_messages

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
# Saves durable facts from messages about to leave the context: (session, its stored prompt, the
# first exchange, the dropped messages). gateway/sessions/flush.py provides the real one;
# `AgentFlush` below stands in.
DroppedFlush = Callable[
    [SessionRow, str, Sequence[MessageRow], Sequence[MessageRow]], Awaitable[None]
]

CHARS_PER_TOKEN = 4  # a deliberately rough estimate: it only decides *when* to compress
SUMMARY_MAX_TOKENS = 1024
# a long tool result is shortened in the transcript given to the summarizer
TOOL_RESULT_CHARS = 2000

SUMMARY_SYSTEM = (
    "You condense the middle part of a conversation between a user and an AI assistant, so the "
    "assistant can carry on without it. Write a summary of the transcript you are given: what the "
    "user asked for and told the assistant about themselves, decisions and results reached, tasks "
    "still open and anything the assistant promised to do. Keep names, numbers, file paths and "
    "exact wording where they matter. Use short paragraphs or bullets, in the language of the "
    "conversation, at most about 400 words. State only what the transcript says; do not answer the "
    "user or continue the conversation."
)
SUMMARY_HEADER = (
    "[Summary of {n} earlier messages of this conversation, written automatically when the "
    "conversation grew too long for the context window]\n"
)
FLUSH_INSTRUCTION = (
    "[Automatic maintenance, not from the user] The "
    "conversation above is about to be shortened: the "
    "messages after the first exchange will be replaced "
    "by a summary. Before that happens, save anything "
    "durable from them with the memory tool, in the scopes you may write here:\n{targets}\n"
    "Your memory as it stands right now is "
    "below: add only what is new, and replace an entry "
    "only when the conversation clearly supersedes it. If "
    "nothing is worth saving, save nothing. Do not reply "
    "to the user; your text answer is discarded.\n\n{files}"
)


def estimate_tokens(system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolDef]) -> int:
    return (
        len(system) + messages_chars(messages) + sum(tool_chars(t) for t in tools)
    ) // CHARS_PER_TOKEN


def messages_chars(messages: Sequence[ChatMessage]) -> int:
    """About the JSON size of the messages, from string lengths (llm.types.message_chars); a
    session's stored history has its sum kept (History.chars): a turn does not measure it all."""
    if isinstance(messages, History):
        return messages.chars()
    return sum(message_chars(m) for m in messages)


def tool_chars(tool: ToolDef) -> int:
    return len(tool.name) + len(tool.description) + len(json.dumps(dict(tool.parameters)))


@dataclass(frozen=True, slots=True)
class Cut:
    """A history split three ways; `dropped` goes, the others stay around the summary."""

    head: tuple[MessageRow, ...]
    dropped: tuple[MessageRow, ...]
    tail: tuple[MessageRow, ...]


def plan_cut(rows: Sequence[MessageRow], keep_recent: int) -> Cut | None:
    """Where to cut, or None when nothing can go.

    The head is the first exchange (up to the first assistant text reply). The tail starts at a
    turn's first message (a user chat message), so a tool call and its result always stay together:
    the latest turn start that still keeps `keep_recent` messages; if that leaves nothing to drop,
    the earliest one after the head (the history is over the limit, and a request that overflows the
    window fails outright).
    """
    head_end = next(
        (i for i, r in enumerate(rows) if r.role == "assistant" and not r.tool_calls), None
    )
    if head_end is None:
        return None
    starts = [
        i for i, r in enumerate(rows) if i > head_end + 1 and r.role == "user" and r.kind == "chat"
    ]
    enough = [i for i in starts if i <= len(rows) - keep_recent]
    start = max(enough) if enough else min(starts, default=None)
    if start is None:
        return None
    return Cut(tuple(rows[: head_end + 1]), tuple(rows[head_end + 1 : start]), tuple(rows[start:]))


def transcript(rows: Sequence[MessageRow]) -> str:
    """The dropped messages as plain text for the
    summarizer (an earlier summary is included as such)."""
    lines = []
    for r in rows:
        if r.kind == "summary":
            lines.append(f"(earlier summary) {r.content}")
        elif r.role == "user":
            lines.append(f"user{f' ({r.user_name})' if r.user_name else ''}: {r.content}")
        elif r.role == "assistant":
            if r.content:
                lines.append(f"assistant: {r.content}")
            for call in json.loads(r.tool_calls or "[]"):
                lines.append(f"assistant called {call['name']}({call.get('arguments') or ''})")
        elif r.role == "tool":
            text = (
                r.content
                if len(r.content) <= TOOL_RESULT_CHARS
                else r.content[:TOOL_RESULT_CHARS] + " …"
            )
            lines.append(f"tool result: {text}")
    return "\n\n".join(lines)


class Compressor:
    """Decides when a session's history is too long and replaces its middle with a summary."""

    def __init__(
        self, *, roster: Roster, store: Store, clock: Clock, flush: DroppedFlush | None = None
    ) -> None:
        self.roster = roster  # a session's agent: its model's window, its keep_recent, its summary
        self.store = store
        self.clock = clock
        self.flush = flush
        # the registry's specs are the same objects each turn
        self._tool_chars: dict[int, tuple[ToolDef, int]] = {}

    def over_limit(
        self,
        session: SessionRow,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
    ) -> bool:
        agent = self.roster.of(session)
        limit = agent.config.agent.compress_at * agent.llm.context_window
        size = len(system) + messages_chars(messages) + sum(self._size_of(t) for t in tools)
        return size // CHARS_PER_TOKEN > limit

    def _size_of(self, tool: ToolDef) -> int:
        known = self._tool_chars.get(id(tool))
        if known is None or known[0] is not tool:
            if len(self._tool_chars) > 1000:
                self._tool_chars.clear()
            known = self._tool_chars[id(tool)] = (tool, tool_chars(tool))
        return known[1]

    async def compress(self, session: SessionRow, prompt: str, rows: Sequence[MessageRow]) -> bool:
        """Summarize, flush, store. False (history untouched)
        when nothing can go or the summary failed.

        The summary comes first so a failing model costs no flush that the next attempt would
        repeat; the flush still runs before anything leaves the context, and its memory writes reach
        the rebuilt prompt.
        """
        cut = plan_cut(rows, self.roster.of(session).config.agent.keep_recent)
        if cut is None:
            log.info(
                "compression skipped session=%s: nothing "
                "between the first exchange and the last turn",
                session.id,
            )
            return False
        summary = await self._summarize(session, cut.dropped)
        if summary is None:
            return False
        if self.flush is not None:
            try:
                await self.flush(session, prompt, cut.head, cut.dropped)
            except (GatewayError, TimeoutError) as exc:
                # The dropped rows stay in the database (inactive) and the summary keeps their gist.
                log.warning(
                    "memory flush before compression failed session=%s: %s", session.id, exc
                )
        self.store.compress_history(
            session.id,
            dropped=[r.id for r in cut.dropped],
            tail=cut.tail,
            summary=SUMMARY_HEADER.format(n=len(cut.dropped)) + summary,
            now=self.clock(),
        )
        log.info(
            "history compressed session=%s: %s messages → 1 summary, kept %s + %s",
            session.id,
            len(cut.dropped),
            len(cut.head),
            len(cut.tail),
        )
        return True

    async def _summarize(self, session: SessionRow, dropped: Sequence[MessageRow]) -> str | None:
        llm = self.roster.of(session).llm
        request: ChatMessage = {
            "role": "user",
            "content": f"<transcript>\n{transcript(dropped)}\n</transcript>",
        }
        try:
            reply = await llm.complete(
                system=SUMMARY_SYSTEM, messages=[request], tools=[], max_tokens=SUMMARY_MAX_TOKENS
            )
        except LLMError as exc:
            log.warning(
                "compression summary failed session=%s: %s; history kept as it is", session.id, exc
            )
            return None
        self.store.add_usage(
            session.id,
            reply.usage,
            purpose="compression",
            provider=reply.provider,
            model=reply.model,
            now=self.clock(),
        )
        text = reply.text.strip()
        if not text:
            log.warning(
                "compression summary was empty session=%s; history kept as it is", session.id
            )
            return None
        return text


class AgentFlush:
    """The memory flush for messages about to be compressed away.

    Same stored prompt and tool list as the session's turns (so the request reuses their cached
    prefix), the first exchange and the dropped messages, then one instruction carrying the live
    memory files. Only the memory and skill tools may run; the text answer is discarded.
    """

    def __init__(
        self,
        *,
        roster: Roster,
        store: Store,
        config: Config,
        clock: Clock,
        callers: Callers | None = None,
    ) -> None:
        self.roster = roster
        self.store = store
        self.config = config
        self.memory = config.memory
        self.callers = callers
        self.clock = clock

    async def __call__(
        self,
        session: SessionRow,
        prompt: str,
        head: Sequence[MessageRow],
        dropped: Sequence[MessageRow],
    ) -> None:
        agent = self.roster.of(session)
        if not self.memory.flush_enabled or "memory" not in memory_tools(agent.tools, session):
            return
        if (
            sum(1 for r in dropped if r.kind == "chat" and r.role in ("user", "assistant"))
            < self.memory.flush_min_messages
        ):
            return
        ctx = owner_context(self.callers, session, self.config.home, self.config.db_path)
        calls = await run_flush_call(
            agent.loop,
            self.store,
            session=session,
            system=prompt,
            # with its pictures: a warm prefix
            history=history_messages([*head, *dropped], home=self.config.home),
            instruction=flush_instruction(agent.memory, ctx.memory, FLUSH_INSTRUCTION),
            tools=agent.tools,
            config=self.memory,
            ctx=ctx,
            clock=self.clock,
        )
        log.info("memory flush before compression session=%s: %s tool calls", session.id, calls)
