"""The session manager's side of a turn that waits for a person: what gateway/sessions/manager.py
calls.

Thin on purpose: an ordinary turn pays one dict lookup here and no SQL; only a turn that stopped (an
approval, an `ask`) gets its request stored, its lane held and its answer carried back into the
agent loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.agent.loop import TurnResult
from gateway.agent.tools.registry import ToolContext
from gateway.agents.runtime import Roster
from gateway.approvals.answers import Answers
from gateway.approvals.book import ApprovalRow
from gateway.approvals.checkpoint import user_of
from gateway.approvals.waits import WaitingTurn, Waits
from gateway.events import Inbound
from gateway.llm.types import ChatMessage
from gateway.store.rows import SessionRow

Run = Callable[..., Awaitable[TurnResult]]  # the turn's agent run; given a Resume, it goes on


class Host(Protocol):
    """What of the session manager a waiting turn needs: its lane key, its agent (whose loop runs
    an approved call, with that agent's tools) and who its tools act for."""

    roster: Roster

    def key_for(self, inbound: Inbound) -> str: ...

    def tool_context(
        self, session: SessionRow, user_id: str | None, origin: Inbound | None = None
    ) -> ToolContext: ...


@dataclass(frozen=True, slots=True)
class Stop:
    """Where a turn stopped for a person before a restart: the request, and the user message the
    turn answers (its pictures' bytes read back)."""

    row: ApprovalRow
    user_message: ChatMessage

    @property
    def session_id(self) -> int:
        return self.row.session_id


@dataclass(frozen=True, slots=True)
class Waiting:
    waits: Waits
    answers: Answers

    def stop_of(self, inbound_id: int) -> Stop | None:
        """Where this message's turn stopped before a restart (None for nearly every turn: a dict
        lookup)."""
        row = self.waits.point(inbound_id)
        return Stop(row, user_of(row, self.waits.store.path.parent)) if row is not None else None

    def load(self) -> None:
        """At boot, before the stored turns are replayed (gateway/approvals/waits.py `load`)."""
        self.waits.load()

    def resumes(self, inbound_id: int) -> bool:
        """Its turn stopped for a person: it goes on after a restart, whatever its age."""
        return self.waits.point(inbound_id) is not None

    def park(self, cancel_lanes: Callable[[set[str]], None]) -> None:
        """The drain begins: the lanes of turns waiting for a person are cancelled now (not at
        the drain's end), and so are those of turns that reach their wait later."""
        self.waits.park(cancel_lanes)

    async def turn(
        self,
        manager: Host,
        session: SessionRow,
        inbound: Inbound,
        turn_id: str,
        user_msg: ChatMessage,
        stop: Stop | None,
        run: Run,
    ) -> TurnResult | None:
        """Run the turn `t<inbound id>` (or go on from `stop`, where it stopped before a restart);
        its result once nobody is waited for any more, None when it was stopped meanwhile."""
        result = await run() if stop is None else None
        if result is not None and result.waiting is None:
            return result  # an ordinary turn
        agent = manager.roster.of(session)
        tools = agent.tools.of(session)
        turn = WaitingTurn(
            key=manager.key_for(inbound),
            session_id=session.id,
            inbound_id=int(turn_id[1:]),
            turn_id=turn_id,
            inbound=inbound,
            ctx=manager.tool_context(session, inbound.user_id, inbound),
            allowed=agent.tools.allowed(tools, session.platform),
            user_message=user_msg,
            tools=tools.specs,
            loop=agent.loop,
        )
        return await self.waits.carry(turn, result, run)

    def took(self, inbound_id: int, inbound: Inbound) -> bool:
        """A message that answers its sender's open `ask` question: recorded as the answer, no turn
        of its own."""
        row = self.answers.asked(inbound)
        if row is None or not self.answers.answer(row, inbound):
            return False
        waits = self.waits
        waits.store.settle_inbound(
            inbound_id, "answered", [], now=waits.ports.clock(), session_id=row.session_id
        )
        return True
