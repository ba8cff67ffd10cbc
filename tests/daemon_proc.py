"""Run `gateway run` as a real subprocess, the way systemd does: a NOTIFY_SOCKET to hear
READY/WATCHDOG/STOPPING, signals to stop it, and every byte of its stdout/stderr kept for the test
to inspect.

Readiness comes from the notify socket (no polling); the web chat is reached over its real
WebSocket. Waits default to a minute or two: met, they return at once; on a busy machine a start
takes tens of seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import aiohttp

from gateway.config.settings import WebConfig, load_config
from gateway.errors import ConfigError
from gateway.ops.web_guard import load_web_secret

GATEWAY = str(Path(sys.executable).parent / "gateway")
DEFAULT_WEB_PORT = WebConfig().port


def free_port() -> int:
    """A port for a daemon this test starts later (it must bind the number itself), chosen where
    nothing else on this busy machine picks ports by itself: below the kernel's ephemeral range, at
    random (not from `random`, which a plugin may seed alike in two test runs). A port from bind(0)
    sits in that range, and until the daemon binds it, any outgoing connection (1,100 of them in the
    flood test, and every other run's) may be given it as its local port, and the daemon's bind then
    fails."""
    low, _ = _ephemeral_range()
    pick = random.SystemRandom()
    for _ in range(100):
        port = pick.randrange(max(1024, low - 12_000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below the ephemeral range")


def _check_web_port(home: Path, env: dict[str, str]) -> None:
    """A daemon a test starts never listens on the default port: the developer's own gateway may."""
    try:
        web = load_config(home, env=env).web
    except ConfigError:  # a test of a bad config: the daemon exits before it listens
        return
    if web.enabled and web.port == DEFAULT_WEB_PORT:
        raise AssertionError(
            f"{home}/config.yaml leaves the web chat on {DEFAULT_WEB_PORT}, where the "
            "developer's own gateway may listen: set web.port (0, or free_port())"
        )


def _link(fd: Path) -> str | None:
    try:
        return str(fd.readlink())
    except OSError:  # closed meanwhile
        return None


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        # Linux's default; elsewhere (BSDs use 49152-65535) ports below it are as good
        return 32768, 60999


class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's
    notify socket; records every datagram in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.messages: list[str] = []
        self._changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._readable)

    def _readable(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                break
            self.messages.append(data.decode())
            self._changed.set()

    def assignments(self) -> list[str]:
        """Every KEY=value line received, in order (a datagram may carry several)."""
        return [line for msg in self.messages for line in msg.split("\n") if line]

    async def wait_for(self, line: str, timeout: float = 90.0) -> None:
        async def loop() -> None:
            while line not in self.assignments():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), timeout)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()


class DaemonProc:
    def __init__(
        self,
        home: Path,
        *,
        env: Mapping[str, str] | None = None,
        watchdog_usec: int | None = None,
        args: tuple[str, ...] = ("--log-format", "json", "run"),
        nofile: int | None = None,
    ) -> None:
        self.home = home
        # RLIMIT_NOFILE (soft and hard) for the daemon, as a unit's LimitNOFILE= sets it
        self.nofile = nofile
        self.extra_env = dict(env or {})
        self.watchdog_usec = watchdog_usec
        self.args = args
        self.proc: asyncio.subprocess.Process | None = None
        self.notify: NotifySocket | None = None
        self.stdout = bytearray()
        self.stderr = bytearray()
        self._readers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.notify = NotifySocket(self.home.parent / f"notify-{id(self)}.sock")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home.parent),
            "NOTIFY_SOCKET": str(self.notify.path),
            **self.extra_env,
        }
        _check_web_port(self.home, env)
        if self.watchdog_usec:
            env["WATCHDOG_USEC"] = str(self.watchdog_usec)
        self.proc = await asyncio.create_subprocess_exec(
            GATEWAY,
            "--home",
            str(self.home),
            *self.args,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=self._limits,
        )
        assert self.proc.stdout and self.proc.stderr
        self._readers = [
            asyncio.create_task(self._pump(self.proc.stdout, self.stdout)),
            asyncio.create_task(self._pump(self.proc.stderr, self.stderr)),
        ]

    def _limits(self) -> None:
        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    @staticmethod
    async def _pump(stream: asyncio.StreamReader, into: bytearray) -> None:
        while chunk := await stream.read(65536):
            into.extend(chunk)

    async def wait_ready(self, timeout: float = 120.0) -> None:
        assert self.notify and self.proc
        ready = asyncio.create_task(self.notify.wait_for("READY=1", timeout))
        exited = asyncio.create_task(self.proc.wait())
        done, _ = await asyncio.wait(
            {ready, exited}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        for task in (ready, exited):
            if task not in done:
                task.cancel()
        if ready not in done:
            raise AssertionError(
                f"daemon not ready (exit {self.proc.returncode}):\n{self.output()}"
            )

    async def signal(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc
        self.proc.send_signal(sig)

    async def wait(self, timeout: float = 120.0) -> int:
        assert self.proc
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await asyncio.gather(*self._readers)
        return code

    async def stop(self) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await self.wait()

    async def kill(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self._readers:
            await asyncio.gather(*self._readers, return_exceptions=True)
        if self.notify:
            self.notify.close()
            self.notify = None

    def output(self) -> str:
        return (self.stdout + self.stderr).decode(errors="replace")

    def has_open(self, path: Path) -> bool:
        """Whether the daemon holds `path` open now (Linux: its /proc/PID/fd links)."""
        assert self.proc
        try:
            fds = list(Path(f"/proc/{self.proc.pid}/fd").iterdir())
        except OSError:  # it exited
            return False
        return any(_link(fd) == str(path) for fd in fds)

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.stderr.decode(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records


class WebChatClient:
    """One browser tab of the web chat: a WebSocket with a fixed client id (the chat id)."""

    def __init__(
        self, port: int, client: str = "tab1", *, home: Path | None = None, token: str | None = None
    ) -> None:
        self.url = f"ws://127.0.0.1:{port}/ws?client={client}"
        # The login secret, as a script sends it (a browser sends the cookie the login link set).
        secret = token or (load_web_secret(home) if home is not None else None)
        self.headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        self.session: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.received: list[dict[str, Any]] = []

    async def __aenter__(self) -> Self:
        self.session = aiohttp.ClientSession()
        self.ws = await self.session.ws_connect(self.url, headers=self.headers)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()

    async def say(self, text: str) -> dict[str, Any]:
        """Send one message and return the ack."""
        assert self.ws
        await self.ws.send_str(json.dumps({"text": text}))
        return await self.next("ack")

    async def next(self, kind: str = "message", timeout: float = 90.0) -> dict[str, Any]:
        assert self.ws
        async with asyncio.timeout(timeout):
            while True:
                msg = await self.ws.receive()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    raise AssertionError(f"socket closed before a {kind!r} frame ({msg.type})")
                data: dict[str, Any] = json.loads(msg.data)
                self.received.append(data)
                if data.get("type") == kind:
                    return data
