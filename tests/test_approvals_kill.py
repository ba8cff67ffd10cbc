"""kill -9 around a tap, through the real daemon (`gateway run` as a subprocess, as systemd runs
it), real aiogram against the fake Bot API and a real MCP server whose destructive `delete_file`
records each run as it starts.

Killed right after the tap (the decision and "executing" are on record, the call has started): the
restarted daemon never runs the call again and tells the model its outcome is unknown; the person
gets one answer. Killed while the request waits: after the restart the same button still works and
the call runs once."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tests.approvals_support import DELETE, mcp_yaml, result_of, runs
from tests.daemon_proc import DaemonProc
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.helpers import write_config

pytestmark = pytest.mark.chaos
ALICE = 1001


def states(home: Path) -> list[str]:
    with sqlite3.connect(home / "state.db") as conn:
        return [r[0] for r in conn.execute("SELECT state FROM approvals ORDER BY id")]


def sent_chunks(home: Path) -> list[str]:
    with sqlite3.connect(home / "state.db") as conn:
        found = conn.execute("SELECT status FROM outbound WHERE turn_id LIKE 'wait%'")
        return [r[0] for r in found]


async def until(predicate: object, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.05)


def configure(
    home: Path, llm: FakeLLM, tg: FakeTelegram, folder: Path, hold: Path | None = None
) -> None:
    write_config(
        home,
        provider="anthropic",
        base_url=llm.base_url,
        extra=(
            f"web:\n  enabled: false\ntelegram:\n  token: '{TOKEN}'\n  api_server: {tg.base_url}\n"
            f"  polling_timeout: 1\n  allowed_users: ['{ALICE}']\n" + mcp_yaml(folder, hold=hold)
        ),
    )


async def asked(tg: FakeTelegram) -> int:
    await tg.wait_until(lambda: any(m.reply_markup for m in tg.sent_messages(ALICE)), 60)
    return next(m for m in tg.sent_messages(ALICE) if m.reply_markup).message_id


async def test_a_kill_right_after_the_tap_never_runs_the_call_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with FakeLLM() as llm, FakeTelegram() as tg:
        # the call starts, then hangs until the kill
        configure(home, llm, tg, tmp_path, hold=tmp_path / "never")
        llm.script(
            ToolCall(DELETE, {"path": "/srv/k"}), Reply("I can't tell whether /srv/k was deleted.")
        )
        first = DaemonProc(home)
        await first.start()
        try:
            await first.wait_ready()
            tg.inject_message(ALICE, "delete /srv/k")
            request = await asked(tg)
            tg.tap(ALICE, request, "Allow once")
            # the approved call is running
            await until(lambda: runs(tmp_path) == ["delete_file /srv/k"])
        finally:
            await first.kill()
        # the decision and "executing" were on record before the call
        assert states(home) == ["executing"]
        second = DaemonProc(home)
        await second.start()
        try:
            await second.wait_ready()
            answer = await tg.wait_for_sent(ALICE, count=2, timeout=60)
            await until(lambda: states(home) == ["unknown"])
            # the edit, done again if it was lost
            await tg.wait_until(lambda: not tg.buttons(ALICE, request), 60)
        finally:
            code = await second.stop()
            await second.kill()
        assert code == 0
    assert answer.text == "I can't tell whether /srv/k was deleted."
    assert [m.text for m in tg.sent_messages(ALICE)][1:] == [answer.text]  # one answer
    assert runs(tmp_path) == ["delete_file /srv/k"]  # started once, never again
    (result,) = [result_of(llm)]
    assert result["is_error"] is True
    assert "whether it took effect is unknown" in str(result["content"])
    assert len(llm.anthropic_requests()) == 2


async def test_a_kill_while_the_request_waits_then_the_same_button_runs_it_once(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with FakeLLM() as llm, FakeTelegram() as tg:
        configure(home, llm, tg, tmp_path)
        llm.script(ToolCall(DELETE, {"path": "/srv/m"}), Reply("Deleted /srv/m."))
        first = DaemonProc(home)
        await first.start()
        try:
            await first.wait_ready()
            tg.inject_message(ALICE, "delete /srv/m")
            request = await asked(tg)
            # Its send is on record (a kill in the instant between Telegram's answer and that record
            # would send it again: Telegram takes no idempotency key, docs/architecture.md).
            await until(lambda: sent_chunks(home) == ["sent"])
        finally:
            await first.kill()
        assert states(home) == ["pending"] and runs(tmp_path) == []
        second = DaemonProc(home)
        await second.start()
        try:
            await second.wait_ready()
            query = tg.tap(ALICE, request, "Allow once")
            await tg.wait_for_answer(query, 60)
            answer = await tg.wait_for_sent(ALICE, count=2, timeout=60)
            await until(lambda: states(home) == ["done"])
        finally:
            code = await second.stop()
            await second.kill()
        assert code == 0
    assert answer.text == "Deleted /srv/m."
    assert runs(tmp_path) == ["delete_file /srv/m"]
    assert len(llm.anthropic_requests()) == 2 and len(tg.sent_messages(ALICE)) == 2
