"""The worker process, `python -m gateway.worker.child <memory_mb> <parent pid>`, started by Worker.

It reads one job at a time from stdin (a module-level function by name, its arguments, its CPU
seconds), runs it and writes the answer to stdout. Its limits are the kernel's: an address-space
cap for the whole process (RLIMIT_AS), CPU time per job (RLIMIT_CPU, raised from the time used so
far; past it the kernel ends the process with SIGXCPU), no core files. It dies with the daemon
(PR_SET_PDEATHSIG, and the end of stdin). After a MemoryError, or once it has grown past
RECYCLE_MB, it answers and exits, so its heap goes back to the system.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import math
import os
import resource
import signal
import sys
from collections.abc import Callable
from typing import IO, Any

from gateway.errors import MediaError, ToolError
from gateway.worker.wire import encode, read_frame

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
RECYCLE_MB = 250  # a process this large after a job exits once it has answered
PASSED = (MediaError, ToolError)  # raised by a job: the caller gets the same error and message


def confine(memory_mb: int, parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the daemon died before the line above: nobody to serve
        os._exit(0)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in `gateway chat` is the daemon's
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def cpu_budget(seconds: float) -> None:
    """Allow `seconds` more of CPU time from now (RLIMIT_CPU counts from the process's start)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + seconds)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]  # the daemon's own ceiling, if it has one
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def resolve(name: str) -> Callable[..., Any]:
    module, _, qualname = name.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not callable(found):
        raise TypeError(f"{name} is not a function")
    return found  # type: ignore[no-any-return]


def answer(job: Any) -> tuple[dict[str, Any], bool]:
    """The reply to one job, and whether this process should end after sending it."""
    try:
        cpu_budget(float(job["cpu_s"]))
        result = resolve(str(job["fn"]))(*job["args"])
    except PASSED as exc:
        return _error(type(exc).__name__, str(exc)), False
    except MemoryError:
        return _error("memory", ""), True
    except Exception as exc:  # noqa: BLE001 - a library's surprise on a hostile file
        return _error("crash", f"{type(exc).__name__}: {str(exc)[:300]}"), False
    return {"ok": result}, rss_mb() > RECYCLE_MB


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"kind": kind, "message": message}}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def serve(jobs: IO[bytes], replies: IO[bytes]) -> None:
    while (job := read_frame(jobs)) is not None:
        reply, retire = answer(job)
        try:
            data = encode({**reply, "bye": retire})
        except (TypeError, MemoryError) as exc:
            data = encode({**_error("crash", f"the answer cannot be sent: {exc}"), "bye": True})
        replies.write(data)
        replies.flush()
        if retire:
            return


def main() -> None:
    confine(int(sys.argv[1]), int(sys.argv[2]))
    replies = os.fdopen(os.dup(1), "wb")  # the frames go here; a library's print() to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stderr)
    logging.captureWarnings(True)
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
