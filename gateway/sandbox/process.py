"""One command as a child process the event loop only waits on: its output read in bounded chunks
(gateway/sandbox/output.py), a wall-clock deadline, and a kill that leaves nothing behind.

In the sandbox the command's processes live in their own PID namespace, whose init bubblewrap
reports on its info pipe: SIGKILL to that init ends every process in the namespace, and its pidfd
turns readable only once the kernel has reaped them all, so `run` returns with none left. Without
the sandbox (`sandbox: none`) the command's process group is killed instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import GatewayError
from gateway.sandbox.output import Capture, Captured

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
MAX_DRAIN = 64 << 20  # bytes of output read before the command is stopped: the rest is not read
REAP_S = 10.0  # how long a killed sandbox may take to be gone before it is logged
GRACE_S = 2.0  # after a kill, for the pipes to close (a process that left the group)


class SandboxFailed(GatewayError):
    """The sandbox itself could not start the command (bubblewrap missing or refused)."""


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one command: `info_fd` is bubblewrap's --info-fd (None without the sandbox);
    `fds` are passed to the child and closed here once it started."""

    argv: Sequence[str]
    fds: tuple[int, ...] = ()
    info_fd: int | None = None
    run_as: tuple[int, int] | None = None
    env: dict[str, str] = field(default_factory=lambda: {"PATH": "/usr/bin:/bin"})
    cwd: str = "/"


@dataclass(frozen=True, slots=True)
class Finished:
    """`exit_code` None when it was stopped: `stopped` says why (time, output)."""

    exit_code: int | None
    stdout: Captured
    stderr: Captured
    duration_s: float
    stopped: str | None = None
    pid_namespace: int | None = None  # the sandbox's, for a check that nothing is left in it


@dataclass(slots=True)
class _Child:
    proc: asyncio.subprocess.Process
    init: int | None = None  # the PID namespace's init (host pid)
    pidfd: int | None = None
    namespace: int | None = None


async def run(launch: Launch, *, timeout_s: float, keep: int) -> Finished:
    """Run to the end, or until `timeout_s` or MAX_DRAIN bytes of output; then kill it all."""
    started = time.monotonic()
    try:
        child = _Child(await _spawn(launch))
    except BaseException:
        _close(launch.info_fd)
        raise
    out, err = Capture(keep), Capture(keep)
    stopped: str | None = None
    flood = asyncio.Event()
    pumps = [
        asyncio.ensure_future(_pump(s, c, flood))
        for s, c in ((child.proc.stdout, out), (child.proc.stderr, err))
    ]
    try:
        async with asyncio.timeout(timeout_s):
            if launch.info_fd is not None:
                await _learn_init(child, launch.info_fd)
            if await _ended_or_flooded(child.proc, pumps, flood):
                stopped = "output"
    except TimeoutError:
        stopped = "time"
    finally:
        if stopped is not None or child.proc.returncode is None:
            await _kill(child)
        await _settle(pumps)
        _close(child.pidfd)
        _close_pipes(child.proc)
    if launch.info_fd is not None and stopped is None and _setup_failed(child, out, err):
        said = err.text().head.strip().splitlines()
        raise SandboxFailed(said[-1] if said else f"bwrap exited with {child.proc.returncode}")
    code = None if stopped else child.proc.returncode
    return Finished(
        code, out.text(), err.text(), time.monotonic() - started, stopped, child.namespace
    )


def _setup_failed(child: _Child, out: Capture, err: Capture) -> bool:
    """bubblewrap gave up before the command ran: no namespace init, or exit code 1 with only its
    own "bwrap: " complaint said (it builds the mounts after its init exists)."""
    if child.init is None:
        return True
    said = err.text().head
    return (
        child.proc.returncode == 1
        and out.total == 0
        and said.startswith("bwrap: ")
        and said.count("\n") <= 1
    )


async def _spawn(launch: Launch) -> asyncio.subprocess.Process:
    user: dict[str, Any] = {}
    if launch.run_as is not None:
        uid, gid = launch.run_as
        user = {"user": uid, "group": gid, "extra_groups": []}
    try:
        return await asyncio.create_subprocess_exec(
            *launch.argv,
            stdin=DEVNULL,
            stdout=PIPE,
            stderr=PIPE,
            pass_fds=launch.fds,
            start_new_session=True,
            env=launch.env,
            cwd=launch.cwd,
            **user,
        )
    except OSError as exc:
        raise SandboxFailed(f"{launch.argv[0]} could not be started ({exc.strerror})") from None
    finally:
        for fd in launch.fds:
            _close(fd)


async def _learn_init(child: _Child, info_fd: int) -> None:
    """bubblewrap's JSON on its info pipe: the namespace init's pid, pinned at once by a pidfd."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    pipe = os.fdopen(info_fd, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    raw = b""
    try:
        while len(raw) < 64 * 1024 and (chunk := await reader.read(4096)):
            raw += chunk  # bubblewrap writes it once the namespaces exist and closes its end
    finally:
        transport.close()
    with contextlib.suppress(ValueError):
        info = json.loads(raw)
        child.init = int(info["child-pid"])
        child.namespace = info.get("pid-namespace")
        with contextlib.suppress(OSError):
            child.pidfd = os.pidfd_open(child.init)


async def _ended_or_flooded(
    proc: asyncio.subprocess.Process, pumps: list[asyncio.Task[None]], flood: asyncio.Event
) -> bool:
    """Wait for the command to end (its output read to the end) or for `flood`; True for a flood."""
    ended = asyncio.ensure_future(_ended(proc, pumps))
    flooded = asyncio.ensure_future(flood.wait())
    try:
        await asyncio.wait([ended, flooded], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (ended, flooded):
            task.cancel()
        await asyncio.gather(ended, flooded, return_exceptions=True)
    return flood.is_set()


async def _ended(proc: asyncio.subprocess.Process, pumps: list[asyncio.Task[None]]) -> None:
    await asyncio.wait(pumps)
    await proc.wait()


async def _pump(
    stream: asyncio.StreamReader | None, capture: Capture, flood: asyncio.Event
) -> None:
    """Read to the end, keeping the head and the tail; past MAX_DRAIN bytes say so (`flood`) and
    keep reading (the pipe must not fill while the command is killed), nothing more kept."""
    assert stream is not None
    while chunk := await stream.read(CHUNK):
        capture.add(chunk)
        if capture.total > MAX_DRAIN:
            flood.set()


async def _kill(child: _Child) -> None:
    """SIGKILL: to the namespace's init (the kernel then kills the rest), to bubblewrap, to the
    process group; then wait until the namespace is empty."""
    for pid in (child.init, child.proc.pid):
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.proc.pid, signal.SIGKILL)
    await child.proc.wait()
    if child.pidfd is not None and not await _gone(child.pidfd):
        log.warning("sandbox: pid %s still there %s s after SIGKILL", child.init, REAP_S)


async def _gone(pidfd: int) -> bool:
    loop = asyncio.get_running_loop()
    ended = loop.create_future()

    def readable() -> None:
        if not ended.done():
            ended.set_result(True)

    loop.add_reader(pidfd, readable)
    try:
        async with asyncio.timeout(REAP_S):
            return bool(await ended)
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)


async def _settle(pumps: Sequence[asyncio.Future[None]]) -> None:
    """The pumps end once every writer of the pipes is gone; one that does not (a process that
    escaped the group without the sandbox) is cancelled after GRACE_S."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*pumps, return_exceptions=True), GRACE_S)
    for pump in pumps:
        pump.cancel()
    await asyncio.gather(*pumps, return_exceptions=True)


def _close_pipes(proc: asyncio.subprocess.Process) -> None:
    """The pipes a stopped pump no longer reads (output over MAX_DRAIN) are closed here: asyncio's
    Process has no public close, its transport does."""
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
