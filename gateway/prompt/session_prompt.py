"""A session's stored system prompt: built once, reused byte for byte (the provider's cached
prefix), rebuilt only on a model change or after compression; and the compression check before a
turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import date, datetime
from typing import Protocol

from gateway.agent.loop import Agent
from gateway.agent.tools.registry import Callers
from gateway.knowledge.memory import NO_VIEW, MemoryView
from gateway.llm.factory import SessionModels, answer_with
from gateway.llm.types import ChatMessage, History, ToolDef
from gateway.prompt.session_tools import SessionToolList, SessionTools
from gateway.store.database import Store
from gateway.store.rows import MessageRow, SessionRow, parse_iso
from gateway.store.transcript import session_history

# one logger for the session manager, whichever module speaks
log = logging.getLogger("gateway.sessions.manager")


class PromptSource(Protocol):
    """Builds a new session's system prompt (gateway/prompt/inputs.py's PromptAssembler); called
    once per session."""

    def build(
        self,
        *,
        platform: str,
        chat_type: str,
        model: str,
        provider: str,
        tool_names: Sequence[str],
        today: date,
        view: MemoryView = NO_VIEW,
    ) -> str: ...


class ContextCompressor(Protocol):
    """gateway/sessions/compression.py's Compressor, as the turn sees it (a protocol keeps this
    module below it)."""

    def over_limit(
        self,
        session: SessionRow,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
    ) -> bool: ...

    async def compress(
        self, session: SessionRow, prompt: str, rows: Sequence[MessageRow]
    ) -> bool: ...


class AgentParts(Protocol):
    """What a session's prompt takes from its agent (gateway/agents/runtime.py's AgentRuntime)."""

    @property
    def loop(self) -> Agent: ...

    @property
    def prompts(self) -> PromptSource: ...

    @property
    def tools(self) -> SessionTools: ...


class SessionPrompt:
    """`parts(name)`: the parts of agent `name`; a session's prompt is built from its agent's."""

    def __init__(
        self,
        *,
        store: Store,
        parts: Callable[[str], AgentParts],
        clock: Callable[[], datetime],
        compressor: ContextCompressor | None = None,
        callers: Callers | None = None,
    ) -> None:
        self.store = store
        self.callers = callers
        self.parts = parts
        self.clock = clock
        self.compressor = compressor

    def ensure(self, session: SessionRow) -> str:
        """The session's stored prompt bytes; built and stored on first use, rebuilt only on a
        model change.

        With `models:`, the model the conversation chose (/model) is made the one that answers this
        turn first (gateway/llm/factory.py SessionModels; each agent has its own): the prompt is
        then built for it, and a switch rebuilds it."""
        llm = self.parts(session.agent).loop.llm
        self.choose(session)
        if session.system_prompt is not None and session.model == llm.model:
            return session.system_prompt
        reason = None if session.system_prompt is None else "model_change"
        text = self._build_and_store(session, reason)
        if reason:
            log.info(
                "prompt rebuilt session=%s reason=%s (was %s, now %s)",
                session.id,
                reason,
                session.model,
                llm.model,
            )
        return text

    def choose(self, session: SessionRow) -> None:
        """Make the model the conversation chose (/model) answer in this task: whatever reads the
        agent's model from here on follows it (the pictures of the message's attachments, the
        prompt, the model calls); what reads the model outside its agent's parts (the pictures of
        attachments and MCP results) follows this session's agent (`answering`)."""
        llm = self.parts(session.agent).loop.llm
        if isinstance(llm, SessionModels):
            llm.choose(self.store.model_choice(session.key))
        answer_with(llm)

    def rebuild(self, session: SessionRow, *, reason: str) -> str:
        """Build afresh (live memory files; the session's own platform, chat type and start date)
        and store it."""
        text = self._build_and_store(session, reason)
        log.info("prompt rebuilt session=%s reason=%s", session.id, reason)
        return text

    def _build_and_store(self, session: SessionRow, reason: str | None) -> str:
        parts = self.parts(session.agent)
        llm = parts.loop.llm
        # "Conversation started" stays the start date
        started = parse_iso(session.created_at) or self.clock()
        tools = self._tools_for(session, parts, reason)
        view = self.callers.view(session) if self.callers is not None else NO_VIEW
        text = parts.prompts.build(
            platform=session.platform,
            chat_type=session.chat_type,
            model=llm.model,
            provider=llm.provider,
            tool_names=tools.names,
            today=started.date(),
            view=view,
        )
        self.store.store_prompt(
            session.id,
            text,
            now=self.clock(),
            reason=reason,
            model=llm.model,
            provider=llm.provider,
        )
        return text

    def _tools_for(
        self, session: SessionRow, parts: AgentParts, reason: str | None
    ) -> SessionToolList:
        window = parts.loop.llm.context_window
        if session.tool_list_id is None and session.system_prompt is None:
            # a new session: the tools a new session gets now, from now on (and tool search by
            # the model's context window)
            return parts.tools.fix(session, window=window)
        if reason == "model_change":  # its own tools, with tool search by the new model's window
            return parts.tools.refit(session, window=window)
        return parts.tools.of(session)

    async def compress_if_needed(
        self,
        session: SessionRow,
        prompt: str,
        history: Sequence[ChatMessage],
        user_msg: ChatMessage,
    ) -> tuple[str, Sequence[ChatMessage]]:
        """Context compression (gateway/sessions/compression.py),
        then the one planned prompt rebuild."""
        compressor = self.compressor
        specs = self.parts(session.agent).tools.of(session).specs
        upcoming = History.of(history).plus(user_msg)  # its stored part measured once (History)
        if compressor is None or not compressor.over_limit(session, prompt, upcoming, specs):
            return prompt, history
        if not await compressor.compress(session, prompt, self.store.history(session.id)):
            return prompt, history
        prompt = self.rebuild(self.store.session(session.id), reason="compression")
        return prompt, session_history(self.store, session.id)
