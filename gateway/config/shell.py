"""The `tools.shell:` section: the agent's shell, off by default, for admins only, sandboxed with
bubblewrap (gateway/sandbox/, docs/tools.md "The shell"). Its own module so tools.py stays short.

What needs the gateway's home (the workspace inside it, mounts that would show it) is checked once
the home is known: `home_problems`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from gateway.config.yamlload import KeyProblem, Secret

WORKSPACE = "workspace"  # <GATEWAY_HOME>/workspace unless tools.shell.workdir says otherwise
# Where an extra mount may not go: what the sandbox itself builds there.
RESERVED = ("/", "/proc", "/dev", "/tmp", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64")
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


@dataclass(frozen=True, slots=True)
class MountConfig:
    """One extra bind: a host `path` shown at `to` (the same path by default), read-only unless
    `mode: rw`."""

    path: Path
    to: Path | None = None
    mode: Literal["ro", "rw"] = "ro"

    def __post_init__(self) -> None:
        if not self.path.is_absolute():
            raise KeyProblem("path", f"give an absolute path; got {str(self.path)!r}")
        if self.to is not None and not self.to.is_absolute():
            raise KeyProblem("to", f"give an absolute path; got {str(self.to)!r}")
        if str(PurePosixPath(self.target)) in RESERVED:
            built = ", ".join(RESERVED)
            raise KeyProblem("to", f"{self.target} is the sandbox's own (it builds {built})")

    @property
    def target(self) -> Path:
        return self.to or self.path


@dataclass(frozen=True, slots=True)
class ShellConfig:
    """The `shell` tool. `sandbox: none` runs commands with the daemon's own rights and needs
    `unsafe_no_sandbox: true` as well; `approve: always` asks a person before every command."""

    enabled: bool = False
    sandbox: Literal["bubblewrap", "none"] = "bubblewrap"
    unsafe_no_sandbox: bool = False
    approve: Literal["always", "never"] = "always"
    workdir: Path | None = None
    network: bool = False
    env: dict[str, Secret] = field(default_factory=dict)
    mounts: tuple[MountConfig, ...] = ()
    timeout_s: float = field(default=60.0, metadata={"min": 1, "max": 86_400})
    max_output_chars: int = field(default=16_000, metadata={"min": 200, "max": 200_000})
    max_memory_mb: int = field(default=1024, metadata={"min": 32, "max": 65_536})
    max_processes: int = field(default=256, metadata={"min": 4, "max": 65_536})
    max_file_mb: int = field(default=1024, metadata={"min": 1, "max": 65_536})
    tmp_mb: int = field(default=256, metadata={"min": 1, "max": 65_536})
    # a file `attach` sends to the chat, at most (Telegram's bots upload up to 50 MB)
    max_attach_mb: int = field(default=20, metadata={"min": 1, "max": 50})
    bwrap: Path = Path("/usr/bin/bwrap")

    def __post_init__(self) -> None:
        if self.sandbox == "none" and not self.unsafe_no_sandbox:
            raise KeyProblem(
                "sandbox",
                "`sandbox: none` runs the agent's commands with all of the "
                "daemon's rights (its keys, tokens and state.db); to do that anyway, "
                "add `unsafe_no_sandbox: true` next to it",
            )
        bad = [name for name in self.env if not re.fullmatch(ENV_NAME, name)]
        if bad:
            raise KeyProblem("env", f"not a variable name: {', '.join(map(repr, bad))}")

    def workspace(self, home: Path, agent: str = "main") -> Path:
        """The commands' working directory, the one place they may write: each agent but `main`
        has its own beside it (`workspace-<agent>`), so one agent never sees another's files."""
        chosen = self.workdir if self.workdir is not None else Path(WORKSPACE)
        folder = Path(home, chosen).absolute()
        return folder if agent == "main" else folder.with_name(f"{folder.name}-{agent}")


def home_problems(shell: ShellConfig, home: Path) -> list[tuple[str, str]]:
    """(key, message) for what would show the gateway's home to the commands or write into a
    system directory: a workspace that is the home or holds it, a mount of the home or inside it."""
    home = home.absolute().resolve()
    work = shell.workspace(home).resolve()
    found: list[tuple[str, str]] = []
    if home.is_relative_to(work):
        why = (
            f"{work} holds the gateway's home ({home}), which the sandbox never shows: choose"
            " a folder of its own (default: the home's workspace/)"
        )
        found.append(("tools.shell.workdir", why))
    elif str(work) in RESERVED:
        found.append(("tools.shell.workdir", f"{work} is a system directory"))
    for i, mount in enumerate(shell.mounts):
        source = mount.path.resolve()
        if source.is_relative_to(home):
            found.append(
                (
                    f"tools.shell.mounts[{i}]",
                    f"{source} is inside the gateway's home, which the sandbox never shows",
                )
            )
    return found
