"""`Sandbox`: run one `/bin/sh -c` command as the spec says, in bubblewrap (or, with the owner's
explicit `sandbox: none`, directly, still without the daemon's environment), and `probe` whether
that works here at all (`gateway doctor`).

Everything bubblewrap is given travels through file descriptors: its arguments (--args, so the
environment the owner passes is not on any process's command line), the sandbox's /etc files and
the folders it binds (opened by the daemon).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from gateway.config.shell import ShellConfig
from gateway.sandbox.bwrap import PATH, Fds, bwrap_args, limited
from gateway.sandbox.process import Finished, Launch, SandboxFailed, run
from gateway.sandbox.spec import DROP_TO, SandboxSpec

SHELL = "/bin/sh"
Found = tuple[str, str, str | None]  # `gateway doctor`'s (verdict, detail, fix)
NO_NAMESPACES = (
    "under systemd, run `gateway install-service` again (it writes what bubblewrap"
    " needs when tools.shell is enabled); elsewhere allow unprivileged user namespaces"
    " (sysctl kernel.unprivileged_userns_clone=1, or AppArmor's"
    " kernel.apparmor_restrict_unprivileged_userns=0)"
)


class Sandbox:
    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec

    async def run(self, command: str, *, timeout_s: float | None = None) -> Finished:
        """The command's exit code, output (bounded) and duration; SandboxFailed when the sandbox
        could not start it."""
        spec = self.spec
        try:
            spec.prepare()
        except OSError as exc:
            raise SandboxFailed(
                f"the workspace {spec.workspace} cannot be made ({exc.strerror})"
            ) from None
        timeout = timeout_s if timeout_s is not None else spec.limits.timeout_s
        argv = limited([SHELL, "-c", command], spec)
        with _descriptors() as held:
            launch = self._launch(argv, held) if spec.isolated else self._bare(argv)
            return await run(launch, timeout_s=timeout, keep=spec.limits.output_chars)

    async def probe(self) -> str | None:
        """None when `true` runs in the sandbox and exits 0; else what went wrong."""
        try:
            done = await self.run("true", timeout_s=30)
        except SandboxFailed as exc:
            return str(exc)
        if done.exit_code != 0:
            said = (done.stderr.head + done.stderr.tail).strip().splitlines()
            why = done.stopped or (said[-1] if said else f"exit code {done.exit_code}")
            return f"`true` did not succeed in the sandbox ({why})"
        return None

    def _launch(self, argv: list[str], held: list[int]) -> Launch:
        spec = self.spec
        fds = Fds(data=lambda data: _memfd(data, held), path=lambda path: _opened(path, held))
        options = bwrap_args(spec, fds)
        args_fd = _memfd(b"".join(a.encode() + b"\0" for a in options), held)
        info_read, info_write = os.pipe()
        held.append(info_write)
        command = [
            str(spec.bwrap),
            "--info-fd",
            str(info_write),
            "--args",
            str(args_fd),
            "--",
            *argv,
        ]
        launch = Launch(command, fds=tuple(held), info_fd=info_read, run_as=spec.run_as)
        held.clear()  # Launch closes them once the child has them
        return launch

    def _bare(self, argv: list[str]) -> Launch:
        """`sandbox: none`: the same limits and a clean environment, nothing else."""
        spec = self.spec
        env = {
            "PATH": PATH,
            "HOME": str(spec.workspace),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            **spec.env,
        }
        return Launch(argv, run_as=spec.run_as, env=env, cwd=str(spec.workspace))


@contextlib.contextmanager
def _descriptors() -> Iterator[list[int]]:
    """Descriptors opened for one launch; those not handed over are closed on the way out."""
    held: list[int] = []
    try:
        yield held
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)


def _memfd(data: bytes, held: list[int]) -> int:
    fd = os.memfd_create("agent-gateway-sandbox", os.MFD_CLOEXEC)  # pass_fds hands it over
    held.append(fd)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _opened(path: Path, held: list[int]) -> int:
    """`path` opened as the daemon (a root daemon's sandbox user may not reach it), never through
    a symbolic link at its end."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
    except OSError as exc:
        raise SandboxFailed(f"{path} cannot be shown in the sandbox ({exc.strerror})") from None
    held.append(fd)
    return fd


async def doctor_check(shell: ShellConfig, home: Path) -> list[Found]:
    """`gateway doctor`'s shell lines: bubblewrap installed and running `true` in the sandbox as
    configured (the workspace is made if missing); nothing without tools.shell.enabled."""
    if not shell.enabled:
        return []
    if shell.sandbox == "none":
        return [
            (
                "warn",
                "tools.shell runs commands WITHOUT a sandbox, with the daemon's rights",
                "set tools.shell.sandbox: bubblewrap",
            )
        ]
    if not shell.bwrap.exists():
        return [
            (
                "fail",
                f"{shell.bwrap} is missing: the shell cannot run commands",
                "apt-get install bubblewrap",
            )
        ]
    spec = SandboxSpec.of(shell, home)
    problem = await Sandbox(spec).probe()
    if problem is not None:
        return [("fail", f"bubblewrap cannot run a command here: {problem}", NO_NAMESPACES)]
    net = "with network" if spec.network else "no network"
    found: list[Found] = [
        ("ok", f"bubblewrap ran `true` ({net}; workspace {spec.workspace})", None)
    ]
    if spec.euid == 0 and spec.run_as != DROP_TO:
        why = (
            "the daemon runs as root and nobody cannot reach the workspace, so commands run as"
            " root outside the sandbox (with no capability)"
        )
        fix = "set tools.shell.workdir to a folder outside /root (e.g. /srv/agent-work)"
        found.append(("warn", why, fix))
    return found
