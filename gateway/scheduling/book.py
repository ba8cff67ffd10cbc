"""Creating, listing and cancelling jobs, with their
limits: what the `schedule` tool and `/jobs` go through.

A job belongs to the chat (thread included) and the person that made it. People see and cancel only
their own jobs; the operator sees all of them (`gateway jobs`). A prompt is scanned like a memory
entry before it is kept: it runs later as the agent's own instruction with nobody there to see it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from gateway.config.schedule import parse_duration
from gateway.config.settings import Config
from gateway.errors import ToolError
from gateway.events import Inbound
from gateway.knowledge.people import LOCAL_OWNER, OWNER_PLATFORMS, PeopleBook, identity_of
from gateway.scan import describe, scan_text
from gateway.scheduling import text
from gateway.scheduling.jobstore import JobRow, JobStore, NewJob
from gateway.scheduling.when import local_text, parse_when, zone
from gateway.sessions.lifecycle import local_zone

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
MAX_PROMPT_CHARS = 4000
MAX_NAME_CHARS = 80


class JobBook:
    """The `JobBook` of gateway/agent/tools/schedule.py. `changed` is told of every new or ended job
    (the runner arms or forgets its timer).

    Times are read in the zone the model names, else the person's own (people.timezone, which the
    model saves with action=set_timezone and the operator with `gateway users timezone`), else the
    gateway's."""

    def __init__(self, *, jobs: JobStore, config: Config, clock: Clock) -> None:
        self.jobs = jobs
        self.people = PeopleBook(jobs.store)
        self.config = config.schedule
        self.zone = config.schedule.timezone or config.sessions.timezone or str(local_zone(None))
        self.clock = clock
        self.changed: Callable[[JobRow], None] = lambda job: None

    def zone_of(self, origin: Inbound) -> str | None:
        """The sender's own time zone, if they (or the operator) saved one."""
        person = self.people.find(identity_of(origin.chat.platform, origin.user_id))
        return person.timezone if person is not None else None

    def create(
        self, origin: Inbound, *, when: str, prompt: str, name: str | None, timezone: str | None
    ) -> str:
        now = self.clock()
        own = self.zone_of(origin)
        schedule = parse_when(
            when,
            now=now,
            timezone=timezone or own or self.zone,
            min_interval=self.config.shortest_interval,
        )
        new = NewJob(
            name=_name(name),
            prompt=_prompt(prompt),
            kind=schedule.kind,
            spec=schedule.spec,
            timezone=schedule.timezone,
            chat=origin.chat,
            user_id=origin.user_id,
            user_name=origin.user_name,
            username=origin.username,
            space_id=origin.space_id,
            roles=origin.roles,
            next_run_at=schedule.first,
            agent=origin.agent,
        )
        limit = self.config.max_jobs_per_person
        job = self.jobs.add_job(new, now=now, limit=limit, owners=self._accounts(origin))
        if job is None:
            raise ToolError(
                f"Not scheduled: this person already has {self.config.max_jobs_per_person} active "
                "jobs, the most allowed. Cancel one first (action=list shows them)."
            )
        log.info(
            "job %s created platform=%s chat=%s user=%s kind=%s next=%s",
            job.id,
            job.platform,
            job.chat_id,
            job.user_id,
            job.kind,
            job.next_run_at,
        )
        self.changed(job)
        answer = text.created(job, now, schedule.following(schedule.first, schedule.first))
        if timezone is None and own is None and _zone_matters(when, schedule.kind):
            answer += f" {text.gateway_zone_note(self.zone)}"
        if origin.chat.platform == "cli":
            answer += f" {text.CONSOLE_NOTE}"
        return answer

    def _accounts(self, origin: Inbound) -> list[tuple[str, str | None]]:
        """The sender's accounts, linked ones included (the job limit is per person, not account);
        None for the owner's local platforms, where every user id is the owner."""
        me = identity_of(origin.chat.platform, origin.user_id)
        person = self.people.find(me)
        found: list[tuple[str, str | None]] = []
        for identity in (i.identity for i in person.identities) if person is not None else [me]:
            if identity == LOCAL_OWNER:
                found += [(platform, None) for platform in sorted(OWNER_PLATFORMS)]
            else:
                platform, _, user_id = identity.partition(":")
                found.append((platform, user_id))
        return found

    def listing(self, origin: Inbound) -> str:
        """For the model: the time now in the person's zone (so "tomorrow" is counted from the right
        day), then their jobs."""
        own = self.zone_of(origin)
        return (
            f"{text.now_line(self.clock(), own or self.zone, own is not None)}"
            f"\n{self.job_lines(origin)}"
        )

    def job_lines(self, origin: Inbound) -> str:
        """The sender's jobs, one a line (`/jobs` shows these)."""
        jobs = self.jobs.jobs_of(origin.chat.platform, origin.user_id, agent=origin.agent)
        return text.job_list(jobs, self.clock(), here=origin.chat)

    def set_timezone(self, origin: Inbound, timezone: str) -> str:
        """Save the sender's own time zone; their later
        jobs are read in it (existing jobs keep theirs)."""
        name = timezone.strip()
        zone(name)  # an unknown name: a ToolError the model can correct
        person = self.people.resolve(
            origin.chat.platform,
            origin.user_id,
            now=self.clock(),
            user_name=origin.user_name,
            username=origin.username,
        )
        self.people.set_timezone(person.id, name)
        log.info(
            "person %s time zone set to %s by platform=%s user=%s",
            person.id,
            name,
            origin.chat.platform,
            origin.user_id,
        )
        return (
            f"Saved {name} as this person's time zone (it is "
            f"{local_text(self.clock(), zone(name))} there). Times in jobs made from now on are "
            "read in it; existing jobs keep the zone they were made in (cancel one and create it "
            "again to move it)."
        )

    def cancel(self, origin: Inbound, job_id: int) -> str:
        job = self.cancel_job(origin, job_id)
        if job is None:
            raise ToolError(
                f"There is no active job #{job_id} of this person (action=list shows their jobs)."
            )
        return f"Cancelled {job.title}; it will not run again."

    def cancel_job(self, origin: Inbound, job_id: int) -> JobRow | None:
        """Cancel one of the sender's active jobs; None when they have no such job."""
        owner = (origin.chat.platform, origin.user_id, origin.agent)  # the agent's own jobs only
        job = self.jobs.job(job_id)
        if job is None or not self.jobs.end_job(
            job_id, "cancelled", f"cancelled by {owner[0]}:{owner[1]}", owner=owner
        ):
            return None
        log.info("job %s cancelled by platform=%s user=%s agent=%s", job_id, *owner)
        ended = self.jobs.job(job_id) or job
        self.changed(ended)
        return ended


def _zone_matters(when: str, kind: str) -> bool:
    """Whether reading `when` took a time zone: a cron expression or a local date-time does; a
    delay, "every 2h" or a date-time with its own offset is the same moment anywhere."""
    if kind != "once":
        return kind == "cron"
    if parse_duration(" ".join(when.lower().split()).removeprefix("in ")) is not None:
        return False
    try:
        return datetime.fromisoformat(when.strip()).tzinfo is None
    except ValueError:
        return True


def _prompt(prompt: str) -> str:
    prompt = prompt.strip()
    if not prompt:
        raise ToolError("`prompt` is empty: say what to do or say at that time.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ToolError(
            f"`prompt` has {len(prompt):,} characters; keep it under {MAX_PROMPT_CHARS:,} (it is "
            "an instruction, not the material itself)."
        )
    findings = scan_text(prompt, strict=True)
    if findings:
        raise ToolError(
            f"Not scheduled: the prompt was refused by the safety scan ({describe(findings)}). It "
            "runs later as your own instruction with nobody watching, so it must not hold "
            "instructions to set your rules aside, secrets, or instructions to send data anywhere."
        )
    return prompt


def _name(name: str | None) -> str | None:
    name = " ".join((name or "").split())
    if len(name) > MAX_NAME_CHARS:
        raise ToolError(f"`name` is {len(name)} characters; keep it under {MAX_NAME_CHARS}.")
    return name or None
