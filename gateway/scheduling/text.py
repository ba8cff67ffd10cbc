"""How jobs read: to the model (tool results, a run's instruction), to people in the chat (answers,
notices, `/jobs`) and to the operator (`gateway jobs`, `gateway status`). Pure functions of rows and
times."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gateway.events import ChatRef
from gateway.scheduling.jobstore import JobRow, RunRow
from gateway.scheduling.when import local_text, zone
from gateway.sessions.lifecycle import human_age
from gateway.store.rows import parse_iso

NO_JOBS = "No scheduled jobs."
CONSOLE_NOTE = (
    "This chat is the terminal (`gateway chat`): the job runs only while a `gateway chat` is open, "
    "and a run missed meanwhile is caught up or reported when one opens again; tell the person so."
)


def at(job: JobRow, moment: datetime | str | None) -> str:
    """A moment in the job's own time zone, as people read it."""
    found = parse_iso(moment) if isinstance(moment, str) else moment
    return "—" if found is None else local_text(found, zone(job.timezone))


def timing(job: JobRow) -> str:
    if job.kind == "once":
        return f"once at {at(job, job.spec)}"
    if job.kind == "every":
        return f"every {job.spec}"
    # code: Markdown platforms would read its `*` as emphasis
    return f"cron `{job.spec}` ({job.timezone})"


def where(chat: ChatRef) -> str:
    place = "DM" if chat.chat_type == "dm" else chat.chat_type
    thread = f", thread {chat.thread_id}" if chat.thread_id else ""
    return f"{chat.platform} {place} {chat.chat_id}{thread}"


def job_line(job: JobRow, now: datetime, *, here: ChatRef | None = None) -> str:
    """`#12 "call the bank": once at … (next run in 3 h 5
    min)`, plus where it posts unless that is `here`."""
    label = f'#{job.id} "{job.name}"' if job.name else f"#{job.id}"
    line = f"{label}: {timing(job)}"
    next_at = parse_iso(job.next_run_at)
    if job.state != "active":
        line += f"; {job.state}" + (f" ({job.state_reason})" if job.state_reason else "")
    elif next_at is not None and job.kind != "once":
        line += f"; next {at(job, next_at)}"
    if job.state == "active" and next_at is not None:
        line += f" (in {human_age(next_at - now)})"
    if here is None or job.chat != here:
        line += f"; posts to {where(job.chat)}"
    return line


def job_list(jobs: Sequence[JobRow], now: datetime, *, here: ChatRef | None = None) -> str:
    if not jobs:
        return NO_JOBS
    return "\n".join(job_line(job, now, here=here) for job in jobs)


def created(job: JobRow, now: datetime, following: datetime | None) -> str:
    """The tool's answer to `create`: the id, when it runs next, and how to cancel it."""
    next_at = parse_iso(job.next_run_at) or now
    first = f"{at(job, next_at)} (in {human_age(next_at - now)})"
    when = f"for {first}" if job.kind == "once" else f"{timing(job)}; next run {first}"
    then = f", then {at(job, following)}" if following is not None else ""
    return (
        f"Scheduled {job.title} {when}{then}. Its answer will be posted in this chat. To cancel: "
        f"action=cancel with job_id {job.id}, or the person sends /jobs cancel {job.id}."
    )


def now_line(now: datetime, timezone: str, own: bool) -> str:
    """What time it is for the person, so the model counts "tomorrow" and "at 9" from the right day
    and zone."""
    whose = (
        "this person's time zone"
        if own
        else "the gateway's time zone (this person has not saved their own: action=set_timezone)"
    )
    return f"Now: {local_text(now, zone(timezone))} in {timezone}, {whose}."


def gateway_zone_note(timezone: str) -> str:
    """After a job made in the gateway's zone for someone whose own zone is not known."""
    return (
        f"The time was read in {timezone}, the gateway's time zone, because this person has not "
        "saved their own: if they live elsewhere, ask them, save it with action=set_timezone, "
        "then cancel this job and create it again."
    )


def details(job: JobRow, runs: Sequence[RunRow], now: datetime) -> str:
    """`gateway jobs show`: everything about one job and its latest runs."""
    next_at = parse_iso(job.next_run_at)
    soon = (
        f" (in {human_age(next_at - now)})" if next_at is not None and job.state == "active" else ""
    )
    lines = [
        f"{job.title}: {job.state}" + (f" ({job.state_reason})" if job.state_reason else ""),
        f"  timing:    {timing(job)}",
        f"  next run:  {at(job, next_at)}{soon}",
        f"  posts to:  {where(job.chat)}",
        f"  owner:     {job.platform}:{job.user_id}"
        + (f" ({job.user_name})" if job.user_name else ""),
        f"  created:   {at(job, job.created_at)}; {job.runs} run(s)",
        f"  prompt:    {job.prompt}",
    ]
    if job.run_requested_at:
        lines.append(
            f"  run asked: {at(job, job.run_requested_at)} (`gateway jobs run`), not picked up yet"
        )
    lines.append("  runs (newest first):" if runs else "  runs: none yet")
    lines.extend(f"    {run_line(job, run)}" for run in runs)
    return "\n".join(lines)


def run_line(job: JobRow, run: RunRow) -> str:
    line = f"run {run.id} ({run.trigger}) due {at(job, run.scheduled_for)}: {run.status}"
    if run.finished_at:
        line += f" at {at(job, run.finished_at)}"
    return line + (f" — {run.error}" if run.error else "")


# -------------------------------------------------------------------------------------------- a run
def run_instruction(job: JobRow, due: datetime, now: datetime) -> str:
    """The user message of a job's run: the per-run facts in brackets, then the job's prompt."""
    who = job.user_name or job.username or f"user {job.user_id}"
    repeat = "" if job.kind == "once" else f" It repeats: {timing(job)}."
    return (
        f"[Scheduled {job.title}, set up by {who} on {at(job, job.created_at)[:10]} in a "
        f"{job.platform} {'DM' if job.chat_type == 'dm' else job.chat_type}. It was due "
        f"{at(job, due)}; it is now {at(job, now)}.{repeat} Your reply is posted to that chat as "
        f"it is.]\n\n{job.prompt}"
    )


def answer(job: JobRow, text: str) -> str:
    """What the chat sees: a one-line header naming the
    job (so it can be cancelled), then the answer."""
    return (
        f"⏰ **{job.name or 'Scheduled job'}** (job #{job.id})\n\n{text.strip() or '(no answer)'}"
    )


def note(job: JobRow, due: datetime, what: str) -> str:
    """The user-role line recorded before a job's post in
    the chat's session, so a follow-up has context."""
    return f"[Scheduled {job.title} ({timing(job)}), due {at(job, due)}: {what}]"


def missed(job: JobRow, due: datetime, following: datetime | None) -> str:
    then = (
        f"It runs next at {at(job, following)}."
        if following
        else "Ask me to schedule it again if it still matters."
    )
    return (
        f"⏰ I missed {job.title}, due {at(job, due)}, "
        f"while I was offline, so it did not run. {then}"
    )


def interrupted(job: JobRow, following: datetime | None) -> str:
    then = f" It runs next at {at(job, following)}." if following else ""
    return (
        f"⏰ {job.title} was interrupted by a restart "
        f"before it finished, so it was not completed.{then}"
    )


def failed(job: JobRow, why: str, following: datetime | None) -> str:
    quoted = "\n".join(f"> {line}" for line in job.prompt.splitlines())
    then = f"\n\nIt runs next at {at(job, following)}." if following else ""
    return (
        f"⏰ **{job.name or 'Scheduled job'}** (job #{job.id})\n\nI couldn't run this job just now "
        f"({why}). Here is what it was set up to do:\n\n{quoted}{then}"
    )
