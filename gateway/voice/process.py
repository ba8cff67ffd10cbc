"""espeak-ng and ffmpeg as bounded child processes: a time limit, CPU, memory and file-size limits,
and a cap on what is read back. The event loop only waits: the child does the work, its output is
read in chunks.

The limits are set before the tool runs its first instruction: util-linux's `prlimit` (Essential on
Debian) sets them on itself and execs the tool. Not `preexec_fn` (Python between fork and exec is
unsafe in a threaded process), and not `resource.prlimit` on the started child (a fast child does
its work before the limits land). Without `prlimit` on the machine they are set on the started
child, as the next best thing."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import resource
import shutil
import signal
from asyncio.subprocess import PIPE
from collections.abc import Sequence

from gateway.errors import SpeechError

log = logging.getLogger(__name__)

MEMORY_BYTES = 1 << 30  # address space: ffmpeg maps its libraries (~200 MB) and needs little more
STDERR_KEPT = 2000  # the end of what the tool said, for the log
PACKAGES = {"espeak-ng": "espeak-ng", "ffmpeg": "ffmpeg", "ffprobe": "ffmpeg"}


async def run_tool(
    argv: Sequence[str],
    *,
    stdin: bytes = b"",
    timeout_s: float,
    max_output: int,
    max_file_bytes: int | None = None,
) -> bytes:
    """The tool's standard output; SpeechError when it is missing, fails, runs out of time or
    writes more than `max_output` bytes (then it is killed). `max_file_bytes` caps each file it
    writes (RLIMIT_FSIZE)."""
    name = argv[0]
    limits = _limits(cpu_s=int(timeout_s) + 1, file_bytes=max_file_bytes)
    wrapper = _prlimit()
    if wrapper is not None and shutil.which(name) is None:
        raise _missing(name)
    before = [wrapper, *(f"--{flag}={value}" for flag, _, value in limits), "--"] if wrapper else []
    try:
        proc = await asyncio.create_subprocess_exec(
            *before, *argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, start_new_session=True
        )
    except FileNotFoundError:
        raise _missing(name) from None
    except OSError as exc:
        raise SpeechError(f"{name} could not be started ({exc.strerror})") from None
    if wrapper is None:
        _limit_started(proc.pid, limits)
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await _communicate(proc, stdin, max_output, name)
    except TimeoutError:
        raise SpeechError(f"{name} took longer than {timeout_s:g} s") from None
    finally:
        await _reap(proc)
    if proc.returncode != 0:
        said = err.decode("utf-8", "replace").strip().splitlines()
        last = said[-1] if said else "(nothing on stderr)"
        log.warning("%s exited with %s: %s", name, proc.returncode, last)
        raise SpeechError(f"{name} failed (exit status {proc.returncode})")
    return out


def _missing(name: str) -> SpeechError:
    package = PACKAGES.get(name, name)
    return SpeechError(f"{name} is not installed (apt-get install {package})")


@functools.cache
def _prlimit() -> str | None:
    found = shutil.which("prlimit")
    if found is None:
        log.warning(
            "prlimit (util-linux) is not installed: the speech tools' limits are set "
            "just after they start"
        )
    return found


def _limits(*, cpu_s: int, file_bytes: int | None) -> list[tuple[str, int, int]]:
    """(prlimit's flag, resource, value) of each limit."""
    limits = [("cpu", resource.RLIMIT_CPU, cpu_s), ("as", resource.RLIMIT_AS, MEMORY_BYTES)]
    if file_bytes is not None:
        limits.append(("fsize", resource.RLIMIT_FSIZE, file_bytes))
    return limits


def _limit_started(pid: int, limits: list[tuple[str, int, int]]) -> None:
    """The limits on a child already started (no prlimit here): both tools wait on stdin, which
    they are given only after this."""
    for _, which, value in limits:
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError, OSError):
            resource.prlimit(pid, which, (value, value))


async def _communicate(
    proc: asyncio.subprocess.Process, stdin: bytes, max_output: int, name: str
) -> tuple[bytes, bytes]:
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    feeder = asyncio.ensure_future(_feed(proc.stdin, stdin))
    errors = asyncio.ensure_future(_tail(proc.stderr))
    try:
        out = bytearray()
        while chunk := await proc.stdout.read(64 * 1024):
            out += chunk
            if len(out) > max_output:
                raise SpeechError(f"{name} wrote more than {max_output:,} bytes")
        await proc.wait()
        await feeder
        return bytes(out), await errors
    finally:
        for task in (feeder, errors):
            task.cancel()
        await asyncio.gather(feeder, errors, return_exceptions=True)


async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        pipe.write(data)
        await pipe.drain()
        pipe.close()
        await pipe.wait_closed()


async def _tail(pipe: asyncio.StreamReader) -> bytes:
    kept = b""
    while chunk := await pipe.read(64 * 1024):
        kept = (kept + chunk)[-STDERR_KEPT:]
    return kept


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kill a child still running (timed out, or too much output) with its process group and wait
    for it, so none is left behind. Its pipes are read to their end first: asyncio (before Python
    3.12) reports a child's exit only once its pipes are closed, and a pipe whose reading paused on
    unread output never reaches its end."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # started in a session of its own
    await asyncio.gather(*(_discard(pipe) for pipe in (proc.stdout, proc.stderr) if pipe))
    await proc.wait()


async def _discard(pipe: asyncio.StreamReader) -> None:
    with contextlib.suppress(OSError, ValueError):
        while await pipe.read(64 * 1024):
            pass
