"""The session manager's side of a turn that waits for a person: what gateway/sessions/manager.py calls.

Thin on purpose: an ordinary turn pays one dict lookup here and no SQL; only a turn that stopped (an approval, an
`ask`) gets its request stored, its lane held and its answer carried back into the agent loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.agent.holds import Resume
from gateway.agent.loop import TurnResult
from gateway.agent.tools.registry import ToolContext
from gateway.approvals.answers import Answers
from gateway.approvals.book import ApprovalRow
from gateway.approvals.waits import WaitingTurn, Waits, user_of
from gateway.events import Inbound
from gateway.llm.types import ChatMessage
from gateway.prompt.session_tools import SessionTools
from gateway.store.rows import SessionRow

Run = Callable[[Resume | None], Awaitable[TurnResult]]


class Host(Protocol):
    """What of the session manager a waiting turn needs: its lane key, and who its tools act for."""

    tools: SessionTools

    def key_for(self, inbound: Inbound) -> str: ...

    def tool_context(self, session: SessionRow, user_id: str | None, origin: Inbound | None = None
                     ) -> ToolContext: ...


@dataclass(frozen=True, slots=True)
class Waiting:
    waits: Waits
    answers: Answers

    def point(self, inbound_id: int) -> ApprovalRow | None:
        """Where this message's turn stopped before a restart (None for nearly every turn: a dict lookup)."""
        return self.waits.point(inbound_id)

    def park(self) -> set[str]:
        """The drain begins: the lanes of turns waiting for a person, to cancel now (not at the drain's end)."""
        return self.waits.park()

    def user_of(self, point: ApprovalRow) -> ChatMessage:
        return user_of(point, self.waits.store.path.parent)

    async def turn(self, manager: Host, session: SessionRow, inbound: Inbound, inbound_id: int,
                   user_msg: ChatMessage, point: ApprovalRow | None, run: Run) -> TurnResult | None:
        """Run the turn (or go on from `point`, where it stopped before a restart); its result once nobody is
        waited for any more, None when it was stopped meanwhile."""
        result = await run(None) if point is None else None
        if result is not None and result.waiting is None:
            return result  # an ordinary turn
        tools = manager.tools.of(session)
        turn = WaitingTurn(key=manager.key_for(inbound), session_id=session.id, inbound_id=inbound_id,
                           turn_id=f"t{inbound_id}", inbound=inbound,
                           ctx=manager.tool_context(session, inbound.user_id, inbound),
                           allowed=manager.tools.allowed(tools, session.platform), user_message=user_msg)
        return await self.waits.carry(turn, result, run)

    def took(self, inbound_id: int, inbound: Inbound) -> bool:
        """A message that answers its sender's open `ask` question: recorded as the answer, no turn of its own."""
        row = self.answers.asked(inbound)
        if row is None or not self.answers.answer(row, inbound):
            return False
        waits = self.waits
        waits.store.settle_inbound(inbound_id, "answered", [], now=waits.ports.clock(), session_id=row.session_id)
        return True
