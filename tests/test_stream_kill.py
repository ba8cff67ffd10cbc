"""kill -9 in the middle of a streamed answer, through the real daemon (`gateway run` as a
subprocess, as systemd runs it) and real aiogram against the fake Bot API, on the wall clock: the
group saw the answer growing in a preview message; after the restart the turn is answered again, the
stored preview is edited into the answer, and the group ends with exactly one message, the answer,
byte for byte as an unstreamed run sends it."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_proc import DaemonProc
from tests.fakes.llm import FakeLLM, Paced, Reply, StreamGate
from tests.fakes.telegram import TOKEN, FakeTelegram, SentMessage
from tests.helpers import write_config

pytestmark = [pytest.mark.chaos, pytest.mark.heavy]
ALICE, GROUP = 1001, -100500
MENTION = "@gw_test_bot what is the plan?"
ANSWER = (
    "Here is the plan, in **three** steps:\n\n1. read the file\n2. change it\n\n```python\n"
    "def run():\n    return 42\n```\nand that is all."
)


def rows(home: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(home / "state.db", timeout=30)) as conn:
        return [tuple(r) for r in conn.execute(sql)]


def configure(home: Path, llm: FakeLLM, tg: FakeTelegram, mode: str) -> None:
    write_config(
        home,
        provider="anthropic",
        base_url=llm.base_url,
        extra=(
            f"web:\n  enabled: false\ntelegram:\n  token: '{TOKEN}'\n  api_server: {tg.base_url}\n"
            f"  polling_timeout: 1\n  allowed_users: ['{ALICE}']\nstreaming:\n  mode: {mode}\n"
        ),
    )
    # a model held at the gate on a busy machine is not a timed-out model
    config = home / "config.yaml"
    config.write_text(
        config.read_text(encoding="utf-8").replace("timeout_s: 10", "timeout_s: 120"),
        encoding="utf-8",
    )


async def settled(home: Path, tg: FakeTelegram) -> None:
    """The daemon has nothing left to send: the turn answered, every reply sent, no preview open.
    What it would still send comes from that state, so the test needs no pause to see it."""

    def done() -> bool:
        return (
            rows(home, "SELECT status FROM inbound") == [("answered",)]
            and rows(home, "SELECT COUNT(*) FROM outbound WHERE status != 'sent'") == [(0,)]
            and rows(home, "SELECT COUNT(*) FROM previews") == [(0,)]
        )

    await tg.wait_until(
        done, 60, lambda: f"not settled: {rows(home, 'SELECT status FROM outbound')}"
    )


async def one_life(home: Path, tg: FakeTelegram, until_done: bool) -> DaemonProc:
    daemon = DaemonProc(home)
    await daemon.start()
    await daemon.wait_ready()
    if until_done:
        await tg.wait_until(
            lambda: any(m.text.endswith("all.") for m in tg.sent_messages(GROUP)),
            60,
            lambda: f"no answer: {tg.sent_texts(GROUP)}\n{daemon.output()[-3000:]}",
        )
    return daemon


async def unstreamed(tmp_path: Path) -> SentMessage:
    home = tmp_path / "unstreamed"
    home.mkdir()
    async with FakeLLM() as llm, FakeTelegram() as tg:
        configure(home, llm, tg, "off")
        llm.script(Reply(ANSWER))
        tg.inject_message(GROUP, MENTION, chat_type="supergroup")
        daemon = await one_life(home, tg, until_done=True)
        await daemon.stop()
        await daemon.kill()
        return tg.sent_messages(GROUP)[0]


async def test_a_kill_9_mid_stream_in_a_group_leaves_one_message_the_answer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    gate, again = StreamGate(), StreamGate()
    async with FakeLLM() as llm, FakeTelegram() as tg:
        configure(home, llm, tg, "edit")
        llm.script(Paced(Reply(ANSWER), gate=gate), Paced(Reply(ANSWER), gate=again))
        asked = tg.inject_message(GROUP, MENTION, chat_type="supergroup")
        first = await one_life(home, tg, until_done=False)
        try:
            gate.release(1)
            await tg.wait_until(
                lambda: bool(tg.sent_messages(GROUP)),
                30,
                lambda: f"no preview: {tg.sent_texts(GROUP)}\n{first.output()[-3000:]}",
            )
            gate.release(1)
            await tg.wait_until(
                lambda: bool(tg.sent_messages(GROUP)[0].edits),
                30,
                lambda: f"no edit: {tg.sent_texts(GROUP)}\n{first.output()[-3000:]}",
            )
        finally:
            await first.kill()  # SIGKILL while the answer is being written
        # a restart takes longer than Telegram's second between a chat's calls (RestartSec)
        await asyncio.sleep(1.2)
        stale = tg.sent_messages(GROUP)
        # a half-written preview is all there is
        assert len(stale) == 1 and not stale[0].text.endswith("all.")
        # its id was stored before it was edited
        assert rows(home, "SELECT part_index FROM previews") == [(0,)]
        gate.release_all()
        second = await one_life(home, tg, until_done=False)
        try:
            # the replayed turn streams again: into the stored preview, not a new message
            again.release(1)
            await tg.wait_until(
                lambda: len(tg.sent_messages(GROUP)[0].edits) > len(stale[0].edits),
                30,
                lambda: f"the preview was not taken over: {tg.sent_texts(GROUP)} {tg.refused}",
            )
            again.release_all()
            await tg.wait_until(
                lambda: any(m.text.endswith("all.") for m in tg.sent_messages(GROUP)), 30
            )
            await settled(home, tg)
        finally:
            code = await second.stop()
            await second.kill()
        assert code == 0
    # the stale preview became the one answer: nothing posted twice
    [message] = tg.sent_messages(GROUP)
    assert message.message_id == stale[0].message_id
    assert message.reply_to_message_id == int(tg.injected[asked]["message"]["message_id"])
    plain = await unstreamed(tmp_path)
    assert (message.text, message.entities) == (plain.text, plain.entities)  # byte for byte
    assert tg.flood_violations == [] and tg.refused == []
    assert rows(home, "SELECT COUNT(*) FROM previews") == [(0,)]
    assert rows(home, "SELECT status, COUNT(*) FROM outbound GROUP BY status") == [("sent", 1)]


class SlowToAnswer(FakeTelegram):
    """Makes a group message, then holds the answer that names it (while `held` is set): a kill in
    that gap is the one moment a preview exists that the gateway has not stored."""

    def __init__(self) -> None:
        super().__init__()
        self.held: asyncio.Event | None = None
        self.made = asyncio.Event()

    async def _m_sendmessage(self, p: Mapping[str, Any]) -> Any:
        message = await super()._m_sendmessage(p)
        if self.held is not None:
            self.made.set()
            await self.held.wait()
        return message


async def test_a_kill_9_between_a_preview_and_its_stored_id_leaves_that_one_stale_preview(
    tmp_path: Path,
) -> None:
    """docs/streaming.md: 'A kill leaves at most a stale preview' (Telegram has no idempotency key
    for a send): the answer still comes once, in a message of its own, and nothing else is left
    behind."""
    home = tmp_path / "home"
    home.mkdir()
    gate = StreamGate()
    async with FakeLLM() as llm, SlowToAnswer() as tg:
        configure(home, llm, tg, "edit")
        llm.script(Paced(Reply(ANSWER), gate=gate), Reply(ANSWER))
        tg.inject_message(GROUP, MENTION, chat_type="supergroup")
        tg.held = asyncio.Event()
        first = await one_life(home, tg, until_done=False)
        try:
            gate.release(1)
            await asyncio.wait_for(tg.made.wait(), 30)
        finally:
            await first.kill()  # the preview message exists; its id never reached the gateway
        assert rows(home, "SELECT COUNT(*) FROM previews") == [(0,)]
        tg.held.set()
        tg.held = None
        gate.release_all()
        second = await one_life(home, tg, until_done=True)
        try:
            await settled(home, tg)
        finally:
            code = await second.stop()
            await second.kill()
        assert code == 0
    stale, answer = tg.sent_messages(GROUP)
    # the one stale preview, never touched again
    assert stale.text == "Here is the plan" and stale.edits == ()
    assert answer.text.endswith("and that is all.") and tg.flood_violations == []
    assert rows(home, "SELECT status, COUNT(*) FROM outbound GROUP BY status") == [("sent", 1)]
