"""gateway jobs list|show|cancel|run: the scheduled jobs of everyone, for the operator.

Works beside a running daemon on the same database: a cancelled job is never run (the daemon reads
the job again when its time comes), and `run` leaves a request the daemon picks up within a few
seconds, then follows the run until it ends.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from gateway.cli.context import EXIT_ERROR, EXIT_OK, config_of

if TYPE_CHECKING:
    from gateway.scheduling.jobstore import JobRow, JobStore, RunRow

WAIT_STEP_S = 0.25


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    jobs = sub.add_parser(
        "jobs", help="scheduled jobs (reminders, recurring runs): list, show, cancel, run now"
    )
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True)
    ls = jobs_sub.add_parser(
        "list", help="active jobs (with --all: done, cancelled and stopped ones too)"
    )
    ls.add_argument("--all", action="store_true", help="also jobs that will not run again")
    ls.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    show = jobs_sub.add_parser("show", help="one job in full, with its latest runs")
    show.add_argument("job_id", type=int)
    cancel = jobs_sub.add_parser("cancel", help="cancel a job: it will not run again")
    cancel.add_argument("job_id", type=int)
    run = jobs_sub.add_parser(
        "run", help="ask the running daemon to run a job now (its schedule is unchanged)"
    )
    run.add_argument("job_id", type=int)
    run.add_argument(
        "--wait",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds to wait for the run to end and say how it went (default 120; 0: do not wait)",
    )
    for parser in (ls, show, cancel, run):
        parser.set_defaults(func=cmd_jobs)


def cmd_jobs(args: argparse.Namespace) -> int:
    from gateway.scheduling.jobstore import JobStore
    from gateway.store.database import Store

    config = config_of(args)
    store = Store(config.db_path)
    try:
        handler = {"list": _list, "show": _show, "cancel": _cancel, "run": _run}[args.jobs_command]
        return handler(args, JobStore(store))
    finally:
        store.close()


def _list(args: argparse.Namespace, jobs: JobStore) -> int:
    from gateway.scheduling.text import NO_JOBS, job_line
    from gateway.store.rows import utcnow

    found = jobs.list_jobs(states=None if args.all else ("active",), limit=args.limit)
    now = utcnow()
    print(
        "\n".join(
            f"{job_line(job, now)}; owner {job.platform}:{job.user_id}{_whose(job)}"
            for job in found
        )
        or NO_JOBS
    )
    return EXIT_OK


def _whose(job: JobRow) -> str:
    """The agent and bot account of a job, when there are more than the one of old (agents.md)."""
    from gateway.events import DEFAULT_ACCOUNT, MAIN_AGENT, adapter_key

    if job.agent == MAIN_AGENT and job.account == DEFAULT_ACCOUNT:
        return ""
    return f"; agent {job.agent} via {adapter_key(job.platform, job.account)}"


def _show(args: argparse.Namespace, jobs: JobStore) -> int:
    from gateway.scheduling.text import details
    from gateway.store.rows import utcnow

    job = jobs.job(args.job_id)
    if job is None:
        print(f"no job #{args.job_id}", file=sys.stderr)
        return EXIT_ERROR
    print(details(job, jobs.runs_of(job.id), utcnow()))
    return EXIT_OK


def _cancel(args: argparse.Namespace, jobs: JobStore) -> int:
    job = jobs.job(args.job_id)
    if job is None or not jobs.end_job(
        job.id, "cancelled", "cancelled by the operator (gateway jobs cancel)"
    ):
        state = "does not exist" if job is None else f"is {job.state}, not active"
        print(f"job #{args.job_id} {state}", file=sys.stderr)
        return EXIT_ERROR
    print(f"cancelled {job.title}")
    return EXIT_OK


def _run(args: argparse.Namespace, jobs: JobStore) -> int:
    """Leave a run request for the daemon, then follow the run it starts until it ends (or --wait
    runs out): exit 0 when it posted its answer, 1 when it failed or was cut short."""
    from gateway.store.rows import iso, utcnow

    job = jobs.job(args.job_id)
    asked = utcnow()
    if job is None or not jobs.request_run(job.id, now=asked):
        state = (
            "does not exist" if job is None else f"is {job.state}; only an active job can be run"
        )
        print(f"job #{args.job_id} {state}", file=sys.stderr)
        return EXIT_ERROR
    deadline = time.monotonic() + max(args.wait, 0.0)
    run = None
    while True:
        found = jobs.store.one(
            "SELECT id FROM job_runs WHERE job_id = ? AND scheduled_for = ?", (job.id, iso(asked))
        )
        run = jobs.run(int(found["id"])) if found is not None else None
        if (run is not None and run.status != "running") or time.monotonic() >= deadline:
            break
        time.sleep(WAIT_STEP_S)
    if run is None:
        print(
            f"asked the daemon to run {job.title}; it has not started yet (is `gateway run` "
            "running?). The request stands until the daemon picks it up, for up to "
            "schedule.misfire_grace."
        )
        return EXIT_OK
    return _outcome(job, run)


def _outcome(job: JobRow, run: RunRow) -> int:
    from gateway.scheduling.text import where

    follow = f"`gateway jobs show {job.id}` follows it"
    if run.status == "running":
        print(f"{job.title}: run {run.id} started and is still running; {follow}")
        return EXIT_OK
    if run.status == "done":
        print(f"{job.title}: run {run.id} done; its answer was posted to {where(job.chat)}")
        return EXIT_OK
    print(
        f"{job.title}: run {run.id} {run.status}"
        + (f" ({run.error})" if run.error else "")
        + f"; the chat ({where(job.chat)}) was told"
    )
    return EXIT_ERROR
