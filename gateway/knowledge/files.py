"""Crash-safe file writes and a cross-process lock for the files tools edit (memories, skills).

A reader sees either the old file or the new one, never half of each; two writers take turns.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    """Write via a temp file in the same directory, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileLock:
    """Exclusive lock for one directory's read-modify-write:
    a thread lock, then flock on a lock file.

    The thread lock keeps this process's sessions from piling up on flock; flock (taken on a fresh
    open file each time) keeps a second process, such as the CLI, out.
    """

    def __init__(self, lock_path: Path) -> None:
        self._path = lock_path
        self._thread_lock = threading.Lock()

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self._thread_lock:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            # Never through a symbolic link: one planted in the
            # folder would have this create a file elsewhere.
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing the descriptor releases the flock
