"""The database taking no writes, for real: another process holding SQLite's write lock, and a disk
that is full (the database capped with `PRAGMA max_page_count`, so a write that needs a new page
fails with SQLITE_FULL as it would on a full disk). What is accepted is answered once writes work
again; what cannot be stored is refused and the sender is told once; the event loop never waits on
the lock; /readyz says not ready until it is over."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config.settings import load_config
from gateway.events import OutboundMessage
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import LOOP_BUSY_TIMEOUT_MS, build_gateway, platform_adapters
from gateway.sessions.outage import NOT_STORED_TEXT
from tests.daemon_proc import WebChatClient
from tests.fakes.llm import Delay, FakeLLM
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config
from tests.store_locks import LockHolder


@pytest.fixture
async def daemon(home: Path, fake_llm: FakeLLM) -> AsyncIterator[Daemon]:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra="web:\n  port: 0\n")
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.stop()


async def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Until `condition()` holds, checked every few milliseconds (the daemon runs in this loop)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def _readyz(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/readyz") as resp:
        return resp.status, await resp.json()


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_a_held_write_lock_never_stalls_the_loop_and_the_message_is_answered(
    daemon: Daemon, home: Path
) -> None:
    port = daemon.web_port or 0
    store = daemon.gw.store
    # it waits for the lock until released (not what is tested)
    daemon.gw.sessions.outage.submit_wait = 300
    # A statement on the loop waits 50 ms at most for a lock (it was 5 s: every request stalled);
    # how long /readyz takes meanwhile is a figure of bench/store_lock.py, not a bound here.
    assert store.conn.execute("PRAGMA busy_timeout").fetchone()[0] == LOOP_BUSY_TIMEOUT_MS
    async with WebChatClient(port, home=home) as tab, LockHolder(home / "state.db") as lock:
        assert tab.ws is not None
        await tab.ws.send_str(json.dumps({"text": "hello while the database is locked"}))
        await wait_for(lambda: store.health.reason == "busy")  # it came, and waits for the lock
        for _ in range(5):  # the loop serves other requests while the message waits for the lock
            status, _ = await _readyz(port)
            assert status == 200  # another process's lock is routine, not an outage
        assert store.health.reason == "busy"  # still waiting: answered meanwhile, not after it
        # not stored, not acked yet
        assert _rows(home / "state.db", "SELECT COUNT(*) FROM inbound") == [(0,)]
        await lock.release()
        ack = await tab.next("ack")
        assert ack["outcome"] == "accepted"
        reply = await tab.next("message")
    assert reply["text"].startswith("echo: hello while the database is locked")
    assert _rows(home / "state.db", "SELECT status FROM inbound") == [("answered",)]


async def test_a_lock_held_past_the_wait_refuses_the_message_and_says_so(
    daemon: Daemon, home: Path
) -> None:
    daemon.gw.sessions.outage.submit_wait = 0.5
    port = daemon.web_port or 0
    async with WebChatClient(port, home=home) as tab, LockHolder(home / "state.db"):
        ack = await tab.say("this one cannot be stored")
        notice = await tab.next("message")
    assert ack["outcome"] == "refused"
    assert notice["text"] == NOT_STORED_TEXT
    assert _rows(home / "state.db", "SELECT COUNT(*) FROM inbound") == [(0,)]
    async with WebChatClient(port, home=home) as tab:
        # the lock is gone: the next message is answered
        assert (await tab.say("and now?"))["outcome"] == "accepted"
        assert (await tab.next("message"))["text"].startswith("echo: and now?")


def _fill(daemon: Daemon) -> int:
    """The disk is full: the database may not grow by a single page more."""
    conn = daemon.gw.store.conn
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    conn.execute(f"PRAGMA max_page_count = {pages}")
    return pages


async def test_a_full_disk_refuses_new_messages_once_holds_accepted_ones_and_recovers(
    daemon: Daemon, home: Path, fake_llm: FakeLLM
) -> None:
    port = daemon.web_port or 0
    long = "x" * 20_000  # needs new pages wherever it is stored
    # the answer comes a second after the request: the disk fills in between
    fake_llm.script(Delay(1.0))
    async with WebChatClient(port, home=home, client="tabA") as tab:
        assert (await tab.say(f"accepted before the disk filled {long}"))["outcome"] == "accepted"
        await fake_llm.wait_for_call("/v1/messages")
        _fill(daemon)
        await fake_llm.wait_until(lambda: not daemon.gw.store.health.writable, timeout=10)
        assert daemon.gw.store.health.reason == "full"
        status, body = await _readyz(port)
        assert status == 503 and body["store"] == "unavailable: database or disk is full (full)"
        first = await tab.say(f"new message one {long}")
        notice = await tab.next("message")
        second = await tab.say(f"new message two {long}")
        assert (first["outcome"], second["outcome"]) == ("refused", "refused")
        assert notice["text"] == NOT_STORED_TEXT
        daemon.gw.store.conn.execute("PRAGMA max_page_count = 1073741823")  # space is back
        reply = await tab.next("message")
        assert reply["text"].startswith("echo: accepted before the disk filled")
        # told once
        assert [m for m in tab.received if m.get("type") == "message"] == [notice, reply]
    status, _ = await _readyz(port)
    assert status == 200
    assert _rows(home / "state.db", "SELECT status, substr(text, 1, 31) FROM inbound") == [
        ("answered", "accepted before the disk filled")
    ]


async def test_readiness_comes_back_with_the_space_when_nothing_waits(
    daemon: Daemon, home: Path
) -> None:
    port = daemon.web_port or 0
    _fill(daemon)
    async with WebChatClient(port, home=home) as tab:
        assert (await tab.say("y" * 20_000))["outcome"] == "refused"
    assert (await _readyz(port))[0] == 503
    daemon.gw.store.conn.execute("PRAGMA max_page_count = 1073741823")
    async with asyncio.timeout(60):
        # the daemon's own probe (every 2 s) notices; no message is needed
        while (await _readyz(port))[0] != 200:
            await asyncio.sleep(0.2)


async def test_a_lock_taken_while_the_model_answers_delays_the_reply_and_loses_nothing(
    daemon: Daemon, home: Path, fake_llm: FakeLLM
) -> None:
    port = daemon.web_port or 0
    health = daemon.gw.store.health
    pauses: list[float] = []
    pause = health.sleep

    async def counted(seconds: float) -> None:  # each pause is one failed attempt, then a wait
        pauses.append(seconds)
        await pause(seconds)

    health.sleep = counted
    fake_llm.script(Delay(0.5))
    async with WebChatClient(port, home=home) as tab:
        assert (await tab.say("answer me while the database is locked"))["outcome"] == "accepted"
        await fake_llm.wait_for_call("/v1/messages")
        async with LockHolder(home / "state.db") as lock:
            await fake_llm.wait_until(lambda: health.reason == "busy")
            tried = len(pauses)
            await fake_llm.wait_until(lambda: len(pauses) >= tried + 2)  # it tried again, and again
            # the answer is in, its turn cannot store it: nothing is sent meanwhile
            assert _rows(home / "state.db", "SELECT status FROM inbound") == [("running",)]
            assert _rows(home / "state.db", "SELECT COUNT(*) FROM outbound") == [(0,)]
            await lock.release()
        reply = await tab.next("message")
    assert reply["text"].startswith("echo: answer me while the database is locked")
    assert _rows(home / "state.db", "SELECT status FROM inbound") == [("answered",)]
    assert _rows(home / "state.db", "SELECT COUNT(*) FROM outbound WHERE status = 'sent'") == [(1,)]


class LockingAdapter(RecordingAdapter):
    """Sends like any adapter; right after its first send, another process takes the write lock."""

    def __init__(self, db: Path) -> None:
        super().__init__("cli")
        self.lock = LockHolder(db)
        self.locked = False

    async def send(self, message: OutboundMessage) -> str:
        sent = await super().send(message)
        if not self.locked:
            self.locked = True
            await self.lock.__aenter__()
        return sent


async def test_a_chunk_sent_while_the_lock_is_taken_is_recorded_once_not_sent_twice(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url)
    adapter = LockingAdapter(home / "state.db")
    gw = gateway_for(home, [adapter])
    try:
        assert (await gw.sessions.submit(inbound("hello"))).outcome.value == "accepted"
        await fake_llm.wait_until(
            lambda: adapter.locked and gw.store.health.reason == "busy", timeout=10
        )
        # sent, not yet recorded
        assert _rows(home / "state.db", "SELECT status FROM outbound") == [("pending",)]
        await adapter.lock.release()
        await gw.sessions.wait_idle()
        await gw.outbox.deliver_pending()  # a retry round finds nothing left to send
        assert adapter.texts() == ["echo: hello [users=1]"]
        assert _rows(home / "state.db", "SELECT status FROM outbound") == [("sent",)]
    finally:
        await adapter.lock.release()
        await gw.llm.close()
        gw.store.close()
