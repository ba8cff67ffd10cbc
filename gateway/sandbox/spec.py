"""What one install's sandbox is, resolved once from `tools.shell` and the gateway's home: the
workspace, the binds, the environment, the limits, and which user runs it.

Commands run as uid 1000 inside the sandbox's own user namespace, which maps it to one user
outside: the daemon's own user, or for a daemon running as root `nobody` (DROP_TO), which then owns
the workspace. bubblewrap run by `nobody` must reach every folder it shows by path, so a root
daemon whose workspace or mounts lie behind a folder only root may enter (the default
/root/.agent-gateway/workspace) maps its commands to root outside instead, still without any
capability; `run_as` says which, and `gateway doctor` says how to move the workspace.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config.shell import ShellConfig

DROP_TO = (65534, 65534)  # nobody:nogroup on Debian; the user a root daemon's commands run as


@dataclass(frozen=True, slots=True)
class Limits:
    timeout_s: float
    memory_mb: int
    processes: int
    file_mb: int
    tmp_mb: int
    output_chars: int


@dataclass(frozen=True, slots=True)
class Bind:
    source: Path
    target: Path
    writable: bool


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """`isolated` False is `sandbox: none` (the owner's explicit, unsafe choice)."""

    workspace: Path
    home: Path
    limits: Limits
    isolated: bool = True
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # values may be keys
    mounts: tuple[Bind, ...] = ()
    bwrap: Path = Path("/usr/bin/bwrap")
    euid: int = -1  # the daemon's effective uid (-1: read it when needed)

    @classmethod
    def of(
        cls, shell: ShellConfig, home: Path, *, euid: int | None = None, agent: str = "main"
    ) -> SandboxSpec:
        limits = Limits(
            timeout_s=shell.timeout_s,
            memory_mb=shell.max_memory_mb,
            processes=shell.max_processes,
            file_mb=shell.max_file_mb,
            tmp_mb=shell.tmp_mb,
            output_chars=shell.max_output_chars,
        )
        mounts = tuple(Bind(m.path, m.target, m.mode == "rw") for m in shell.mounts)
        return cls(
            workspace=shell.workspace(home, agent).resolve(),
            home=Path(home).resolve(),
            limits=limits,
            isolated=shell.sandbox == "bubblewrap",
            network=shell.network,
            env={k: v.value for k, v in shell.env.items()},
            mounts=mounts,
            bwrap=shell.bwrap,
            euid=os.geteuid() if euid is None else euid,
        )

    @property
    def run_as(self) -> tuple[int, int] | None:
        """(uid, gid) a root daemon switches to before starting bwrap: DROP_TO when it can reach
        the workspace and every mount; None runs bwrap as the daemon's own user."""
        euid = os.geteuid() if self.euid < 0 else self.euid
        if euid != 0:
            return None
        folders = [self.workspace, *(b.source for b in self.mounts)]
        return DROP_TO if all(reachable(f.parent, DROP_TO[0]) for f in folders) else None

    def prepare(self) -> None:
        """Create the workspace, private to the user the commands run as."""
        self.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
        root = (os.geteuid() if self.euid < 0 else self.euid) == 0
        owner = self.run_as or (0, 0)
        if root and self.workspace.stat().st_uid != owner[0]:
            os.chown(self.workspace, *owner)


def reachable(folder: Path, uid: int) -> bool:
    """Whether `uid` (not root, in no group of the folders') may enter `folder` and all above it."""
    for step in [folder, *folder.parents]:
        try:
            st = step.stat()
        except OSError:
            return False
        allowed = 0o100 if st.st_uid == uid else 0o001
        if not st.st_mode & allowed:
            return False
    return True
