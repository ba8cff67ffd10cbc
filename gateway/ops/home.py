"""The home at start-up: one process per home (an fcntl lock), and a home or database that cannot be
used told in one line.

`gateway run` and `gateway chat` hold the lock for their whole life; the second one exits at once,
naming the PID that holds it (two daemons would both poll Telegram and reset each other's running
flushes). The other commands (pairing, sessions, status) work beside a running daemon through SQLite
and take no lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import HomeLocked, HomeUnusable, StoreError

LOCK_FILE = "gateway.lock"
DOCTOR = "`gateway doctor` says what to fix"


@dataclass
class HomeLock:
    """The held lock; it goes with the process (the kernel drops it on exit, even after kill -9)."""

    path: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def hold_home(home: Path, *, command: str = "run") -> HomeLock:
    """Create the home if needed and take its lock, or raise: HomeLocked (someone has it),
    HomeUnusable (the home cannot be written). The lock file holds the holder's PID, for the one who
    is refused."""
    path = home / LOCK_FILE
    try:
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise HomeUnusable(unwritable(home, exc)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise HomeUnusable(unwritable(home, exc)) from None
        raise HomeLocked(refusal(home, _holder(path), command)) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return HomeLock(path, fd)


def held(home: Path) -> bool:
    """Is a daemon (or `gateway chat`) running on this home now? Asked without taking the lock for
    long: a shared lock is refused while the holder's exclusive one stands."""
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None  # the holder has not written its PID yet


def refusal(home: Path, pid: int | None, command: str) -> str:
    who = f"pid {pid}" if pid else "another process"
    if command == "chat":
        return (
            f"the daemon ({who}) is running on {home}; talk to it in the web chat (`gateway "
            "web-url` prints the link), or stop it first"
        )
    return (
        f"another gateway ({who}) is already running on {home}; stop it first (e.g. systemctl "
        "--user stop agent-gateway), or give this one its own --home"
    )


def unwritable(home: Path, exc: OSError) -> str:
    return (
        f"{home} is not writable ({exc.strerror or exc}): "
        f"the daemon keeps its database there; {DOCTOR}"
    )


def database_problem(db_path: Path, exc: BaseException) -> str:
    """One line for a state.db that cannot be opened:
    corrupt, not a database, read-only or unreadable."""
    cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ is not None else exc
    if isinstance(cause, sqlite3.DatabaseError):
        code = getattr(cause, "sqlite_errorcode", 0) & 0xFF
        if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return (
                f"{db_path} is damaged ({cause}); stop here and restore the latest backup or "
                f"salvage it with `sqlite3 {db_path.name} .recover` (docs/operations.md: backups); "
                f"{DOCTOR}"
            )
        if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
            return (
                f"{db_path} cannot be written ({cause}): check "
                f"the home's owner and permissions; {DOCTOR}"
            )
    if isinstance(cause, OSError):
        return unwritable(db_path.parent, cause)
    return f"{db_path} cannot be used ({cause}); {DOCTOR}"
