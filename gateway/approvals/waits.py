"""A turn that waits for a person: stop, ask, wait, go on, exactly once and across restarts.

When the agent loop stops at a held call, `carry` stores the request with the turn as it stood (the
model's messages so far, the calls left: `checkpoint`) and the chunks that ask it, in one
transaction; sends it; and waits (the session's lane waits with it, other sessions go on) for a
decision, the expiry or /stop. A yes is recorded with "executing" in one statement before the call
runs, and the call's result is stored before the model is asked again, so a call runs at most once:
twice tapped, or killed after "executing" (then never again: the model is told the outcome is
unknown). After a restart `load` re-arms what was pending with its remaining time and the turn goes
on from its checkpoint, the same buttons still working. Decisions come in through `decide`
(answers.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gateway.agent.holds import Resume
from gateway.agent.loop import Agent, TurnResult, TurnTools
from gateway.agent.tools.registry import Hold, ToolContext, ToolResult, ToolSpec
from gateway.approvals import request as texts
from gateway.approvals.book import ApprovalBook, ApprovalRow, NewRequest, message_turn
from gateway.approvals.checkpoint import (
    arguments_of,
    checkpoint,
    loads,
    result_of,
    resume_from,
    stored_result,
    unknown_result,
)
from gateway.approvals.closing import Closer
from gateway.approvals.policy import ApprovalPolicy
from gateway.config.settings import Config
from gateway.delivery.outbox import Outbox
from gateway.delivery.stream import Streams
from gateway.events import Adapter, Choices, Inbound, Interactive, OutboundKind
from gateway.llm.types import ChatMessage
from gateway.store.database import Store
from gateway.store.rows import OutboundRow

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]
Run = Callable[[Resume], Awaitable[TurnResult]]  # the turn's agent run, going on from a stop


@dataclass(frozen=True, slots=True)
class WaitPorts:
    """What waiting needs from the rest of the daemon."""

    store: Store
    outbox: Outbox
    adapters: Mapping[str, Adapter]
    clock: Clock
    sleep: Sleep
    streams: Streams | None = None


@dataclass(frozen=True, slots=True)
class WaitingTurn:
    """The turn that waits: its session and lane, the message that started it (its sender may
    answer), who the call runs for, the session's tools and what may run, and the user message it
    answers (stored with the checkpoint)."""

    key: str
    session_id: int
    inbound_id: int
    turn_id: str
    inbound: Inbound
    ctx: ToolContext
    allowed: Collection[str] | None
    user_message: ChatMessage
    loop: Agent  # the turn's agent loop: an approved call runs through its dispatch
    tools: Sequence[ToolSpec] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    state: str  # executing (a yes) | denied | expired | cancelled | answered
    decision: str | None = None  # once | session | deny | an ask's answer
    by: str | None = None  # who decided, as others read it


@dataclass(eq=False)
class Opened:
    """A pending request this process waits on."""

    row: ApprovalRow
    decided: asyncio.Future[Decision]
    timer: asyncio.Task[None] | None = None
    choices: Choices | None = None
    # the lane key of the turn waiting for it, while it waits
    parked: set[str] = field(default_factory=set)


class Waits:
    def __init__(
        self,
        ports: WaitPorts,
        config: Config,
        policy: ApprovalPolicy | None = None,
        *,
        is_admin: Callable[[Inbound], bool] | None = None,
    ) -> None:
        """`policy` is the check at the agents' dispatch points (it remembers "Allow for this
        session", and a tool that always asks is registered on it: `always_ask`); `is_admin` says
        whether a sender is an admin (gateway/access/roles.py; else access.admins as written)."""
        self.ports = ports
        self.store = ports.store
        self.book = ApprovalBook(ports.store)
        admins = frozenset(config.access.admins)
        self.is_admin = is_admin or (lambda i: f"{i.chat.platform}:{i.user_id}" in admins)
        self.minutes = config.tools.approval.timeout_minutes
        self.policy = policy
        self.closer = Closer(
            self.book,
            ports.outbox,
            ports.adapters,
            clock=ports.clock,
            sleep=ports.sleep,
            minutes=self.minutes,
        )
        self.open: dict[int, Opened] = {}  # pending requests by id
        # inbound id → where a turn stopped before a restart goes on
        self.points: dict[int, ApprovalRow] = {}
        self._cancel_lanes: Callable[[set[str]], None] | None = None  # set when the drain begins

    # ------------------------------------------------------------------ the turn's side
    def point(self, inbound_id: int) -> ApprovalRow | None:
        """Where a turn stopped before a restart goes on from (a dict lookup: an ordinary turn pays
        no SQL)."""
        return self.points.get(inbound_id)

    async def carry(
        self, turn: WaitingTurn, result: TurnResult | None, run: Run
    ) -> TurnResult | None:
        """Wait for a person as often as the turn stops (`result.waiting`), going on after each
        answer; the final result, or None when the turn was stopped meanwhile (its request
        cancelled: nothing to answer)."""
        point = self.points.pop(turn.inbound_id, None)
        if point is not None:
            resume = await self._went_on(turn, point)
            if resume is None:
                return None
            result = await run(resume)
        assert result is not None
        while result.waiting is not None:
            row = await self._ask(turn, result)
            resume = await self._answer_of(turn, row)
            if resume is None:
                return None
            result = await run(resume)
        return result

    async def _ask(self, turn: WaitingTurn, result: TurnResult) -> ApprovalRow:
        """Store the request with the turn's checkpoint and its message, then send it."""
        assert result.waiting is not None
        hold, call = result.waiting.hold, result.waiting.call
        chat = turn.inbound.chat
        adapter = self.ports.adapters.get(chat.adapter_key)
        # the answer comes after the request, not in the preview above it
        if self.ports.streams is not None:
            await self.ports.streams.abandon(turn.turn_id, chat, adapter)
        now = self.ports.clock()
        new = NewRequest(
            kind=hold.kind,
            session_id=turn.session_id,
            inbound_id=turn.inbound_id,
            turn_id=turn.turn_id,
            chat=chat,
            requester=turn.inbound.user_id,
            requester_name=turn.inbound.user_name,
            tool=hold.tool or call["name"],
            call_id=call["id"],
            arguments=dict(hold.arguments) or arguments_of(call),
            request=hold.text,
            options=hold.options,
            checkpoint=checkpoint(turn.user_message, result),
            expires_at=now + self._timeout,
        )
        interactive = isinstance(adapter, Interactive)
        row = await self.store.health.write(
            lambda: self.book.open(
                new, lambda rid, code: self._rows(rid, code, turn, hold, interactive), now=now
            )
        )
        self._arm(row)
        log.info(
            "turn waits for a person platform=%s session=%s turn=%s request=%s tool=%s",
            chat.platform,
            turn.session_id,
            turn.turn_id,
            row.id,
            row.tool,
        )
        await self.ports.outbox.deliver(row.message_turn)
        return row

    def _rows(
        self, request_id: int, code: str, turn: WaitingTurn, hold: Hold, interactive: bool
    ) -> list[dict[str, object]]:
        """The request's chunks: its text, and on a surface without buttons how to answer in
        words."""
        text = self._shown(hold.kind, hold.text, hold.options, turn.inbound.user_name, self.minutes)
        if not interactive:
            text = f"{text}\n\n{texts.fallback_text(hold.kind, code, hold.options)}"
        inbound = turn.inbound
        return self.ports.outbox.rows_for(
            message_turn(request_id),
            inbound.chat,
            text,
            kind=OutboundKind.NOTICE,
            reply_to_id=inbound.message_id,
        )

    @staticmethod
    def _shown(
        kind: str, request: str, options: tuple[str, ...], who: str | None, minutes: float | None
    ) -> str:
        if kind == "ask":
            return texts.ask_text(request, options)
        return texts.approval_text(request, who=who, minutes=minutes)

    def shown(self, row: ApprovalRow) -> str:
        """The request's text once it is answered (its outcome line follows; no expiry any more)."""
        return self._shown(row.kind, row.request, row.answers, row.requester_name, None)

    async def _answer_of(self, turn: WaitingTurn, row: ApprovalRow) -> Resume | None:
        """Wait for the decision (the lane waits with it), then what the model is told of it."""
        opened = self.open.get(row.id)
        if opened is None:  # decided before this turn came back to it (a restart in between)
            fresh = self.book.get(row.id)
            return await self._settled(turn, fresh) if fresh is not None else None
        opened.parked.add(turn.key)
        if self._cancel_lanes is not None:  # the drain began as the request went out
            self._cancel_lanes({turn.key})
        try:
            decision = await opened.decided
        except asyncio.CancelledError:
            self._left(row)
            raise
        finally:
            opened.parked.discard(turn.key)
            if opened.decided.done():
                self.open.pop(row.id, None)
        return await self._outcome(turn, row, decision)

    def _left(self, row: ApprovalRow) -> None:
        """The waiting turn was cancelled: by /stop, /new or an interrupting message its request is
        cancelled; by the daemon's drain it stays pending for the next start."""
        if self.draining:
            return
        self.decide(row, Decision("cancelled"))

    async def _outcome(
        self, turn: WaitingTurn, row: ApprovalRow, decision: Decision
    ) -> Resume | None:
        if decision.state == "executing":
            if decision.decision == texts.SESSION and self.policy is not None:
                self.policy.grant(row.session_id, row.tool)
            outcome = await self._run(turn, row)
        elif decision.state in ("answered", "denied", "expired"):
            outcome = ToolResult(
                texts.result_text(decision.state, decision.decision, minutes=self.minutes),
                is_error=decision.state != "answered",
            )
        else:  # cancelled while it waited: nothing to answer
            self.store.set_inbound_status(turn.inbound_id, "interrupted", now=self.ports.clock())
            return None
        return resume_from(row, outcome, self.store.path.parent)

    async def _run(self, turn: WaitingTurn, row: ApprovalRow) -> ToolResult:
        """The approved call, once: "executing" is on record already; its result goes on record
        before the model hears it. Cancelled meanwhile (/stop), it is on record as unknown."""
        try:
            tools = TurnTools(turn.tools, turn.ctx, turn.allowed, None)
            outcome = await turn.loop.dispatch(row.tool, loads(row.arguments), tools, approved=True)
        except asyncio.CancelledError:
            if not self.draining:
                lost = stored_result(unknown_result(self.minutes))
                self.book.finish(row.id, "unknown", lost, now=self.ports.clock())
            raise
        done = stored_result(outcome)
        await self.store.health.write(
            lambda: self.book.finish(row.id, "done", done, now=self.ports.clock())
        )
        log.info(
            "approved call ran request=%s tool=%s ok=%s", row.id, row.tool, not outcome.is_error
        )
        return outcome

    async def _went_on(self, turn: WaitingTurn, row: ApprovalRow) -> Resume | None:
        """After a restart: the turn goes on from where it stopped, never asking the model again for
        it."""
        if row.state == "pending":
            return await self._answer_of(turn, row)
        return await self._settled(turn, row)

    async def _settled(self, turn: WaitingTurn, row: ApprovalRow) -> Resume | None:
        if row.state == "executing":  # it may have run before the daemon died: never run it again
            unknown = unknown_result(self.minutes)
            self.book.finish(row.id, "unknown", stored_result(unknown), now=self.ports.clock())
            log.warning(
                "approved call of request %s (%s) was running when the daemon stopped; its"
                " outcome is unknown and it is not run again",
                row.id,
                row.tool,
            )
            return resume_from(row, unknown, self.store.path.parent)
        if row.state in ("done", "unknown") and row.result:
            return resume_from(row, result_of(loads(row.result)), self.store.path.parent)
        if row.state in ("denied", "expired", "answered"):
            outcome = ToolResult(
                texts.result_text(row.state, row.decision, minutes=self.minutes),
                is_error=row.state != "answered",
            )
            return resume_from(row, outcome, self.store.path.parent)
        self.store.set_inbound_status(turn.inbound_id, "interrupted", now=self.ports.clock())
        return None  # cancelled: the turn was stopped

    # ------------------------------------------------------------------ decisions
    def decide(self, row: ApprovalRow, decision: Decision) -> bool:
        """Record a decision (one conditional UPDATE from pending: the first one wins), wake the
        turn and replace the buttons by the outcome; False when the request was no longer
        pending."""
        if not self.book.decide(
            row.id, decision.state, decision.decision, decision.by, now=self.ports.clock()
        ):
            return False
        # kept until its turn takes the decision (it may not be waiting yet)
        opened = self.open.get(row.id)
        if opened is not None:
            if opened.timer is not None:
                opened.timer.cancel()
            if not opened.decided.done():
                opened.decided.set_result(decision)
        log.info(
            "request %s %s%s",
            row.id,
            decision.state,
            f" ({decision.decision})" if decision.decision else "",
        )
        line = texts.outcome_line(
            decision.state, decision.decision, decision.by, minutes=self.minutes
        )
        self.closer.close_soon(row, self.shown(row), line)
        return True

    def choices_for(self, row: OutboundRow) -> Choices | None:
        """The outbox's hook: the buttons of a request's message while it is pending (a message sent
        late, after its request was decided, goes without them)."""
        turn_id = row.turn_id
        if not turn_id.startswith("wait"):
            return None
        opened = self.open.get(int(turn_id[4:])) if turn_id[4:].isdigit() else None
        return opened.choices if opened is not None and not opened.decided.done() else None

    def pending(self) -> list[Opened]:
        """The requests this process waits on that nobody has answered yet."""
        return [opened for opened in self.open.values() if not opened.decided.done()]

    def parked_keys(self) -> set[str]:
        return {key for opened in self.open.values() for key in opened.parked}

    # ------------------------------------------------------------------ timers and restarts
    @property
    def _timeout(self) -> timedelta:
        return timedelta(minutes=self.minutes)

    def _arm(self, row: ApprovalRow) -> None:
        loop = asyncio.get_running_loop()
        opened = Opened(
            row, loop.create_future(), choices=texts.choices(row.kind, row.token, row.answers)
        )
        self.open[row.id] = opened
        opened.timer = loop.create_task(self._expire_at(row), name=f"approval-expiry:{row.id}")

    async def _expire_at(self, row: ApprovalRow) -> None:
        """Sleep (on the injected clock) until the request expires, however often the sleep wakes
        early."""
        due = datetime.fromisoformat(row.expires_at)
        while (left := (due - self.ports.clock()).total_seconds()) > 0:
            await self.ports.sleep(left)
        self.expire_due()

    def expire_due(self) -> int:
        """Expire every pending request whose time is up (what the timers do; a test calls it after
        moving the clock); returns how many."""
        now = self.ports.clock()
        due = [o.row for o in self.pending() if datetime.fromisoformat(o.row.expires_at) <= now]
        return sum(self.decide(row, Decision("expired")) for row in due)

    def load(self) -> None:
        """At boot, before the stored turns are replayed: every unfinished turn's stop, pending
        requests re-armed with their remaining time, requests whose turn is over cancelled,
        unfinished edits done again."""
        for row in self.book.resumable():
            self.points[row.inbound_id] = row
            if row.state == "pending":
                self._arm(row)
        for row in self.book.orphans():
            self.decide(row, Decision("cancelled"))
        for row in self.book.unclosed():
            line = texts.outcome_line(row.state, row.decision, row.decided_by, minutes=self.minutes)
            self.closer.close_soon(row, self.shown(row), line)

    @property
    def draining(self) -> bool:
        return self._cancel_lanes is not None

    def park(self, cancel_lanes: Callable[[set[str]], None]) -> None:
        """The drain begins: turns waiting for a person stop waiting now, and so does a turn that
        reaches its wait later (their requests stay pending for the next start). `cancel_lanes`
        cancels the lanes of those keys."""
        self._cancel_lanes = cancel_lanes
        cancel_lanes(self.parked_keys())

    async def close(self) -> None:
        for opened in self.open.values():
            if opened.timer is not None:
                opened.timer.cancel()
        await self.closer.close()
