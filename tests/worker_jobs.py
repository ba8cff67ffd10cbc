"""Jobs the worker tests send to the real worker process: module-level functions, which the child
finds by name."""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import MediaError


@dataclass(frozen=True, slots=True)
class Sized:
    name: str
    data: bytes
    count: int | None = None


def echo(*args: object) -> list[object]:
    return list(args)


def sized(name: str, data: bytes) -> Sized:
    return Sized(name, data, len(data))


def wrong_shape() -> dict[str, object]:
    return {"name": 7, "data": b"", "count": None}


def refuse(why: str) -> None:
    raise MediaError(why)


def fail() -> None:
    raise KeyError("a library's surprise")


def spin() -> None:
    while True:
        pass


def nap(seconds: float) -> None:
    time.sleep(seconds)


def hog(mb: int) -> int:
    held = bytearray(mb * 1024 * 1024)
    return len(held)


def crash() -> None:
    ctypes.string_at(0)  # SIGSEGV


def pid() -> int:
    return os.getpid()


def env() -> dict[str, str]:
    return dict(os.environ)


def touch_and_spin(path: str) -> None:
    Path(path).write_text(str(os.getpid()))
    spin()


def forge() -> None:
    """Write a frame prefix announcing 4 GB on every pipe but fds 0-2 (one is the reply pipe)."""
    import stat
    import struct

    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, struct.pack(">IQ", 0xFFFFFFFF, 0))
    time.sleep(60)
