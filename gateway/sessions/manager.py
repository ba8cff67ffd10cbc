"""The session manager: inbound message → session →
one turn at a time per session → reply delivered.

Write-ahead: the inbound row is stored before the platform is acknowledged; the turn's messages, its
reply chunks and the inbound's `answered` status are stored in one transaction; only then is
anything sent. A kill -9 anywhere leaves rows the next boot resumes from (see `replay`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial

from gateway.agent.holds import Resume
from gateway.agent.loop import TurnResult
from gateway.agent.tools.registry import Callers, ToolContext
from gateway.agents.runtime import Roster
from gateway.approvals.turns import Waiting
from gateway.config.settings import Config
from gateway.delivery.outbox import Outbox
from gateway.delivery.stream import NO_PREVIEW, Live, Streams
from gateway.errors import LLMError, StoreUnavailable, TurnGone
from gateway.events import (
    Adapter,
    ChatRef,
    Inbound,
    OutboundKind,
    SubmitOutcome,
    SubmitResult,
    TypingIndicator,
    command_word,
)
from gateway.llm.types import ChatMessage, LLMReply
from gateway.media.turns import AttachmentTurns, TurnMedia
from gateway.prompt.session_prompt import ContextCompressor, SessionPrompt
from gateway.sessions.catchup import replay
from gateway.sessions.keys import busy_policy, inbound_key
from gateway.sessions.lanes import Lane, Lanes, Touches
from gateway.sessions.lifecycle import NoLifecycle, SessionHooks, resolve_policy
from gateway.sessions.outage import StoreOutage, model_call
from gateway.sessions.turn_text import failure_text, reset_notice, user_message
from gateway.store.database import Store
from gateway.store.rows import SessionRow, iso
from gateway.store.transcript import decode_inbound, session_history, well_formed
from gateway.telemetry.metrics import Metrics, error_kind

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
QUEUE_FULL_TEXT = (
    "I'm still working through your earlier messages; please wait a moment before sending more."
)
BUSY_TEXT = "Still working on your previous message; I'll answer this one next."


CommandHandler = Callable[["SessionManager", Inbound, str], Awaitable["str | None"]]
Gate = Callable[[Inbound], Awaitable["SubmitResult | None"]]


@dataclass(frozen=True, slots=True)
class TurnPorts:
    """Where a turn's answer goes: the outbox and the adapters it sends through, the live
    previews (None: none) and the attachments read into the turn (None: text only)."""

    outbox: Outbox
    adapters: dict[str, Adapter]  # by adapter key: `telegram`, `telegram@family` (a second bot)
    streams: Streams | None = None
    media: AttachmentTurns | None = None


@dataclass(frozen=True, slots=True)
class SessionServices:
    """Optional services around each turn; each None leaves its feature off."""

    hooks: SessionHooks | None = None  # lifecycle: resets, pre-reset flush
    gate: Gate | None = None  # access: may answer an inbound itself
    commands: CommandHandler | None = None
    compressor: ContextCompressor | None = None
    metrics: Metrics | None = None
    callers: Callers | None = None


class SessionManager:
    def __init__(
        self,
        *,
        config: Config,
        store: Store,
        roster: Roster,
        clock: Clock,
        ports: TurnPorts,
        services: SessionServices = SessionServices(),
    ) -> None:
        self.config = config
        self.callers = services.callers
        self.store = store
        self.roster = roster  # every agent's parts, and the bindings; a session takes its agent's
        self.outbox = ports.outbox
        self.adapters = ports.adapters
        self.clock = clock
        self.hooks: SessionHooks = services.hooks or NoLifecycle()
        self.gate = services.gate
        self.commands = services.commands
        self.metrics = services.metrics
        self.outage = StoreOutage(store, ports.outbox)
        self.streams = ports.streams
        self.media = ports.media
        self.waiting: Waiting | None = None  # turns that wait for a person (gateway/approvals/)
        self._prompt = SessionPrompt(
            store=store,
            parts=roster.get,
            clock=clock,
            compressor=services.compressor,
            callers=services.callers,
        )
        self._lanes = Lanes(self._turn, self._mark)
        # platform → (its adapter, has typing())
        self._can_type: dict[str, tuple[Adapter, bool]] = {}
        self._turns = asyncio.Semaphore(config.sessions.max_concurrent_turns)
        self._touched = Touches()
        self.turns_done = 0

    # ------------------------------------------------------------------ intake
    def key_for(self, inbound: Inbound) -> str:
        return inbound_key(self.config, inbound)  # its agent's session, reached by its bot account

    async def submit(self, inbound: Inbound) -> SubmitResult:
        """Gate, store (dedupe) and queue one message;
        returns once it is durable, never after the turn."""
        if not self._lanes.accepting:
            return SubmitResult(SubmitOutcome.REFUSED, "shutting down")
        inbound = self.roster.route(well_formed(inbound))  # its agent: chosen here, once, stored
        key = self.key_for(inbound)
        try:
            if self.gate is not None:
                verdict = await self.gate(inbound)
                if verdict is not None:
                    return verdict
            status = "running" if self._lanes.idle(key) else "pending"  # running: it starts now
            inbound_id = await self.outage.intake(inbound, status=status)
        except StoreUnavailable as exc:
            self.outage.not_stored(inbound, exc)
            raise
        if inbound_id is None:
            log.info(
                "duplicate %s message %s in chat %s ignored",
                inbound.chat.platform,
                inbound.message_id,
                inbound.chat.chat_id,
            )
            return SubmitResult(SubmitOutcome.DUPLICATE)
        if await self._command(inbound_id, inbound, key):
            return SubmitResult(SubmitOutcome.ACCEPTED, "command")
        if self.waiting is not None and self.waiting.took(inbound_id, inbound):  # answers an `ask`
            return SubmitResult(SubmitOutcome.ACCEPTED, "answer")
        return await self._enqueue(key, inbound_id, inbound)

    async def _command(self, inbound_id: int, inbound: Inbound, key: str) -> bool:
        """Run an in-chat command and answer it; False when the text is not one of ours (it goes to
        the agent)."""
        if not command_word(inbound.text) or self.commands is None:
            return False
        reply = await self.commands(self, inbound, key)
        if reply is None:
            return False
        await self._settle(inbound_id, "answered", f"c{inbound_id}", inbound, reply, wait=False)
        return True

    async def _settle(
        self,
        inbound_id: int,
        status: str,
        turn_id: str,
        inbound: Inbound,
        text: str,
        *,
        kind: OutboundKind = OutboundKind.NOTICE,
        session_id: int | None = None,
        wait: bool = True,
    ) -> None:
        """Give an inbound its final status and record its
        answer in one transaction, then send the answer.

        On the submit path (`wait=False`) the answer goes out in the background: the platform's ack
        (Telegram's polling offset, Slack's 3 s) must not wait behind a 429 pause on a command
        answer.
        """
        rows = self.outbox.rows_for(
            turn_id, inbound.chat, text, kind=kind, reply_to_id=inbound.message_id
        )
        touched_at = self._touched.at(inbound_id, session_id)
        try:
            await self.outage.write(
                lambda: self.store.settle_inbound(
                    inbound_id,
                    status,
                    rows,
                    now=self.clock(),
                    session_id=session_id,
                    touched_at=touched_at,
                )
            )
        except TurnGone:
            return await self._gone(inbound, turn_id)
        self._answered(inbound, inbound_id)
        if wait:
            await self.outbox.deliver(turn_id)
        else:
            self.outbox.deliver_soon(turn_id)

    async def _enqueue(self, key: str, inbound_id: int, inbound: Inbound) -> SubmitResult:
        lane = self._lanes.open(key)
        busy = self._lanes.busy(lane)
        policy = busy_policy(self.roster.of(inbound).config, inbound.chat.platform)  # its agent's
        if busy and policy == "interrupt":
            self._lanes.interrupt(lane)
        elif len(lane.queue) >= self.config.sessions.queue_cap:
            await self._settle(
                inbound_id, "refused", f"q{inbound_id}", inbound, QUEUE_FULL_TEXT, wait=False
            )
            return SubmitResult(SubmitOutcome.REFUSED, "queue full")
        elif busy and self._lanes.busy_notice_due(lane, self.clock()):
            self.outbox.post_soon(
                f"b{inbound_id}", inbound.chat, BUSY_TEXT, reply_to_id=inbound.message_id
            )
        self._lanes.push(lane, inbound_id)
        return SubmitResult(SubmitOutcome.ACCEPTED)

    def _mark(self, inbound_id: int, status: str) -> None:
        touched = self._touched.take(inbound_id)
        self.store.set_inbound_status(inbound_id, status, now=self.clock(), touched=touched)

    # ------------------------------------------------------------------ sessions
    def open_session(
        self, key: str, inbound: Inbound, now: datetime
    ) -> tuple[SessionRow, str | None]:
        """The key's active session, or a new one; returns (session, why the previous one ended, if
        it just did)."""
        current = self.store.active_session(key)
        ended_reason: str | None = None
        if current is not None:
            reason = self.hooks.expired(current, now)
            if reason is None:
                return current, None
            if self.store.end_session(current.id, reason=reason, now=now, flush_state="pending"):
                self.hooks.session_ended(self.store.session(current.id), reason)
            ended_reason = reason
        parent = current or self.store.latest_session(key)
        if current is None and parent is not None and parent.end_reason in ("idle", "daily"):
            # a timer closed it: this is the first message since, say so once
            ended_reason = parent.end_reason
        chat, llm = inbound.chat, self.roster.of(inbound).llm
        session = self.store.create_session(
            key=key,
            platform=chat.platform,
            chat_type=chat.chat_type,
            chat_id=chat.chat_id,
            thread_id=chat.thread_id,
            user_id=inbound.user_id,
            parent_id=parent.id if parent else None,
            model=llm.model,
            provider=llm.provider,
            now=now,
            agent=inbound.agent,
            via=chat,
        )
        return session, ended_reason

    def end_session(self, session: SessionRow, reason: str) -> bool:
        if self.store.end_session(
            session.id, reason=reason, now=self.clock(), flush_state="pending"
        ):
            self.hooks.session_ended(self.store.session(session.id), reason)
            return True
        return False

    def tool_context(
        self, session: SessionRow, user_id: str | None, origin: Inbound | None = None
    ) -> ToolContext:
        """Who the turn's tools act for: the sender, as a
        person with their memory rights (`callers`)."""
        if self.callers is not None:
            ctx = self.callers.asker(
                session,
                user_id,
                origin.user_name if origin else None,
                origin.username if origin else None,
            )
            return replace(ctx, origin=origin)
        return ToolContext(
            session_id=session.id,
            platform=session.platform,
            chat_type=session.chat_type,
            user_id=user_id,
            home=self.config.home,
            db_path=self.config.db_path,
            chat_id=session.chat_id,
            origin=origin,
        )

    # ------------------------------------------------------------------ the turn
    async def _turn(self, inbound_id: int) -> None:
        await self.outage.turn(lambda: self._turn_once(inbound_id))
        self._touched.take(inbound_id)  # cut off or crashed: kept for _mark

    async def _turn_once(self, inbound_id: int) -> None:
        try:
            row = self.store.inbound(inbound_id)
        except TurnGone:
            return await self._gone(None, f"t{inbound_id}")
        if row.status not in ("pending", "running"):
            return
        inbound = decode_inbound(row.payload)
        stop = self.waiting.stop_of(inbound_id) if self.waiting else None  # stopped, then restarted
        if inbound.group_id and self.media is not None and not stop:  # an album: one turn for all
            inbound = await self.media.gather(inbound_id, inbound)
        now = self.clock()
        session, ended = (
            self.open_session(self.key_for(inbound), inbound, now)
            if stop is None
            else (self.store.session(stop.session_id), None)
        )
        if row.status == "pending":  # it waited behind another turn (or a restart)
            self.store.mark_running(inbound_id)
        if inbound.chat.platform != "cron":  # idle counts real user messages only
            self._touched.start(inbound_id, session.id, now)  # stored with the turn's end
            self.hooks.session_touched(replace(session, last_user_at=iso(now)), now)
        turn = f"t{inbound_id}"
        # One INFO line per turn ("turn done" or "turn failed"); its start is for debugging.
        log.debug(
            "turn start platform=%s session=%s turn=%s", inbound.chat.platform, session.id, turn
        )
        log.debug(
            "turn text platform=%s session=%s turn=%s text=%r",
            inbound.chat.platform,
            session.id,
            turn,
            inbound.text,
        )
        reset = self.roster.of(session).config.session_reset  # its agent's
        if ended and resolve_policy(reset, session.platform, session.chat_type).notify:
            await self.outbox.post(f"r{inbound_id}", inbound.chat, reset_notice(ended))
        media = await self._attachments(inbound_id, inbound, session) if stop is None else None
        if media is not None and media.all_failed and not inbound.text.strip():
            assert media.notice is not None  # nothing else to answer: what went wrong is the answer
            await self._settle(
                inbound_id,
                "answered",
                f"m{inbound_id}",
                inbound,
                media.notice,
                session_id=session.id,
            )
            return
        # the final model call: its usage is stored in the turn's transaction
        held: list[LLMReply] = []
        try:
            await self._answer(inbound_id, inbound, session, ended, turn, now, held, media)
        finally:
            for reply in held:  # the answer was not stored: the call goes on record anyway
                self.outage.record_usage(session.id, model_call(reply), self.clock())

    async def _attachments(
        self, inbound_id: int, inbound: Inbound, session: SessionRow
    ) -> TurnMedia | None:
        """The message's files made ready for the model;
        what could not be used is told to the user first."""
        if not inbound.attachments or self.media is None:
            return None
        self._prompt.choose(session)  # pictures or notes: by the model that answers (/model)
        media = await self.media.prepare(inbound, session_id=session.id, inbound_id=inbound_id)
        if not (media.all_failed and not inbound.text.strip()):
            # else the notice is the answer (_turn_once)
            turn = f"m{inbound_id}"
            if self.media.record_notice(
                inbound,
                media,
                lambda text: self.outbox.rows_for(
                    turn,
                    inbound.chat,
                    text,
                    kind=OutboundKind.NOTICE,
                    reply_to_id=inbound.message_id,
                ),
            ):
                await self.outbox.deliver(turn)
        return media

    async def _answer(
        self,
        inbound_id: int,
        inbound: Inbound,
        session: SessionRow,
        ended: str | None,
        turn: str,
        now: datetime,
        held: list[LLMReply],
        media: TurnMedia | None = None,
    ) -> None:
        try:
            prompt = self._prompt.ensure(session)
            with self.store.one_look():  # other processes' changes: one look, history and people
                past: Sequence[ChatMessage] = session_history(self.store, session.id)
                ctx = self.tool_context(session, inbound.user_id, inbound)
            stop = self.waiting.stop_of(inbound_id) if self.waiting else None
            user_msg = stop.user_message if stop else user_message(inbound, ended, media)
            prompt, past = await self._prompt.compress_if_needed(session, prompt, past, user_msg)
            run = partial(
                self._run_agent, session, inbound, ctx, prompt, past, user_msg, held, turn
            )
            result = await (
                self.waiting.turn(self, session, inbound, turn, user_msg, stop, run)
                if self.waiting
                else run()
            )
            if result is None:  # stopped while it waited for a person: nothing to answer
                return self._touched.write(inbound_id, session.id, self.store.touch_user)
        except (LLMError, TimeoutError) as exc:
            log.warning(
                "turn failed platform=%s session=%s turn=%s: %s",
                inbound.chat.platform,
                session.id,
                turn,
                exc,
            )
            self._count_turn(inbound.chat.platform, "error", now, error_kind(exc))
            await self._settle(
                inbound_id,
                "failed",
                f"e{inbound_id}",
                inbound,
                failure_text(exc),
                kind=OutboundKind.ERROR,
                session_id=session.id,
            )
            return
        except (asyncio.CancelledError, StoreUnavailable):
            raise  # cancelled: replay takes over; storage: the outage runs the turn again
        except Exception:
            log.exception(
                "turn crashed platform=%s session=%s turn=%s",
                inbound.chat.platform,
                session.id,
                turn,
            )
            self._count_turn(inbound.chat.platform, "crash", now, "turn_crash")
            await self._settle(
                inbound_id,
                "failed",
                f"e{inbound_id}",
                inbound,
                "Sorry, something went wrong on my side. Please try again.",
                kind=OutboundKind.ERROR,
                session_id=session.id,
            )
            return
        rows = self.outbox.rows_for(turn, inbound.chat, result.text, reply_to_id=inbound.message_id)
        if self.outbox.voice is not None:  # its spoken copy, after the text (delivery/voice.py)
            rows += self.outbox.voice.rows_for(turn, inbound, result.text)
        messages = [
            {
                **user_msg,
                "user_id": inbound.user_id,
                "user_name": inbound.user_name,
                "platform_message_id": inbound.message_id,
            },
            *result.messages,
        ]
        calls, touched_at = [model_call(r) for r in held], self._touched.at(inbound_id, session.id)
        try:
            await self.outage.write(
                lambda: self.store.complete_turn(
                    session.id,
                    messages,
                    rows,
                    inbound_id,
                    now=self.clock(),
                    turn_id=turn,
                    calls=calls,
                    touched_at=touched_at,
                )
            )
        except TurnGone:
            self._count_turn(inbound.chat.platform, "dropped", now)
            return await self._gone(inbound, turn)
        held.clear()
        self._answered(inbound, inbound_id)
        self.turns_done += 1
        self._count_turn(inbound.chat.platform, "ok", now)
        log.info(
            "turn done platform=%s session=%s turn=%s iterations=%s tools=%s",
            inbound.chat.platform,
            session.id,
            turn,
            result.iterations,
            result.tool_calls,
        )
        await self.outbox.deliver_chat(inbound.chat)

    def _count_turn(
        self, platform: str, outcome: str, started: datetime, error: str | None = None
    ) -> None:
        if self.metrics is not None:
            self.metrics.turn(platform, outcome, (self.clock() - started).total_seconds())
            if error is not None:
                self.metrics.error(error)

    async def _run_agent(
        self,
        session: SessionRow,
        inbound: Inbound,
        ctx: ToolContext,
        prompt: str,
        history: Sequence[ChatMessage],
        user_msg: ChatMessage,
        held: list[LLMReply],
        turn: str,
        resume: Resume | None = None,
    ) -> TurnResult:
        if resume is not None:  # after a wait for a person: who they are now
            ctx = self.tool_context(session, inbound.user_id, inbound)
        agent = self.roster.of(session)
        tools = agent.tools.of(session)
        allowed = agent.tools.allowed(tools, session.platform)

        def record(reply: LLMReply) -> None:
            # Tools run next, maybe for long: on record now. The answer's usage goes in with it (one
            # transaction fewer per turn), and so does a call whose record failed.
            call = model_call(reply)
            if not reply.tool_calls or not self.outage.record_usage(session.id, call, self.clock()):
                held.append(reply)

        async with self._turns:
            adapter = self.adapters.get(inbound.chat.adapter_key)
            async with (
                self._typing(adapter, inbound.chat),
                self._preview(turn, inbound, adapter) as live,
            ):
                async with asyncio.timeout(self.config.agent.turn_timeout_s):
                    return await agent.loop.run(
                        system=prompt,
                        history=history,
                        user_message=user_msg,
                        ctx=ctx,
                        tools=tools.specs,
                        allowed_tools=allowed,
                        on_reply=record,
                        stream=live.sink,
                        on_tool=live.on_tool,
                        resume=resume,
                    )

    def _preview(
        self, turn: str, inbound: Inbound, adapter: Adapter | None
    ) -> AbstractAsyncContextManager[Live]:
        return (
            self.streams.open(turn, inbound, adapter)
            if self.streams is not None
            else nullcontext(NO_PREVIEW)
        )

    def _typing(
        self, adapter: Adapter | None, chat: ChatRef
    ) -> AbstractAsyncContextManager[object]:
        if adapter is None:
            return nullcontext()
        known = self._can_type.get(adapter.platform)
        if known is None or known[0] is not adapter:
            # isinstance on a runtime Protocol costs ~10 µs: once each
            known = self._can_type[adapter.platform] = (
                adapter,
                isinstance(adapter, TypingIndicator),
            )
        return adapter.typing(chat) if known[1] else nullcontext()  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ restart and shutdown
    async def replay(self) -> tuple[int, int]:
        return await replay(self)  # stored but unanswered messages, oldest first (catchup.py)

    def stop_accepting(self) -> None:
        self._lanes.accepting = False
        if self.waiting is not None:  # those turns go on after the restart
            self.waiting.park(self._lanes.cancel_lanes)

    def busy_lanes(self) -> int:
        return self._lanes.busy_lanes()

    def lane(self, key: str) -> Lane | None:
        return self._lanes.lane(key)

    async def wait_idle(self) -> None:
        """Wait until every queued turn has finished and every answer sent in the background has
        gone out."""
        await self._lanes.wait_idle(self.outbox.wait_background)

    async def cancel_all(self) -> None:
        await self._lanes.cancel_all()

    def _answered(self, inbound: Inbound, inbound_id: int) -> None:
        """From here the turn only delivers what is stored, and the user may already be reading it:
        a new message does not find it busy, and /stop, /new or an interrupt leave it alone
        (cancelling it mid-send would mark an answered message interrupted and leave the chunk in
        flight to be sent again)."""
        self._lanes.mark_answered(self.key_for(inbound), inbound_id)

    def stop_turn(self, key: str) -> bool:
        return self._lanes.stop_turn(key)

    async def _gone(self, inbound: Inbound | None, turn: str) -> None:
        """`gateway users forget` erased the message as its turn ran (or waited): nothing stored or
        sent, no error."""
        log.info(
            "turn dropped platform=%s turn=%s: its message was deleted (its person was forgotten)",
            inbound.chat.platform if inbound else "?",
            turn,
        )
        if inbound is not None and self.streams is not None:
            # a preview of the answer comes down too
            adapter = self.adapters.get(inbound.chat.adapter_key)
            await self.streams.abandon(turn, inbound.chat, adapter)
