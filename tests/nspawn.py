"""A Debian container booted with a real systemd (systemd-nspawn), for test_service_systemd.py.

The root file system comes from `mmdebstrap` and is cached outside the repository, keyed by its
recipe; so is a wheelhouse of the project's dependencies, built by this machine's pip with its own
settings, so that pip inside the container installs offline. A clean machine builds both (a few
minutes). The container boots the cached tree read-only under a tmpfs overlay (nspawn's
--volatile=overlay): what it writes vanishes with it, and the cache is never changed.

The container shares the host's network: fakes on the host's 127.0.0.1 are reachable from inside,
and the daemon's port from outside. Commands run inside through `nsenter` into the container's init
(the child of the nspawn process), with a clean environment.

nspawn picks the container's cgroup layout from the host's. On a hybrid host (v1 controllers, and
cgroup2 at /sys/fs/cgroup/unified, as here) forcing the legacy layout
(SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=0) boots as well, but systemd inside then never learns that a
cgroup emptied: a closed login session stays "closing", and stopping a user's manager hangs until
its timeout (the poweroff took 90 s instead of half a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# libpam-systemd: `runuser -l` opens a logind session, which starts the user's manager (for the
# user unit); bubblewrap: the shell tool's sandbox, tried under the unit's hardening.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "libpam-systemd",
    "python3",
    "python3-venv",
    "bubblewrap",
)
GUEST_PYTHON = (3, 11)  # bookworm's python3: the host's wheels must fit it
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
WHEELS_IN_GUEST = "/var/cache/agent-gateway-wheels"
BUILD_TIMEOUT_S = 1800


def mmdebstrap_argv(target: Path) -> list[str]:
    include = f"--include={','.join(PACKAGES)}"
    return ["mmdebstrap", "--variant=minbase", include, SUITE, str(target), MIRROR]


def cache_dir() -> Path:
    """$GATEWAY_TEST_CACHE, else $XDG_CACHE_HOME/agent-gateway-tests (~/.cache when unset)."""
    if explicit := os.environ.get("GATEWAY_TEST_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-gateway-tests"


def missing_tools() -> str | None:
    """Why this machine cannot boot the container, or None."""
    if os.geteuid() != 0:
        return "booting a container with systemd-nspawn needs root"
    tools = (
        ("systemd-nspawn", "systemd-container"),
        ("mmdebstrap", "mmdebstrap"),
        ("nsenter", "util-linux"),
        ("git", "git"),
    )
    for tool, package in tools:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {package})"
    if sys.version_info[:2] != GUEST_PYTHON:
        return f"the wheelhouse is built by this Python, which must be {SUITE}'s 3.11"
    return None


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder at a time per cache entry (two runs on one machine wait for each other)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build_once(dest: Path, build: Callable[[Path], None], say: Callable[[str], None]) -> Path:
    """`dest` if it exists, else `build(partial)` renamed into place (never a half-built tree)."""
    with _locked(dest.with_name(dest.name + ".lock")):
        if dest.is_dir():
            say(f"cached: {dest}")
            return dest
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        started = time.monotonic()
        build(partial)
        partial.rename(dest)
        say(f"built {dest} in {time.monotonic() - started:.0f} s")
        return dest


def _check(argv: Sequence[str], timeout: float, stdin: int | None = None) -> None:
    done = subprocess.run(
        list(argv), capture_output=True, text=True, check=False, timeout=timeout, stdin=stdin
    )
    if done.returncode != 0:
        output = f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{output}")


def cached_rootfs(say: Callable[[str], None] = print) -> Path:
    """The booted system's root file system, as mmdebstrap_argv builds it (cached by recipe)."""
    dest = cache_dir() / f"rootfs-{SUITE}-{_key(mmdebstrap_argv(Path('ROOT')))}"

    def build(partial: Path) -> None:
        # stdin closed: mmdebstrap reads sources.list lines from a stdin that is not a terminal
        _check(mmdebstrap_argv(partial), BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL)

    return _build_once(dest, build, say)


def cached_wheelhouse(project: Path, say: Callable[[str], None] = print) -> Path:
    """Wheels of the project's dependencies and build requirements, made by this machine's pip
    and its settings (index, certificate, proxy), keyed by what pyproject.toml asks for."""
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    wanted = [*meta["build-system"]["requires"], *meta["project"]["dependencies"]]
    dest = cache_dir() / f"wheels-py{GUEST_PYTHON[0]}{GUEST_PYTHON[1]}-{_key(wanted)}"

    def build(partial: Path) -> None:
        pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(partial)]
        _check([*pip, *wanted], BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL)

    return _build_once(dest, build, say)


def copy_project(repo: Path, dest: Path) -> None:
    """The project as a clone has it: the tracked files only (no venv, no build leftovers)."""
    ls = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True)
    for name in filter(None, ls.stdout.decode().split("\0")):
        if (repo / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, dest / name)


class Container:
    """One booted container over the tree `root`: `run` a command inside, reach its files through
    `host_path`."""

    def __init__(
        self, root: Path, *, name: str, log: Path, binds: Sequence[tuple[Path, str]] = ()
    ) -> None:
        self.root = root
        self.name = name
        self.log = log
        self.binds = binds
        self.proc: subprocess.Popen[bytes] | None = None
        self.init_pid = 0

    def boot(self, timeout: float = 300.0) -> str:
        """Start systemd in the container, wait until it has booted; `is-system-running` then."""
        binds = [f"--bind-ro={host}:{guest}" for host, guest in self.binds]
        argv = [
            "systemd-nspawn",
            "-D",
            str(self.root),
            f"--machine={self.name}",
            "--register=no",
            "--keep-unit",
            "--volatile=overlay",
            "--console=read-only",
            "-b",
            *binds,
        ]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        self.init_pid = self._wait_for_init(deadline)
        # no answer, or "offline", until the manager listens; then --wait waits for the boot
        while True:
            state = self.run(
                "systemctl", "is-system-running", "--wait", check=False, timeout=timeout
            )
            booted = state.stdout.strip()
            # "running", or "degraded" (a unit failed): both have finished booting
            if booted in ("running", "degraded"):
                return booted
            if booted not in ("", "offline") or time.monotonic() > deadline:
                why = f"{state.stdout}{state.stderr}\n{self.boot_log()}"
                raise RuntimeError(f"the container did not boot: {why}")
            time.sleep(0.1)

    def _wait_for_init(self, deadline: float) -> int:
        """nspawn's child sets the container up, then becomes its systemd."""
        assert self.proc is not None
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"systemd-nspawn started no container:\n{self.boot_log()}")
            child = _child_of(self.proc.pid)
            if child and _command(child) == "systemd":
                return child
            time.sleep(0.05)

    def boot_log(self) -> str:
        return self.log.read_text(errors="replace")[-5000:] if self.log.exists() else ""

    def run(
        self,
        *argv: str,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float = 300.0,
    ) -> subprocess.CompletedProcess[str]:
        """`argv` as root inside the container, in a clean environment plus `env`."""
        assert self.init_pid, "boot() first"
        clean = {"PATH": GUEST_PATH, "HOME": "/root", "LANG": "C.UTF-8", **(env or {})}
        assignments = [f"{k}={v}" for k, v in clean.items()]
        command = [
            "nsenter",
            f"--target={self.init_pid}",
            "--all",
            "env",
            "-i",
            *assignments,
            *argv,
        ]
        done = subprocess.run(
            command, input=input, capture_output=True, text=True, check=False, timeout=timeout
        )
        if check and done.returncode != 0:
            output = f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
            raise AssertionError(
                f"in the container, {' '.join(argv)} exited {done.returncode}:\n{output}"
            )
        return done

    async def arun(
        self,
        *argv: str,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float = 300.0,
    ) -> subprocess.CompletedProcess[str]:
        """`run` off the event loop, so that the fakes on it keep answering meanwhile."""
        return await asyncio.to_thread(
            self.run, *argv, input=input, env=env, check=check, timeout=timeout
        )

    def host_path(self, guest: str) -> Path:
        """A path inside the container, seen from the host (through its init's root)."""
        assert self.init_pid, "boot() first"
        return Path(f"/proc/{self.init_pid}/root") / guest.lstrip("/")

    def shutdown(self, timeout: float = 90.0) -> None:
        """Power off (nspawn turns SIGTERM into SIGRTMIN+3 for the init); kill all if it hangs."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                # the init of a PID namespace takes every process in it along
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.init_pid, signal.SIGKILL)
                self.proc.kill()
                self.proc.wait(30)
        self.proc = None


def _child_of(pid: int) -> int:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0
    return int(children[0]) if children else 0


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def parse_show(text: str) -> dict[str, str]:
    """`systemctl show` output (KEY=value lines) as a dict."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
