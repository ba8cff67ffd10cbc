"""sd_notify: the datagrams systemd would receive, on a real AF_UNIX socket, from the Notifier and
from a real `gateway run` subprocess (READY, then WATCHDOG from the event loop, then STOPPING on
SIGTERM)."""

from __future__ import annotations

import asyncio
import os
import socket
import textwrap
from pathlib import Path

import pytest

from gateway.ops.notify import Notifier
from tests.daemon_proc import DaemonProc, NotifySocket, free_port
from tests.fakes.llm import FakeLLM


def receiver(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    return sock


def test_messages_arrive_as_systemd_expects(tmp_path: Path) -> None:
    sock = receiver(tmp_path / "notify")
    notifier = Notifier(str(tmp_path / "notify"))
    try:
        assert notifier.ready("web running")
        assert notifier.watchdog()
        assert notifier.status("web running") is False  # unchanged status is not resent
        assert notifier.status("web running,\n telegram backoff")
        assert notifier.stopping("draining")
        got = [sock.recv(4096).decode() for _ in range(4)]
    finally:
        notifier.close()
        sock.close()
    assert got == [
        "READY=1\nSTATUS=web running",
        "WATCHDOG=1",
        "STATUS=web running, telegram backoff",
        "STOPPING=1\nSTATUS=draining",
    ]


def test_abstract_socket_address(tmp_path: Path) -> None:
    name = f"agent-gateway-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    notifier = Notifier(f"@{name}")
    try:
        assert notifier.ready()
        assert sock.recv(100) == b"READY=1"
    finally:
        notifier.close()
        sock.close()


def test_without_notify_socket_everything_is_a_no_op() -> None:
    notifier = Notifier.from_env({}, pid=1)
    assert not notifier.enabled
    assert (
        notifier.ready("x") is False
        and notifier.watchdog() is False
        and notifier.stopping() is False
    )
    assert notifier.sent == []


def test_a_vanished_manager_does_not_raise(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "nobody-listens"))
    assert notifier.ready() is False
    assert notifier.watchdog() is False
    notifier.close()


def test_watchdog_interval_is_half_of_watchdog_usec_and_only_for_our_pid() -> None:
    env = {"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "30000000"}
    assert Notifier.from_env(env, pid=42).watchdog_interval == 15.0
    assert Notifier.from_env({**env, "WATCHDOG_PID": "42"}, pid=42).watchdog_interval == 15.0
    assert Notifier.from_env({**env, "WATCHDOG_PID": "7"}, pid=42).watchdog_interval is None
    # daemon.watchdog: false
    assert Notifier.from_env(env, pid=42, watchdog=False).watchdog_interval is None
    assert Notifier.from_env({**env, "WATCHDOG_USEC": "junk"}, pid=42).watchdog_interval is None


async def test_keepalive_pings_at_half_the_watchdog_period_with_status(tmp_path: Path) -> None:
    sock = receiver(tmp_path / "notify")
    waits: list[float] = []
    statuses = iter(["web starting", "web starting", "web running"])

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:
            raise asyncio.CancelledError

    notifier = Notifier(str(tmp_path / "notify"), watchdog_usec=30_000_000, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await notifier.keepalive(lambda: next(statuses))
    got = [sock.recv(4096).decode() for _ in range(3)]
    notifier.close()
    sock.close()
    assert waits == [15.0, 15.0, 15.0]
    assert got == [
        "WATCHDOG=1\nSTATUS=web starting",
        "WATCHDOG=1",
        "WATCHDOG=1\nSTATUS=web running",
    ]


@pytest.fixture
async def daemon_home(tmp_path: Path, fake_llm: FakeLLM) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    (home / "config.yaml").write_text(
        textwrap.dedent(f"""\
        model:
          provider: anthropic
          name: claude-test
          base_url: {fake_llm.base_url}
          api_key: test-key
          max_retries: 0
        web:
          port: {port}
        """),
        encoding="utf-8",
    )
    return home


async def test_gateway_run_speaks_sd_notify_in_order(daemon_home: Path) -> None:
    daemon = DaemonProc(daemon_home, watchdog_usec=200_000)  # WatchdogSec=0.2 s: pings every 0.1 s
    await daemon.start()
    try:
        await daemon.wait_ready()
        assert daemon.notify is not None
        await daemon.notify.wait_for("WATCHDOG=1")
        code = await daemon.stop()
        lines = daemon.notify.assignments()
    finally:
        await daemon.kill()
    assert code == 0, daemon.output()
    ready, watchdog, stopping = (lines.index(x) for x in ("READY=1", "WATCHDOG=1", "STOPPING=1"))
    assert ready < watchdog < stopping
    assert "READY=1" not in lines[ready + 1 :]
    status = [line for line in lines if line.startswith("STATUS=")]
    assert any("web running" in s for s in status), status
    assert any(s.startswith("STATUS=draining") for s in lines[stopping:]), lines[stopping:]


async def test_notify_socket_in_the_test_helper_records_datagrams_in_order(tmp_path: Path) -> None:
    sink = NotifySocket(tmp_path / "n.sock")
    notifier = Notifier(str(sink.path))
    try:
        notifier.ready()
        notifier.watchdog()
        await sink.wait_for("WATCHDOG=1", timeout=5)
    finally:
        notifier.close()
        sink.close()
    assert sink.assignments() == ["READY=1", "WATCHDOG=1"]
