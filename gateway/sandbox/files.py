"""Files a command wrote, taken out of the workspace for the chat (the shell's `attach`).

A path is relative to the workspace and resolved there, symbolic links followed; whatever it ends
at must still lie inside the workspace (a link to the home or to /etc/passwd is refused wherever
it points), be a regular file and fit the size limit. The file is opened once, never through a
link at its end, checked again as opened (nothing swapped in between), and copied from that
descriptor in bounded chunks. Blocking: run it in a thread.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path

CHUNK = 1 << 16
MAX_NAME_CHARS = 120


class Refused(Exception):
    """Why a path cannot be sent, in words the model (and the person) may read."""


def take(workspace: Path, relative: str, dest: Path, max_bytes: int) -> int:
    """Copy the workspace's `relative` to the new file `dest` (0600); its size. Refused when it
    is not a regular file inside the workspace within `max_bytes`."""
    if not relative.strip() or "\0" in relative:
        raise Refused("an empty path")
    if os.path.isabs(relative):
        raise Refused("give a path relative to the workspace (the command's current directory)")
    root = os.path.realpath(workspace)
    real = os.path.realpath(os.path.join(root, relative))
    if not _inside(root, real):
        raise Refused("it is not inside the workspace (a symbolic link or `..` leads out of it)")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise Refused("no such file" if exc.errno == 2 else exc.strerror or "unreadable") from None
    try:
        if not _inside(root, os.readlink(f"/proc/self/fd/{fd}")):
            raise Refused("it changed while it was read")
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        if info.st_size > max_bytes:
            raise Refused(f"{size_text(info.st_size)}, over the limit of {size_text(max_bytes)}")
        return _copy(fd, dest, max_bytes)
    finally:
        os.close(fd)


def _inside(root: str, path: str) -> bool:
    return path != root and os.path.commonpath([root, path]) == root


def _copy(fd: int, dest: Path, max_bytes: int) -> int:
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    size = 0
    try:
        while chunk := os.read(fd, CHUNK):
            size += len(chunk)
            if size > max_bytes:  # it grew since fstat
                raise Refused(f"over the limit of {size_text(max_bytes)}")
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
    except BaseException:
        os.close(out)
        dest.unlink(missing_ok=True)
        raise
    os.close(out)
    return size


def shown_name(relative: str) -> str:
    """The name the chat shows for a path: its last part, without control characters, shortened."""
    name = "".join(c for c in Path(relative).name if unicodedata.category(c)[0] != "C").strip()
    if len(name) > MAX_NAME_CHARS:
        _, dot, ext = name.rpartition(".")
        keep = ext if dot and len(ext) <= 10 else ""
        name = name[: MAX_NAME_CHARS - len(keep) - 2] + "…" + ("." + keep if keep else "")
    return name or "file"


def size_text(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 1024 / 1024:.1f} MB"
