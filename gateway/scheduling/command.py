"""`/jobs` in a chat: the sender's scheduled jobs, and `/jobs cancel ID` to stop one (answered at
once, like the other in-chat commands of gateway/sessions/commands.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.events import Inbound
from gateway.scheduling.book import JobBook
from gateway.scheduling.text import NO_JOBS

if TYPE_CHECKING:
    from gateway.sessions.manager import SessionManager

USAGE = "Usage: /jobs (your scheduled jobs) or /jobs cancel ID"
OFF_TEXT = "Scheduled jobs are turned off on this gateway (schedule.enabled: false)."
NONE_TEXT = (
    "You have no scheduled jobs. Ask me to remind you of something, or to do a task every morning."
)


class JobsCommand:
    """The handler Commands.add takes; None as the book when scheduling is off."""

    def __init__(self, book: JobBook | None) -> None:
        self.book = book

    async def __call__(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        if self.book is None:
            return OFF_TEXT
        args = inbound.text.split()[1:]
        if not args or args[0].lower() == "list":
            listing = self.book.job_lines(inbound)
            return (
                NONE_TEXT
                if listing == NO_JOBS
                else f"Your scheduled jobs:\n{listing}\n\nStop one with /jobs cancel ID."
            )
        if (
            args[0].lower() in ("cancel", "stop")
            and len(args) == 2
            and args[1].lstrip("#").isdigit()
        ):
            job_id = int(args[1].lstrip("#"))
            job = self.book.cancel_job(inbound, job_id)
            return (
                f"Cancelled {job.title}."
                if job
                else f"You have no active job #{job_id} (/jobs lists yours)."
            )
        return USAGE
