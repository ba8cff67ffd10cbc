"""The pre-reset memory flush: one silent agent call that saves what an ending session learned.

It reuses the session's stored system prompt and tool list (so it reads the provider's warm cache),
sends the transcript and one flush instruction carrying the live MEMORY.md / USER.md, lets only the
memory and skill tools run and discards the text reply. Its state lives in the session row and moves
only forward: pending → running → done | nothing | failed, each step a conditional UPDATE, so a
session is flushed once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from gateway.agent.loop import Agent
from gateway.agent.tools.catalog import MEMORY_TOOLS
from gateway.agent.tools.registry import Callers, ToolContext
from gateway.agents.runtime import Roster
from gateway.config.settings import MemoryConfig
from gateway.errors import StoreUnavailable
from gateway.knowledge.memory import MemoryRights, MemoryStore
from gateway.llm.factory import SessionModels
from gateway.llm.types import ChatMessage, LLMReply
from gateway.prompt.session_tools import SessionTools
from gateway.store.database import Store
from gateway.store.rows import SessionRow, iso
from gateway.store.transcript import history_messages

log = logging.getLogger(__name__)

T = TypeVar("T")
Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]

MAX_ATTEMPTS = 3  # failed model calls in a row before a flush is given up
# attempts started in all, counting those a crash or kill cut off (a flush that kills the daemon
# every time must stop; a few unlucky restarts must not lose the memory)
MAX_STARTS = 6
RETRY_DELAYS = (10.0, 60.0)  # before attempts 2 and 3
FLUSH_MARK = "[Gateway: this conversation is about to be reset"

FLUSH_INSTRUCTION = """\
[Gateway: this conversation is about to be reset. This message comes from the gateway, \
not from the user.]
Before it ends, save what is worth keeping from the conversation above:
{targets}
Add only what is new. Do not overwrite or remove an entry unless this conversation clearly \
supersedes it.
If nothing is worth saving, call no tool. Do not reply to the user: your text answer is discarded.

{files}"""

TARGETS = {
    "user": "- the preferences of the person this conversation "
    "belongs to, and facts about them: the memory tool, "
    'target "user";',
    "memory": "- durable facts, decisions and lessons for every "
    'conversation: the memory tool, target "memory";',
    "chat": '- facts about this group and how it works: the memory tool, target "chat";',
    "skill": "- a reusable multi-step workflow, if one came up: a skill (skill_manage).",
}

KEEP_PRIVATE = (
    "- what the person's profile or this conversation says about them stays in their profile: "
    "never copy it into the shared notes or a chat's notes, which other people's conversations "
    "show;"
)

NOTHING_TO_WRITE = "- nothing: memory cannot be written from this conversation; call no tool."


def flush_instruction(
    memory: MemoryStore, rights: MemoryRights, template: str = FLUSH_INSTRUCTION
) -> str:
    """The instruction with the live memory this flush may write to: the scopes it may write (as the
    session's owner), then each file as it is now (it may have changed since the system prompt was
    written)."""
    targets = [TARGETS["user"]] if rights.person_id is not None else []
    targets += [TARGETS["memory"]] if rights.shared else []
    targets += [TARGETS["chat"]] if rights.chat is not None and rights.chat_writable else []
    if rights.person_id is not None and len(targets) > 1:
        # their profile may reach others' prompts through them
        targets.append(KEEP_PRIVATE)
    targets += [TARGETS["skill"]] if rights.shared else []  # skills follow the shared notes' policy
    files = [
        _file(
            "MEMORY.md (the shared notes) as it is now (it may have changed since your system "
            "prompt was written)" + ("" if rights.shared else "; you may not change it here"),
            "memory",
            memory.shared().read(),
        )
    ]
    if rights.person_id is not None:
        files.append(
            _file("Their profile as it is now", "user", memory.profile(rights.person_id).read())
        )
    if rights.chat is not None:
        files.append(
            _file("This chat's notes as they are now", "chat", memory.chat(rights.chat).read())
        )
    return template.format(targets="\n".join(targets) or NOTHING_TO_WRITE, files="\n\n".join(files))


def _file(title: str, tag: str, text: str) -> str:
    return f"{title}:\n<{tag}>\n{text.strip() or '(empty)'}\n</{tag}>"


async def run_flush_call(
    agent: Agent,
    store: Store,
    *,
    session: SessionRow,
    system: str,
    history: list[ChatMessage],
    instruction: str,
    tools: SessionTools,
    config: MemoryConfig,
    ctx: ToolContext,
    clock: Callable[[], datetime],
) -> int:
    """One silent agent call that may only save (memory
    and skill tools); returns how many tools ran.

    Shared by the pre-reset flush and the flush before compression: same prompt bytes and tool list
    as the session's turns, so the request reads the cached prefix; the text answer is never sent
    nor stored. `ctx` is the session's owner (gateway/access/roles.py): the flush writes the scopes
    they may write, nothing else.
    """

    listed = tools.of(session)
    late: list[Callable[[], None]] = []  # usage the database would not take at once (locked, full)
    if isinstance(agent.llm, SessionModels):  # the model its prompt was built for (/model)
        agent.llm.choose(store.model_choice(session.key))

    def record(reply: LLMReply) -> None:
        def add() -> None:
            store.add_usage(
                session.id,
                reply.usage,
                purpose="flush",
                provider=reply.provider,
                model=reply.model,
                now=clock(),
            )

        try:
            add()
        except StoreUnavailable:  # the flush goes on: what it saves is worth more than this row
            late.append(add)

    async with asyncio.timeout(config.flush_timeout_s):
        result = await agent.run(
            system=system,
            history=history,
            user_message={"role": "user", "content": instruction},
            ctx=ctx,
            tools=listed.specs,
            allowed_tools=memory_tools(tools, session),
            max_iterations=config.flush_max_iterations,
            on_reply=record,
        )
    for add in late:
        await store.health.write(add)
    return result.tool_calls


def memory_tools(tools: SessionTools, session: SessionRow) -> frozenset[str]:
    """What a flush may run: the session's own memory
    and skill tools that the policy still enables."""
    return MEMORY_TOOLS & tools.allowed(tools.of(session), session.platform)


class FlushLedger:
    """The flush state columns of the session row; every transition is one conditional UPDATE."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _update(self, sql: str, args: Sequence[object]) -> int:
        with self.store.tx() as conn:
            return conn.execute(sql, args).rowcount

    def claim(self, session_id: int) -> SessionRow | None:
        """pending → running (one more attempt); None
        when another caller has it or it is finished."""
        won = self._update(
            "UPDATE sessions SET flush_state = 'running', flush_attempts = flush_attempts + 1"
            " WHERE id = ? AND flush_state = 'pending'",
            (session_id,),
        )
        return self.store.session(session_id) if won else None

    def note_error(self, session_id: int, error: str) -> None:
        self._update(
            "UPDATE sessions SET flush_error = ? WHERE id = ? AND flush_state = 'running'",
            (error, session_id),
        )

    def next_attempt(self, session_id: int) -> int:
        self._update(
            "UPDATE sessions SET flush_attempts = flush_attempts "
            "+ 1 WHERE id = ? AND flush_state = 'running'",
            (session_id,),
        )
        return self.store.session(session_id).flush_attempts

    def finish(self, session_id: int, state: str, now: datetime, error: str | None = None) -> bool:
        return (
            self._update(
                "UPDATE sessions SET flush_state = ?, flush_finished_at = ?,"
                " flush_error = COALESCE(?, flush_error) WHERE id = ? AND flush_state = 'running'",
                (state, iso(now), error, session_id),
            )
            == 1
        )

    def release(self, session_id: int, *, uncount: bool) -> None:
        """running → pending, for the next boot. `uncount`: the attempt in progress was stopped by
        the daemon, it did not fail, so it does not count (a stop during a backoff wait leaves the
        failed ones counted)."""
        self._update(
            "UPDATE sessions SET flush_state = 'pending', "
            "flush_attempts = MAX(flush_attempts - ?, 0)"
            " WHERE id = ? AND flush_state = 'running'",
            (int(uncount), session_id),
        )

    def recover(self) -> int:
        """At boot: a flush left `running` was cut off by a crash; make it pending again (its
        attempt counts)."""
        return self._update(
            "UPDATE sessions SET flush_state = 'pending' WHERE flush_state = 'running'", ()
        )

    def pending(self) -> list[int]:
        rows = self.store.all(
            "SELECT id FROM sessions WHERE flush_state = 'pending' ORDER BY ended_at, id"
        )
        return [int(r[0]) for r in rows]


@dataclass(frozen=True, slots=True)
class FlushTiming:
    """The clock a flush reads, the sleep it waits on and the waits before each retry."""

    clock: Clock
    sleep: Sleep = asyncio.sleep
    retry_delays: Sequence[float] = RETRY_DELAYS


class Flusher:
    """Runs flushes in the background, at most `memory.flush_concurrency` at once, from a FIFO of
    session ids."""

    def __init__(
        self,
        *,
        config: MemoryConfig,
        store: Store,
        roster: Roster,
        home: Path,
        db_path: Path,
        timing: FlushTiming,
        callers: Callers | None = None,
    ) -> None:
        self.callers: Callers | None = callers
        self.config = config
        self.store = store
        self.ledger = FlushLedger(store)
        self.roster = roster  # a session is flushed by its own agent: its model, tools and memory
        self.home = home
        self.db_path = db_path
        self.clock = timing.clock
        self.sleep = timing.sleep
        self.retry_delays = tuple(timing.retry_delays)
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self._queued: set[int] = set()
        self._workers: list[asyncio.Task[None]] = []
        self.running = False

    # ---------------------------------------------------------------- the queue
    def request(self, session_id: int) -> None:
        """Queue one ended session's flush. Before start()
        or after stop() the row just stays pending."""
        if not self.running or session_id in self._queued:
            return
        self._queued.add(session_id)
        self._queue.put_nowait(session_id)

    def start(self) -> int:
        """Start the workers and resume what a previous
        run left pending or running; returns how many."""
        recovered = self.ledger.recover()
        if recovered:
            log.info("flush: %s flush(es) were cut off by a stop; resuming", recovered)
        self.running = True
        loop = asyncio.get_running_loop()
        self._workers = [
            loop.create_task(self._work(), name=f"flush-worker-{i}")
            for i in range(self.config.flush_concurrency)
        ]
        pending = self.ledger.pending()
        for session_id in pending:
            self.request(session_id)
        return len(pending)

    async def wait_idle(self) -> None:
        await self._queue.join()

    async def stop(self, timeout: float) -> int:
        """Give queued flushes up to `timeout` seconds, then cancel the rest; they stay pending for
        next boot."""
        if self.running and self._queued:
            try:
                await asyncio.wait_for(self._queue.join(), timeout)
            except TimeoutError:
                log.info(
                    "flush: %s flush(es) did not fit the drain deadline; they stay pending",
                    len(self._queued),
                )
        self.running = False
        left = len(self._queued)  # queued or in flight; cancelled ones go back to pending
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        self._queued.clear()
        return left

    async def _work(self) -> None:
        while True:
            session_id = await self._queue.get()
            try:
                await self.flush(session_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # a task root: one broken flush must not stop the others
                log.exception("flush of session %s crashed", session_id)
            finally:
                self._queued.discard(session_id)
                self._queue.task_done()

    async def _write(self, call: Callable[[], T]) -> T:
        """A step of the flush's state, waiting (off the loop) while the database takes no writes:
        given up here, the flush would stay pending until the next restart."""
        return await self.store.health.write(call)

    # ---------------------------------------------------------------- one flush
    async def flush(self, session_id: int) -> str | None:
        """Flush one session now; returns its final state, or None if it was not ours to flush."""
        session = await self._write(lambda: self.ledger.claim(session_id))
        if session is None:
            return None
        settled = await self._settle_without_running(session)
        if settled is not None:
            return settled
        attempts, failures = session.flush_attempts, 0
        while True:
            try:
                tool_calls = await self._run(session)
            except asyncio.CancelledError:
                self._release(session_id, uncount=True)
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is retried, then recorded
                failures += 1
                if await self._gave_up(session_id, exc, attempts, failures):
                    return "failed"
                attempts = await self._write(lambda: self.ledger.next_attempt(session_id))
                continue
            await self._write(lambda: self.ledger.finish(session_id, "done", self.clock()))
            log.info(
                "flush session=%s done attempts=%s tool_calls=%s", session_id, attempts, tool_calls
            )
            return "done"

    async def _settle_without_running(self, session: SessionRow) -> str | None:
        """'failed' when kills cut it off too often, 'nothing'
        when there is nothing to save, else None."""
        if session.flush_attempts > MAX_STARTS:
            error = f"cut off {session.flush_attempts - 1} times before it could finish"
            await self._write(lambda: self.ledger.finish(session.id, "failed", self.clock(), error))
            log.warning("flush session=%s failed: %s", session.id, error)
            return "failed"
        skip = self._skip_reason(session)
        if skip is not None:
            log.info("flush session=%s: nothing to do (%s)", session.id, skip)
            await self._write(lambda: self.ledger.finish(session.id, "nothing", self.clock()))
            return "nothing"
        return None

    async def _gave_up(self, session_id: int, exc: Exception, attempts: int, failures: int) -> bool:
        """Record a failed attempt; True when it was the
        last one allowed, else wait out the retry delay."""
        error = _describe(exc)
        await self._write(lambda: self.ledger.note_error(session_id, error))
        if failures >= MAX_ATTEMPTS or attempts >= MAX_STARTS:
            await self._write(lambda: self.ledger.finish(session_id, "failed", self.clock(), error))
            log.warning(
                "flush session=%s failed after %s attempts: %s", session_id, attempts, error
            )
            return True
        delay = self.retry_delays[min(failures - 1, len(self.retry_delays) - 1)]
        log.info(
            "flush session=%s attempt %s failed (%s); retry in %ss",
            session_id,
            attempts,
            error,
            delay,
        )
        try:
            await self.sleep(delay)
        except asyncio.CancelledError:
            self._release(session_id, uncount=False)
            raise
        return False

    def _release(self, session_id: int, *, uncount: bool) -> None:
        """Stopped: back to pending for the next boot (which also recovers a row left running,
        should the database not take even this write now)."""
        try:
            self.ledger.release(session_id, uncount=uncount)
        except StoreUnavailable as exc:
            log.warning("flush session=%s stays running until the next start (%s)", session_id, exc)

    def _skip_reason(self, session: SessionRow) -> str | None:
        if not self.config.flush_enabled:
            return "memory.flush_enabled is false"
        if session.system_prompt is None:
            return "no turn ever ran"
        if "memory" not in memory_tools(self.roster.of(session).tools, session):
            return "the memory tool is not enabled"
        count = self.store.count_messages(session.id)
        if count < self.config.flush_min_messages:
            return (
                f"{count} messages, fewer than "
                f"memory.flush_min_messages={self.config.flush_min_messages}"
            )
        return None

    async def _run(self, session: SessionRow) -> int:
        assert session.system_prompt is not None
        ctx = owner_context(self.callers, session, self.home, self.db_path)
        agent = self.roster.of(session)
        return await run_flush_call(
            agent.loop,
            self.store,
            session=session,
            system=session.system_prompt,
            # with its pictures: the same prefix as the session's turns, so the provider's cache
            # still holds
            history=history_messages(self.store.history(session.id), home=self.home),
            instruction=flush_instruction(agent.memory, ctx.memory),
            tools=agent.tools,
            config=self.config,
            ctx=ctx,
            clock=self.clock,
        )


def owner_context(
    callers: Callers | None, session: SessionRow, home: Path, db_path: Path
) -> ToolContext:
    """Whom a flush acts for: the session's owner (`callers`); without people, nobody (it may save
    skills only)."""
    if callers is not None:
        return callers.owner(session)
    return ToolContext(
        session_id=session.id,
        platform=session.platform,
        chat_type=session.chat_type,
        user_id=session.user_id,
        home=home,
        db_path=db_path,
        chat_id=session.chat_id,
        agent=session.agent,
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc) or exc.__class__.__name__
    return f"{exc.__class__.__name__}: {text}"[:500]
