"""The `schedule` tool: reminders and recurring jobs the model sets up for the person it talks to.

The jobs live above the agent (gateway/scheduling/: storage, timing, limits, the runs themselves);
the tool only reaches them through the small `JobBook` protocol below, so it imports nothing above
its own package.
"""

from __future__ import annotations

from typing import Annotated, Literal, Protocol

from gateway.agent.tools.registry import ToolContext, ToolFunction
from gateway.errors import ToolError
from gateway.events import Inbound


class JobBook(Protocol):
    """Jobs as the person in `origin` may see and change them; every method answers text for the
    model and raises ToolError with a correctable reason (a bad `when`, a limit reached, an unknown
    job)."""

    def create(
        self, origin: Inbound, *, when: str, prompt: str, name: str | None, timezone: str | None
    ) -> str: ...

    def listing(self, origin: Inbound) -> str: ...

    def cancel(self, origin: Inbound, job_id: int) -> str: ...

    def set_timezone(self, origin: Inbound, timezone: str) -> str: ...


def schedule_tool(book: JobBook) -> ToolFunction:
    async def schedule(
        ctx: ToolContext,
        action: Annotated[
            Literal["create", "list", "cancel", "set_timezone"],
            "create a job; list this person's jobs (and the time now, in their zone); cancel one "
            "by job_id; set_timezone: save the person's own time zone (`timezone`)",
        ],
        when: Annotated[
            str | None,
            'create: an ISO-8601 date-time ("2026-03-03T09:00", in the person\'s time zone '
            'unless it has an offset), a delay ("10m", "2h", "1d", "1h30m"), "every 90m", '
            'or a 5-field cron expression for a recurring job ("0 8 * * 1-5" = weekdays at '
            "08:00)",
        ] = None,
        prompt: Annotated[
            str | None,
            "create: what you should do or say at that time, as a self-contained "
            "instruction to yourself (e.g. 'Remind them to call the bank about the "
            "mortgage.')",
        ] = None,
        name: Annotated[str | None, "create: a short name for the job, shown in lists"] = None,
        job_id: Annotated[int | None, "cancel: the job's id"] = None,
        timezone: Annotated[
            str | None,
            "an IANA time zone (e.g. Europe/Berlin). set_timezone: the person's own, "
            "kept for their later jobs. create: only to read this one job's time in "
            "another zone than theirs",
        ] = None,
    ) -> str:
        """Schedule a message or task for later in this chat: a one-time reminder or a recurring
        job. At that time you run again with `prompt` as your instruction (nobody is there to answer
        questions) and your reply is posted here. create returns the job id and next run time; list
        shows the time now and this person's jobs; cancel stops one. Times are read in the person's
        saved time zone, else the gateway's; when a person mentions where they live or their zone,
        save it with set_timezone.
        """
        origin = ctx.origin
        if origin is None:
            raise ToolError("Scheduling needs a chat to post to, and this conversation has none.")
        if action == "create":
            if not when or not prompt:
                raise ToolError("action=create needs both `when` and `prompt`.")
            return book.create(origin, when=when, prompt=prompt, name=name, timezone=timezone)
        if action == "cancel":
            if job_id is None:
                raise ToolError("action=cancel needs job_id (action=list shows the ids).")
            return book.cancel(origin, job_id)
        if action == "set_timezone":
            if timezone is None or not timezone.strip():
                raise ToolError(
                    "action=set_timezone needs `timezone`, an IANA name such as Europe/Berlin."
                )
            return book.set_timezone(origin, timezone)
        return book.listing(origin)

    return schedule
