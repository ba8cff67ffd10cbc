"""The daemon's side of the worker: one child process, started on the first job and reused for the
next ones, one job at a time, a bounded queue in front of it.

A job is a module-level function, by name, run in the child (gateway/worker/child.py) under the
child's memory cap and the job's CPU seconds, and waited for at most the job's wall-clock seconds.
Past a limit, or when the child crashes, the caller gets `WorkerFailed` with a plain reason and the
next job gets a fresh child; nothing the child does can take the daemon down. An idle child exits
after `idle_s`, so the memory a burst took goes back to the system.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, overload

from gateway.errors import GatewayError, MediaError, ToolError
from gateway.worker.wire import PREFIX, WireError, decode, encode, rebuild, split

log = logging.getLogger(__name__)

T = TypeVar("T")
Job = Callable[..., Any]  # a module-level function: the child finds it by module and name
PASSED: dict[str, type[Exception]] = {"MediaError": MediaError, "ToolError": ToolError}
MEMORY_MB = 768  # the child's address space (wiring sizes it from media.max_decode_mb)
MAX_JOBS = 16  # running and waiting; one more is refused at once
IDLE_S = 300.0  # an idle child exits (a new one costs ~1 s: Python, then the parser)
STOP_S = 3.0  # a child asked to exit that has not is killed after this long
LOG_LINES = 40  # of a child's stderr, per child; the rest is counted
ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds `gateway/`


@dataclass(frozen=True, slots=True)
class JobLimits:
    cpu_s: float  # processor time the job may use
    wall_s: float  # how long the daemon waits for it, queue not counted


class WorkerFailed(GatewayError):
    """A job that did not finish. `reason`: cpu, time, memory, crashed or busy; the message says
    it plainly ("reading it took more than 15 s of processor time")."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class Worker:
    def __init__(
        self, *, memory_mb: int = MEMORY_MB, max_jobs: int = MAX_JOBS, idle_s: float = IDLE_S
    ) -> None:
        self.memory_mb = memory_mb
        self.max_jobs = max_jobs
        self.idle_s = idle_s
        self.started = 0  # children started so far
        self.running: str | None = None  # the function of the job the child is on
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._jobs = 0
        self._idle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pid(self) -> int | None:
        """The child's process id while one runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    @overload
    async def run(self, fn: Job, *args: Any, limits: JobLimits, returns: type[T]) -> T: ...

    @overload
    async def run(self, fn: Job, *args: Any, limits: JobLimits, returns: None = None) -> Any: ...

    async def run(
        self, fn: Job, *args: Any, limits: JobLimits, returns: type[T] | None = None
    ) -> Any:
        """`fn(*args)` in the child; its result (the dataclass `returns`, checked, when given)."""
        if self._jobs >= self.max_jobs:
            raise WorkerFailed(
                "busy", "too many files and pages are being read right now; try again in a minute"
            )
        self._jobs += 1
        try:
            async with self._lock:
                reply = await self._job(_name(fn), list(args), limits)
        finally:
            self._jobs -= 1
        if "ok" not in reply:
            raise self._refusal(reply.get("error"), _name(fn))
        if returns is None:
            return reply["ok"]
        try:
            return rebuild(returns, reply["ok"])
        except WireError as exc:
            log.warning("worker: %s answered in the wrong shape: %s", _name(fn), exc)
            raise WorkerFailed("crashed", "the reader failed on it") from None

    async def _job(self, name: str, args: list[Any], limits: JobLimits) -> dict[str, Any]:
        proc = await self._process()
        self._stop_idle_timer()
        self.running = name
        killed = False
        try:
            assert proc.stdin is not None
            proc.stdin.write(encode({"fn": name, "args": args, "cpu_s": limits.cpu_s}))
            async with asyncio.timeout(limits.wall_s):
                await proc.stdin.drain()
                reply = await _read(proc)
        except TimeoutError:
            killed = True
            self._kill(proc)
            raise WorkerFailed("time", f"reading it took longer than {limits.wall_s:g} s") from None
        except (asyncio.IncompleteReadError, ConnectionError, WireError) as exc:
            killed = True
            raise await self._death(proc, name, limits, exc) from None
        except BaseException:  # cancelled mid-job: its answer would reach the next job
            killed = True
            self._kill(proc)
            raise
        finally:
            self.running = None
            if not killed:
                self._arm_idle_timer()
        if not isinstance(reply, dict):
            self._kill(proc)
            raise WorkerFailed("crashed", "the reader gave an answer that is not one")
        if reply.get("bye"):
            await self._stop(proc)
        return reply

    def _refusal(self, error: Any, name: str) -> Exception:
        kind = error.get("kind") if isinstance(error, dict) else None
        message = str(error.get("message", "")) if isinstance(error, dict) else ""
        if kind in PASSED:
            return PASSED[kind](message)
        if kind == "memory":
            why = f"reading it needed more than the {self.memory_mb} MB it may use"
            return WorkerFailed("memory", why)
        log.warning("worker: %s failed: %s", name, message or error)
        return WorkerFailed("crashed", "the reader failed on it")

    async def _death(
        self, proc: asyncio.subprocess.Process, name: str, limits: JobLimits, exc: Exception
    ) -> WorkerFailed:
        """Why the child stopped answering (it ended, or wrote something that is not a frame)."""
        if isinstance(exc, WireError):
            log.warning("worker: %s: the child wrote a bad frame (%s)", name, exc)
            self._kill(proc)
            return WorkerFailed("crashed", "the reader failed on it")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), STOP_S)
        self._kill(proc)
        code = proc.returncode
        if code == -signal.SIGXCPU:
            why = f"reading it took more than {limits.cpu_s:g} s of processor time"
            return WorkerFailed("cpu", why)
        log.warning("worker: %s: the child ended (%s)", name, _status(code))
        if code == -signal.SIGKILL:  # the kernel's OOM killer, or a hard limit
            return WorkerFailed("memory", "reading it was stopped by the system (out of memory)")
        return WorkerFailed("crashed", "the reader failed on it")

    async def _process(self) -> asyncio.subprocess.Process:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            return proc
        pipe = asyncio.subprocess.PIPE
        command = ["-s", "-m", "gateway.worker.child", str(self.memory_mb), str(os.getpid())]
        try:
            proc = self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *command,
                stdin=pipe,
                stdout=pipe,
                stderr=pipe,
                env=_child_env(),
                cwd="/",
            )
        except OSError as exc:  # out of processes or memory: this job fails, the next one tries
            log.warning("worker: cannot start: %s", exc)
            raise WorkerFailed("crashed", "the reader could not be started") from None
        self.started += 1
        log.info("worker: started pid %s (memory cap %s MB)", proc.pid, self.memory_mb)
        assert proc.stderr is not None
        self._spawn(_pump(proc.stderr, proc.pid))
        return proc

    def _kill(self, proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            self._spawn(_reap(proc))
        if self._proc is proc:
            self._proc = None

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        """End of input: the child exits by itself; killed if it does not within STOP_S."""
        if self._proc is proc:
            self._proc = None
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), STOP_S)
        except TimeoutError:
            self._kill(proc)

    def _arm_idle_timer(self) -> None:
        self._stop_idle_timer()
        self._idle = asyncio.get_running_loop().call_later(self.idle_s, self._idle_out)

    def _stop_idle_timer(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _idle_out(self) -> None:
        proc = self._proc
        if proc is not None and not self._lock.locked():
            log.info("worker: pid %s idle for %g s, ending it", proc.pid, self.idle_s)
            self._spawn(self._stop(proc))

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop the child (the daemon stops); a later job would start a new one."""
        self._stop_idle_timer()
        if self._proc is not None:
            await self._stop(self._proc)
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _read(proc: asyncio.subprocess.Process) -> Any:
    assert proc.stdout is not None
    header, blobs = split(await proc.stdout.readexactly(PREFIX.size))
    head = await proc.stdout.readexactly(header)
    return decode(head, await proc.stdout.readexactly(blobs))


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Wait for a killed child. Its stdout is read to the end first: asyncio (before Python 3.12)
    reports a child's exit only once its pipes are closed, and a reply cut off mid-frame may have
    paused the reading."""
    if proc.stdout is not None:
        with contextlib.suppress(OSError, ValueError):
            while await proc.stdout.read(65536):
                pass
    await proc.wait()


async def _pump(stream: asyncio.StreamReader, pid: int) -> None:
    """The child's stderr (a library's warnings about a hostile file) into the log, a few lines
    per child."""
    lines = 0
    last: deque[str] = deque(maxlen=1)
    while chunk := await stream.read(65536):
        for line in chunk.decode("utf-8", "replace").splitlines():
            lines += 1
            last.append(line)
            if lines <= LOG_LINES and line.strip():
                log.info("worker %s: %s", pid, line[:500])
    if lines > LOG_LINES:
        log.info(
            "worker %s: %s more lines on stderr, the last: %s",
            pid,
            lines - LOG_LINES,
            last[0][:500],
        )


def _name(fn: Job) -> str:
    qualname = getattr(fn, "__qualname__", "")
    if "<" in qualname or not qualname:
        raise TypeError(f"the worker runs module-level functions only, not {fn!r}")
    return f"{fn.__module__}:{qualname}"


def _child_env() -> dict[str, str]:
    """What the child sees of the environment: no keys or tokens, what Python needs to start."""
    paths = [ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(paths),
        "MALLOC_ARENA_MAX": "2",
    }


def _status(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"
