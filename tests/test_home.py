"""The home at start-up, with `gateway run` as a real subprocess: one daemon per home (the second
exits at once naming the first), files private whatever the caller's umask, and an unusable home or
database as one line and exit 78 (so systemd's Restart=always does not loop on it)."""

from __future__ import annotations

import asyncio
import ctypes
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.ops.home import LOCK_FILE
from tests.daemon_proc import GATEWAY, DaemonProc, free_port
from tests.store_locks import LockHolder


def _home(parent: Path) -> Path:
    home = parent / "home"
    home.mkdir()
    (home / "config.yaml").write_text(f"web:\n  port: {free_port()}\n", encoding="utf-8")
    return home


async def _gateway(
    home: Path, *args: str, stdin: bytes = b"", preexec: Callable[[], None] | None = None
) -> tuple[int, str]:
    """Run one `gateway` command to its end: (exit code, stderr)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home.parent)}
    proc = await asyncio.create_subprocess_exec(
        GATEWAY,
        "--home",
        str(home),
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=preexec,
    )
    _, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    return proc.returncode or 0, err.decode()


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


async def test_a_second_daemon_on_the_same_home_exits_at_once_naming_the_first(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    first = DaemonProc(home)
    await first.start()
    try:
        await first.wait_ready()
        assert first.proc is not None
        code, err = await _gateway(home, "run")
        assert code == 75, err
        assert _error_lines(err) == [
            (
                f"error: another gateway (pid {first.proc.pid}) is already running on {home}; stop "
                "it first (e.g. systemctl --user stop agent-gateway), or give this one its own "
                "--home"
            )
        ]
        assert (home / LOCK_FILE).read_text() == f"{first.proc.pid}\n"
        code, err = await _gateway(home, "chat", stdin=b"hello\n")
        assert code == 75 and "the daemon (pid" in err and "web chat" in err, err
        assert first.proc.returncode is None  # the first one is untouched
        assert await first.stop() == 0, first.output()
    finally:
        await first.kill()


async def test_the_lock_goes_with_the_process_even_after_kill_9(tmp_path: Path) -> None:
    home = _home(tmp_path)
    first = DaemonProc(home)
    await first.start()
    await first.wait_ready()
    await first.kill()  # SIGKILL: no cleanup ran
    second = DaemonProc(home)
    await second.start()
    try:
        await second.wait_ready()
        assert await second.stop() == 0, second.output()
    finally:
        await second.kill()


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The umask a manual run from a login shell typically has: files readable by everyone."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


async def test_everything_the_daemon_creates_is_the_owners_alone(
    tmp_path: Path, loose_umask: None
) -> None:
    home = _home(tmp_path)
    daemon = DaemonProc(home)
    await daemon.start()
    try:
        await daemon.wait_ready()
        created = ["state.db", "state.db-wal", "state.db-shm", LOCK_FILE, "pairing.key", "web.key"]
        modes = {name: stat.S_IMODE((home / name).stat().st_mode) for name in created}
        assert modes == dict.fromkeys(created, 0o600)
        assert await daemon.stop() == 0, daemon.output()
    finally:
        await daemon.kill()


async def test_a_new_home_is_created_private(tmp_path: Path, loose_umask: None) -> None:
    home = tmp_path / "new-home"
    code, err = await _gateway(home, "chat", stdin=b"")
    assert code == 0, err
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600


def test_the_callers_umask_is_restored_after_a_command(tmp_path: Path, loose_umask: None) -> None:
    assert main(["--home", str(tmp_path), "config", "check"]) == 0
    assert os.umask(0o022) == 0o022


async def test_a_damaged_database_is_one_line_and_exit_78(tmp_path: Path) -> None:
    home = _home(tmp_path)
    (home / "state.db").write_bytes(b"this is not an SQLite database, just text\n" * 200)
    code, err = await _gateway(home, "--log-format", "json", "run")
    assert code == 78, err
    assert _error_lines(err) == [
        (
            f"error: {home / 'state.db'} is damaged (file is not a database); stop here and "
            "restore the latest backup or salvage it with `sqlite3 state.db .recover` "
            "(docs/operations.md: backups); `gateway doctor` says what to fix"
        )
    ]
    assert "Traceback" not in err
    code, err = await _gateway(home, "chat", stdin=b"hi\n")
    assert code == 78 and "is damaged" in err, err


def _without_root_powers() -> None:
    """In the child before exec: drop the capabilities that let root write anywhere (DAC override,
    read-search, owner override) from the bounding set, so uid 0 meets the mode bits like anyone
    else."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


async def test_a_read_only_home_is_one_line_and_exit_78(tmp_path: Path) -> None:
    home = _home(tmp_path)
    home.chmod(0o555)
    try:
        code, err = await _gateway(
            home,
            "--log-format",
            "json",
            "run",
            preexec=_without_root_powers if os.geteuid() == 0 else None,
        )
    finally:
        home.chmod(0o700)
    assert code == 78, err
    assert _error_lines(err) == [
        (
            f"error: {home} is not writable (Permission denied): the daemon keeps its database "
            "there; `gateway doctor` says what to fix"
        )
    ]
    assert "Traceback" not in err


async def _made_home(tmp_path: Path) -> Path:
    """A home whose state.db exists (a first run made it), as on any restart."""
    home = _home(tmp_path)
    first = DaemonProc(home)
    await first.start()
    try:
        await first.wait_ready()
        assert await first.stop() == 0, first.output()
    finally:
        await first.kill()
    for sock in home.parent.glob("notify-*.sock"):  # a later DaemonProc may get the same name
        sock.unlink()
    return home


async def test_a_lock_another_process_holds_for_a_moment_at_start_is_waited_for(
    tmp_path: Path,
) -> None:
    """`gateway pairing approve` (or a sqlite3 shell) writing while the service restarts: a start,
    not exit 78 (which systemd never restarts)."""
    home = await _made_home(tmp_path)
    daemon = DaemonProc(home)
    db = home / "state.db"
    async with LockHolder(db) as lock:
        await daemon.start()
        assert daemon.proc is not None
        async with asyncio.timeout(60):
            # it reads the database (opening -shm), so its next write waits
            while (
                not daemon.has_open(db.with_name("state.db-shm")) and daemon.proc.returncode is None
            ):
                await asyncio.sleep(0.01)
        await lock.release()
    try:
        await daemon.wait_ready()
        assert await daemon.stop() == 0, daemon.output()
    finally:
        await daemon.kill()
    assert "Traceback" not in daemon.output()


async def test_a_lock_held_past_the_start_wait_exits_75_to_be_started_again(tmp_path: Path) -> None:
    home = await _made_home(tmp_path)
    async with LockHolder(home / "state.db"):
        code, err = await _gateway(home, "--log-format", "json", "run")
    assert code == 75, err  # temporary: the unit's RestartForceExitStatus, not 78
    assert _error_lines(err) == [
        (
            f"error: {home / 'state.db'} stayed locked by another process for 5 s (a sqlite3 "
            "shell, a long gateway command?); exiting 75 so the service manager tries again"
        )
    ]
    assert "Traceback" not in err
