"""kill -9 in the middle of a scheduled job's run, through the real daemon (`gateway run` as a
subprocess, as systemd runs it) and real aiogram against the fake Bot API: the run was claimed in
SQLite before the model was asked, so the restarted daemon tells the chat the run was cut short,
once, and never asks the model again.

The job is made through the real `schedule` tool in a first, in-process life whose injected clock
stands ten minutes in the past; the daemon (on the wall clock) then finds it five minutes overdue,
inside schedule.misfire_grace, and runs it at boot: no wait on a timer."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from gateway.agent.tools.registry import ToolContext
from gateway.config.settings import load_config
from gateway.ops.wiring import build_gateway
from gateway.store.rows import utcnow
from tests.daemon_proc import DaemonProc
from tests.fakes.base import Delay
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.helpers import inbound, write_config
from tests.lifecycle_support import FakeClock

pytestmark = [pytest.mark.chaos, pytest.mark.heavy]
ALICE = 1001


def rows(home: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(home / "state.db") as conn:
        return [tuple(r) for r in conn.execute(sql)]


async def until(predicate: object, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.05)


async def make_job(home: Path) -> None:
    """Alice's `schedule` call, ten minutes ago: a reminder due five minutes ago."""
    gw = build_gateway(
        load_config(home, env={}),
        env={},
        probe_ollama=False,
        clock=FakeClock(utcnow() - timedelta(minutes=10)),
    )
    origin = inbound(
        "remind me", platform="telegram", chat_id=str(ALICE), user_id=str(ALICE), user_name="Alice"
    )
    ctx = ToolContext(
        session_id=0,
        platform="telegram",
        chat_type="dm",
        user_id=str(ALICE),
        home=home,
        db_path=home / "state.db",
        chat_id=str(ALICE),
        origin=origin,
    )
    try:
        result = await gw.tools.call(
            "schedule",
            {
                "action": "create",
                "when": "5m",
                "name": "invoice",
                "prompt": "Remind Alice to send the invoice.",
            },
            ctx,
        )
        assert not result.is_error, result.text
    finally:
        await gw.llm.close()
        gw.store.close()


def scheduled_requests(llm: FakeLLM) -> list[object]:
    return [b for b in llm.anthropic_requests() if "[Scheduled job #1" in str(b["messages"])]


async def test_a_kill_during_a_jobs_model_call_is_reported_once_and_never_run_again(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with FakeLLM() as llm, FakeTelegram() as tg:
        write_config(
            home,
            provider="anthropic",
            base_url=llm.base_url,
            extra=(
                "web:\n  enabled: false\nschedule:\n  timezone: "
                f"UTC\ntelegram:\n  token: '{TOKEN}'\n"
                f"  api_server: {tg.base_url}\n  polling_timeout: 1\n  allowed_users: ['{ALICE}']\n"
            ),
        )
        await make_job(home)
        # the run's model call hangs until the kill
        llm.script(Delay(120, Reply("Alice, send the invoice.")))
        first = DaemonProc(home)
        await first.start()
        try:
            await first.wait_ready()
            await until(lambda: len(scheduled_requests(llm)) == 1)
        finally:
            await first.kill()  # SIGKILL while the model is thinking
        # claimed first
        assert rows(home, "SELECT status, trigger FROM job_runs") == [("running", "boot")]
        assert tg.sent_messages(ALICE) == []
        second = DaemonProc(home)
        await second.start()
        try:
            await second.wait_ready()
            notice = await tg.wait_for_sent(ALICE, timeout=60)
            await until(lambda: rows(home, "SELECT status FROM job_runs") == [("interrupted",)])
        finally:
            code = await second.stop()
            await second.kill()
        assert code == 0
    assert (
        notice.text == '⏰ job #1 "invoice" was interrupted by a restart '
        "before it finished, so it was not completed."
    )
    # once, and no answer after it
    assert [m.text for m in tg.sent_messages(ALICE)] == [notice.text]
    assert len(scheduled_requests(llm)) == 1  # the model was never asked again
    assert rows(home, "SELECT state, next_run_at FROM jobs") == [("done", None)]
