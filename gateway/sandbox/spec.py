"""What one install's sandbox is, resolved once from `tools.shell` and the gateway's home: the
workspace, the binds, the environment, the limits, and which user runs it.

A daemon running as root never runs commands as root: they run as `nobody` (DROP_TO), which then
owns the workspace; otherwise they run as the daemon's own user, inside a user namespace.
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
    run_as: tuple[int, int] | None = None  # (uid, gid) to switch to before starting bwrap

    @classmethod
    def of(cls, shell: ShellConfig, home: Path, *, euid: int | None = None) -> SandboxSpec:
        limits = Limits(timeout_s=shell.timeout_s, memory_mb=shell.max_memory_mb,
                        processes=shell.max_processes, file_mb=shell.max_file_mb,
                        tmp_mb=shell.tmp_mb, output_chars=shell.max_output_chars)
        mounts = tuple(Bind(m.path, m.target, m.mode == "rw") for m in shell.mounts)
        root = (os.geteuid() if euid is None else euid) == 0
        return cls(workspace=shell.workspace(home).resolve(), home=Path(home).resolve(), limits=limits,
                   isolated=shell.sandbox == "bubblewrap", network=shell.network,
                   env={k: v.value for k, v in shell.env.items()}, mounts=mounts,
                   bwrap=shell.bwrap, run_as=DROP_TO if root else None)

    def prepare(self) -> None:
        """Create the workspace (private to its user); a root daemon hands it to DROP_TO."""
        self.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.run_as is not None and self.workspace.stat().st_uid != self.run_as[0]:
            os.chown(self.workspace, *self.run_as)
