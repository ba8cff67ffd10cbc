"""Jobs and the terminal. `gateway jobs run ID` beside a running gateway on the same database: it
leaves a request, the gateway's runner picks it up, and the command follows the run to its end and
says how it went (exit 1 when the run failed). A job made in `gateway chat` belongs to the terminal:
the person is told it runs only while one is open.

The command blocks in a thread (it polls SQLite as it does beside a real daemon); the gateway here
picks the request up when the test tells it to, as its poller would every few seconds."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.cli.main import main as cli
from gateway.ops.wiring import Gateway
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM, Reply
from tests.helpers import RecordingAdapter, write_config
from tests.jobs_support import job_rows, settle
from tests.lifecycle_support import FakeClock
from tests.test_scheduling import BERLIN, create, jobs_gateway, say, setup, tool_results


async def run_from_the_terminal(gw: Gateway, home: Path, *argv: str) -> int:
    command = asyncio.ensure_future(
        asyncio.to_thread(cli, ["--home", str(home), "jobs", "run", "1", *argv])
    )
    async with asyncio.timeout(30):
        while job_rows(gw)[0]["run_requested_at"] is None:
            await asyncio.sleep(0.02)
    assert gw.jobs is not None and await gw.jobs.run_requests() == 1
    await settle(gw)
    return await asyncio.wait_for(command, 30)


async def test_jobs_run_waits_for_the_run_and_reports_its_outcome(
    home: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    adapter = setup(home, fake_llm)
    # the CLI stamps its request with the real clock
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
    fake_llm.script(
        create("0 8 * * 1-5", name="standup"),
        Reply("ok"),
        Reply("Standup notes: none."),
        Fault(500),
    )
    async with jobs_gateway(home, [adapter], clock) as gw:
        await say(gw, "standup reminder on weekdays")
        capsys.readouterr()
        assert await run_from_the_terminal(gw, home) == 0
        assert (
            capsys.readouterr().out
            == 'job #1 "standup": run 1 done; its answer was posted to cli DM c1\n'
        )
        assert adapter.texts()[-1] == "⏰ standup (job #1)\n\nStandup notes: none."
        assert await run_from_the_terminal(gw, home) == 1  # the model is down this time
        out = capsys.readouterr().out
        assert out.startswith('job #1 "standup": run 2 failed (') and out.endswith(
            "; the chat (cli DM c1) was told\n"
        )
        assert "couldn't run this job just now" in adapter.texts()[-1]


async def test_a_job_made_in_the_terminal_says_it_runs_only_while_a_chat_is_open(
    home: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.script(create("1h"), Reply("ok"), create("1h"), Reply("ok"))
    async with jobs_gateway(home, [setup(home, fake_llm)], FakeClock()) as gw:
        await say(gw, "remind me in an hour")  # the console (`gateway chat`) is platform cli
        [console] = [str(r["content"]) for r in tool_results(fake_llm.anthropic_requests()[-1])]
        assert console.endswith(
            "the job runs only while a `gateway chat` is open, and a run missed meanwhile is "
            "caught up or reported when one opens again; tell the person so."
        )
    write_config(home, base_url=fake_llm.base_url, extra=BERLIN + "web:\n  port: 0\n")
    async with jobs_gateway(home, [RecordingAdapter("web")], FakeClock()) as gw:
        # the daemon serves the web chat: nothing to say
        await say(gw, "remind me in an hour", platform="web")
        assert "gateway chat" not in str(tool_results(fake_llm.anthropic_requests()[-1]))
