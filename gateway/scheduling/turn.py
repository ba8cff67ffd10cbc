"""One run of a job as an agent turn, and what a run leaves in the chat it belongs to.

The run gets a session of its own on the `cron` platform (its hint: nobody is there; the tools of a
chat turn minus `schedule` unless allowed) and acts as the job's creator in their chat (their memory
and search scope). Its answer, the run's end and a record in the chat's session (so a follow-up has
context) are stored in one transaction; only then does the outbox send it, exactly once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gateway.agent.loop import Agent, TurnResult
from gateway.agent.tools.registry import ToolContext, ToolSpec
from gateway.errors import LLMError
from gateway.events import Inbound, OutboundKind
from gateway.llm.types import ChatMessage, LLMReply
from gateway.prompt.session_prompt import PromptSource, SessionPrompt
from gateway.prompt.session_tools import SessionTools, ToolSource
from gateway.scheduling import text
from gateway.scheduling.jobstore import JobRow, JobStore, RunRecord
from gateway.sessions.manager import SessionManager
from gateway.sessions.turn_text import plain_reason
from gateway.store.rows import ModelCall, SessionRow, parse_iso

log = logging.getLogger(__name__)


def origin_of(job: JobRow, now: datetime) -> Inbound:
    """The job's creator in its chat (through its bot account, to its agent), as the gate and the
    tools see a person: what it was made from."""
    return Inbound(
        chat=job.chat,
        user_id=job.user_id,
        text="",
        message_id=f"job{job.id}",
        received_at=now,
        user_name=job.user_name,
        username=job.username,
        space_id=job.space_id,
        roles=job.role_ids,
        agent=job.agent,
    )


class RunTools:
    """The tools a run's session gets: the `cron` platform's (agent.tools_by_platform.cron, else
    agent.tools), without `schedule` unless schedule.jobs_may_schedule, so a job cannot quietly
    multiply itself, and without `ask` (nobody is there to answer)."""

    def __init__(self, catalog: ToolSource, *, schedule: bool) -> None:
        self.catalog = catalog
        self.schedule = schedule

    def current(self, platform: str) -> tuple[ToolSpec, ...]:
        return tuple(s for s in self.catalog.current(platform) if self._keeps(s.name))

    def enabled(self, name: str, platform: str) -> bool:
        return self._keeps(name) and self.catalog.enabled(name, platform)

    def split(
        self, specs: Sequence[ToolSpec], window: int
    ) -> tuple[tuple[ToolSpec, ...], tuple[ToolSpec, ...]]:
        return self.catalog.split(specs, window)

    def _keeps(self, name: str) -> bool:
        return name != "ask" and (self.schedule or name != "schedule")


@dataclass(frozen=True, slots=True)
class RunParts:
    """A job's agent as its runs see it: the agent's loop and prompt, the run's tools (RunTools)."""

    loop: Agent
    prompts: PromptSource
    tools: SessionTools


class JobTurn:
    """Runs a job as its own agent (the one it was made with), and posts through its bot account."""

    def __init__(self, *, manager: SessionManager, jobs: JobStore, schedule: bool = False) -> None:
        self.manager = manager
        self.jobs = jobs
        self.store = manager.store
        self.outbox = manager.outbox
        self.clock = manager.clock
        self.config = manager.config
        self.schedule = schedule  # schedule.jobs_may_schedule
        self._parts: dict[str, RunParts] = {}
        # A run is one turn in a fresh session: nothing to compress, and its prompt and tools are
        # fixed once.
        self.prompt = SessionPrompt(
            store=self.store, parts=self.parts, clock=self.clock, callers=manager.callers
        )

    def parts(self, agent: str) -> RunParts:
        found = self._parts.get(agent)
        if found is None:
            runtime = self.manager.roster.get(agent)
            tools = SessionTools(
                store=self.store,
                clock=self.clock,
                catalog=RunTools(runtime.catalog, schedule=self.schedule),
            )
            found = self._parts[agent] = RunParts(runtime.loop, runtime.prompts, tools)
        return found

    async def run(self, job: JobRow, run_id: int, due: datetime) -> None:
        """Run the job's turn and post its answer; a model
        failure posts the job's own words instead."""
        now = self.clock()
        origin, llm = origin_of(job, now), self.parts(job.agent).loop.llm
        session = self.store.create_session(
            key=f"cron:job{job.id}:run{run_id}",
            platform="cron",
            chat_type=job.chat_type,
            chat_id=f"job{job.id}",
            thread_id=None,
            user_id=job.user_id,
            parent_id=None,
            model=llm.model,
            provider=llm.provider,
            now=now,
            agent=job.agent,
            via=job.chat,
        )
        self.jobs.set_run_session(run_id, session.id)
        user_msg: ChatMessage = {"role": "user", "content": text.run_instruction(job, due, now)}
        held: list[LLMReply] = []
        try:
            result = await self._agent(session, origin, user_msg, held)
        except (LLMError, TimeoutError) as exc:
            log.warning("job %s run %s failed: %s", job.id, run_id, exc)
            self._count("error", now)
            self._finish(
                job,
                run_id,
                due,
                f"jf{run_id}",
                text.failed(job, plain_reason(exc), self.following(job.id)),
                "it could not run",
                status="failed",
                error=str(exc) or type(exc).__name__,
                session=session,
                messages=[user_msg],
                held=held,
            )
        else:
            self._count("ok", now)
            log.info(
                "job %s run %s done session=%s iterations=%s tools=%s",
                job.id,
                run_id,
                session.id,
                result.iterations,
                result.tool_calls,
            )
            self._finish(
                job,
                run_id,
                due,
                f"j{run_id}",
                text.answer(job, result.text),
                "it posted this",
                status="done",
                session=session,
                messages=[user_msg, *result.messages],
                held=held,
            )
        finally:
            self.store.end_session(
                session.id, reason="job run over", now=self.clock(), flush_state=None
            )
        await self.outbox.deliver_chat(job.chat)

    async def _agent(
        self, session: SessionRow, origin: Inbound, user_msg: ChatMessage, held: list[LLMReply]
    ) -> TurnResult:
        prompt = self.prompt.ensure(session)
        chat = origin.chat
        # The person's memory scope (gateway/access/roles.py
        # reads the job's chat for its `cron` session).
        ctx = (
            self.manager.tool_context(session, origin.user_id, origin)
            if self.manager.callers is not None
            else ToolContext(
                session_id=session.id,
                platform=chat.platform,
                chat_type=chat.chat_type,
                user_id=origin.user_id,
                home=self.config.home,
                db_path=self.config.db_path,
                chat_id=chat.chat_id,
                origin=origin,
                agent=session.agent,
            )
        )

        def record(reply: LLMReply) -> None:
            if reply.tool_calls:
                call = _model_call(reply)
                self.store.add_usage(
                    session.id,
                    call.usage,
                    purpose=call.purpose,
                    provider=call.provider,
                    model=call.model,
                    now=self.clock(),
                )
            else:
                held.append(reply)

        parts = self.parts(session.agent)
        tools = parts.tools.of(self.store.session(session.id))
        timeout = self.manager.roster.get(session.agent).config.agent.turn_timeout_s
        async with asyncio.timeout(timeout):
            allowed = parts.tools.allowed(tools, session.platform)
            return await parts.loop.run(
                system=prompt,
                history=[],
                user_message=user_msg,
                ctx=ctx,
                tools=tools.specs,
                allowed_tools=allowed,
                on_reply=record,
            )

    def _finish(
        self,
        job: JobRow,
        run_id: int,
        due: datetime,
        turn_id: str,
        posted: str,
        what: str,
        *,
        status: str,
        session: SessionRow,
        messages: Sequence[ChatMessage],
        held: list[LLMReply],
        error: str | None = None,
    ) -> None:
        record = self.posting(
            job,
            due,
            turn_id,
            posted,
            what,
            status=status,
            error=error,
            kind=OutboundKind.REPLY if status == "done" else OutboundKind.ERROR,
        )
        record = replace(
            record,
            run_session_id=session.id,
            run_messages=[dict(m) for m in messages],
            calls=[_model_call(reply) for reply in held],
        )
        if not self.jobs.finish_run(run_id, record, now=self.clock()):
            log.warning("job %s run %s had already ended; its answer is dropped", job.id, run_id)
        held.clear()

    def posting(
        self,
        job: JobRow,
        due: datetime,
        turn_id: str,
        posted: str,
        what: str,
        *,
        status: str,
        error: str | None = None,
        kind: OutboundKind = OutboundKind.NOTICE,
    ) -> RunRecord:
        """A run's end with its post to the chat: the chunks,
        and the note + post in the chat's session."""
        now = self.clock()
        origin = origin_of(job, now)
        session, _ = self.manager.open_session(self.manager.key_for(origin), origin, now)
        rows = self.outbox.rows_for(turn_id, job.chat, posted, kind=kind)
        chat_messages: list[dict[str, Any]] = [
            {"role": "user", "content": text.note(job, due, what)},
            {"role": "assistant", "content": posted},
        ]
        return RunRecord(
            status,
            outbound=rows,
            chat_session_id=session.id,
            chat_messages=chat_messages,
            turn_id=turn_id,
            error=error,
        )

    def following(self, job_id: int) -> datetime | None:
        """The job's next run as stored now (a claim has already moved it past the run at hand)."""
        job = self.jobs.job(job_id)
        return parse_iso(job.next_run_at) if job is not None and job.state == "active" else None

    def _count(self, outcome: str, started: datetime) -> None:
        if self.manager.metrics is not None:
            self.manager.metrics.turn("cron", outcome, (self.clock() - started).total_seconds())


def _model_call(reply: LLMReply) -> ModelCall:
    return ModelCall(reply.usage, purpose="job", provider=reply.provider, model=reply.model)
