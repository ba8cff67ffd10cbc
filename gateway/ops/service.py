"""`gateway install-service`: render the systemd unit (system or user) with this install's paths and
write it.

The units in `systemd/` are this module's output for example paths (a test keeps them identical), so
the hardening lives in one place. Nothing here talks to systemd except through
`systemctl`/`loginctl`, and only when asked (`--enable`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

Mode = Literal["system", "user"]
# What the shell's bubblewrap needs from the unit (tools.shell): None without a shell; with
# `no-network` it also brings up the loopback of the sandbox's own network namespace (netlink).
ShellNeeds = Literal["network", "no-network"] | None
UNIT_NAME = "agent-gateway.service"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
SYSTEM_HOME = PurePosixPath("/var/lib/agent-gateway")
SYSTEM_ENV_FILE = PurePosixPath("/etc/agent-gateway/env")
WATCHDOG_SEC = 30
# the usual default soft limit (1024) let a connection flood run accept() out of files
LIMIT_NOFILE = 65536
STOP_MARGIN_S = 25  # after the drain: flushes' leftovers, adapters' stop, closing the store

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]

ENV_TEMPLATE = """\
# Environment for agent-gateway (read by systemd's EnvironmentFile=; keep this file mode 0600).
# Reference these from config.yaml as ${NAME}, e.g. telegram.token: ${TELEGRAM_BOT_TOKEN}
# ANTHROPIC_API_KEY=
# TELEGRAM_BOT_TOKEN=
# DISCORD_BOT_TOKEN=
# SLACK_BOT_TOKEN=
# SLACK_APP_TOKEN=
"""

# Sandboxing for the system unit. Everything here still lets the daemon reach the network
# (AF_INET/AF_INET6), the notify socket (AF_UNIX) and its state directory; `systemd-analyze
# security` rates it about 1.0.
SYSTEM_HARDENING = """\
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome={protect_home}
PrivateTmp=yes
PrivateDevices=yes
PrivateUsers=yes
PrivateIPC=yes
PrivateMounts=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
SystemCallErrorNumber=EPERM
CapabilityBoundingSet=
AmbientCapabilities=
DevicePolicy=closed
KeyringMode=private
RemoveIPC=yes
"""

# A user manager cannot set up mount namespaces without user namespaces, which some distributions
# disable; only the seccomp-based protections (they need NoNewPrivileges) are used, so the unit
# starts everywhere.
USER_HARDENING = """\
NoNewPrivileges=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallErrorNumber=EPERM
"""


class ServiceError(Exception):
    """install-service cannot do what was asked (not root, a home systemd cannot manage, ...)."""


@dataclass(frozen=True, slots=True)
class UnitSpec:
    mode: Mode
    # the venv's `gateway` executable (absolute, or %h/... in a user unit)
    exec_path: str
    home: str  # GATEWAY_HOME as the unit sees it
    env_file: str  # EnvironmentFile= (optional: the leading '-' is added)
    drain_seconds: float = 20.0
    shell: ShellNeeds = None  # tools.shell is enabled: relax what bubblewrap needs

    @property
    def timeout_stop(self) -> int:
        """Comfortably above the drain deadline, so systemd
        never SIGKILLs a drain that is on schedule."""
        return max(45, int(self.drain_seconds) + STOP_MARGIN_S)

    @property
    def state_directory(self) -> str | None:
        """StateDirectory= for a system home under /var/lib
        (systemd creates and owns it for DynamicUser)."""
        home = PurePosixPath(self.home)
        if (
            self.mode == "system"
            and home.is_relative_to("/var/lib")
            and home != PurePosixPath("/var/lib")
        ):
            return str(home.relative_to("/var/lib"))
        return None


def render_unit(spec: UnitSpec) -> str:
    hardening = (
        SYSTEM_HARDENING.format(protect_home=_protect_home(spec))
        if spec.mode == "system"
        else USER_HARDENING
    )
    if spec.shell is not None:
        hardening = for_bubblewrap(hardening, network=spec.shell == "network")
    wanted_by = "multi-user.target" if spec.mode == "system" else "default.target"
    lines = [
        *_unit_section(),
        "",
        *_service_section(spec),
        "",
        "# Sandboxing: `systemd-analyze security agent-gateway.service` shows what each line buys",
        *hardening.splitlines(),
        "",
        "[Install]",
        f"WantedBy={wanted_by}",
        "",
    ]
    return "\n".join(lines)


# tools.shell: bubblewrap inside the unit needs /proc/sys/kernel/overflowuid (ProcSubset=pid hides
# /proc/sys), user, mount, PID, network, IPC, UTS and cgroup namespaces, mount(2), pivot_root(2) and
# capset(2), and (for a sandbox without network) a netlink socket to bring its loopback up. Each
# was shown necessary on a real systemd (tests/test_service_systemd.py); PrivateUsers=yes and
# NoNewPrivileges=yes stay. `systemd-analyze security` then rates the system unit about 2.1.
BWRAP_RELAXED = {
    "ProcSubset=pid": "ProcSubset=all",
    "RestrictNamespaces=yes": "RestrictNamespaces=user mnt pid net ipc uts cgroup",
}
BWRAP_SYSCALLS = "SystemCallFilter=@mount capset"
BWRAP_NOTE = "# tools.shell is enabled: bubblewrap needs what the lines below marked (shell) allow"


def for_bubblewrap(hardening: str, *, network: bool) -> str:
    """The hardening lines with exactly what the shell's bubblewrap needs, each marked."""
    out = [BWRAP_NOTE]
    for line in hardening.splitlines():
        if line in BWRAP_RELAXED:
            out += ["# (shell)", BWRAP_RELAXED[line]]
        elif line.startswith("RestrictAddressFamilies=") and not network:
            out += [
                "# (shell) netlink: the loopback of the sandbox's own network namespace",
                f"{line} AF_NETLINK",
            ]
        else:
            out.append(line)
        if line.startswith("SystemCallFilter="):
            last = line
    at = out.index(last) + 1
    out[at:at] = ["# (shell) mount(2), pivot_root(2), capset(2)", BWRAP_SYSCALLS]
    return "\n".join(out) + "\n"


def _unit_section() -> list[str]:
    return [
        "[Unit]",
        "Description=agent-gateway: one LLM agent on Telegram, Discord, Slack and a local web chat",
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=600",
        "StartLimitBurst=10",
    ]


def _service_section(spec: UnitSpec) -> list[str]:
    lines = [
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={spec.exec_path} --log-format json run",
        f"Environment=GATEWAY_HOME={spec.home}",
        "Environment=PYTHONUNBUFFERED=1",
        f"EnvironmentFile=-{spec.env_file}",
    ]
    if spec.mode == "system":
        state = spec.state_directory
        if state is None:
            raise ServiceError(
                f"a system unit keeps its home under /var/lib (StateDirectory=); got {spec.home}"
            )
        lines += [
            f"WorkingDirectory={spec.home}",
            f"StateDirectory={state}",
            "StateDirectoryMode=0700",
            "DynamicUser=yes",
        ]
    return [
        *lines,
        "UMask=0077",
        (
            "# each connection is an open file; the daemon "
            "keeps at most daemon.max_connections per listener"
        ),
        f"LimitNOFILE={LIMIT_NOFILE}",
        f"WatchdogSec={WATCHDOG_SEC}",
        "TimeoutStartSec=90",
        f"TimeoutStopSec={spec.timeout_stop}",
        (
            "# 0 = clean stop; 75 = restart me (temporary "
            "failure); 78 = bad config: do not restart-loop on it"
        ),
        "Restart=always",
        "RestartSec=5",
        "RestartForceExitStatus=75",
        "RestartPreventExitStatus=78",
        (
            "# SIGTERM to the daemon only (it drains), "
            "SIGKILL to whatever is left after TimeoutStopSec"
        ),
        "KillMode=mixed",
        "KillSignal=SIGTERM",
    ]


HOME_DIRS = ("/home/", "/root/", "/run/user/")
TMP_DIRS = ("/tmp/", "/var/tmp/")


def _protect_home(spec: UnitSpec) -> str:
    """A venv under /home or /root must stay readable,
    or ExecStart would vanish inside the sandbox."""
    under_home = spec.exec_path.startswith(HOME_DIRS)
    return "read-only" if under_home else "yes"


def exec_chain(exec_path: str) -> list[str]:
    """What starting ExecStart needs to read: the script, the interpreter on its #! line, and where
    that interpreter's symbolic links lead (a venv's python is usually a link into a pyenv or
    /usr)."""
    chain = [exec_path]
    try:
        with open(exec_path, "rb") as fh:
            first = fh.readline(256)
    except OSError:
        return chain
    if first.startswith(b"#!") and first[2:].split():
        interpreter = first[2:].split()[0].decode(errors="replace")
        chain += [interpreter, str(Path(interpreter).resolve())]
    return list(dict.fromkeys(chain))


def exec_warnings(spec: UnitSpec, chain: Sequence[str] | None = None) -> list[str]:
    """Why the system unit's sandboxed dynamic user may be unable to start ExecStart (nothing for a
    user unit)."""
    if spec.mode != "system":
        return []
    found: list[str] = []
    for path in chain if chain is not None else exec_chain(spec.exec_path):
        if path.startswith(TMP_DIRS):
            found.append(
                f"{path} is in the temporary directory, which PrivateTmp=yes replaces with an "
                "empty one: the service cannot start it. Install the gateway elsewhere (e.g. "
                "python3 -m venv /opt/agent-gateway)."
            )
        elif path.startswith(HOME_DIRS):
            found.append(
                f"{path} is in a home directory: ProtectHome= leaves it read-only, but the service "
                "runs as a dynamic user, who cannot enter a home closed to others (/root always "
                "is). Install the gateway outside /home and /root (e.g. python3 -m venv "
                "/opt/agent-gateway)."
            )
    return found


# -------------------------------------------------------------------------------------------- paths
def gateway_executable(argv0: str | None = None, python: str | None = None) -> str:
    """The `gateway` script of the running install: next
    to this Python first (the venv), else on PATH."""
    python = python or sys.executable
    beside = Path(python).parent / "gateway"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside.absolute())
    if argv0 and Path(argv0).name == "gateway" and Path(argv0).exists():
        return str(Path(argv0).resolve())
    found = shutil.which("gateway")
    if found:
        return str(Path(found).absolute())
    raise ServiceError(
        "cannot find the `gateway` executable; install the package (pip install -e .) first"
    )


def unit_dir_for(mode: Mode, env: Mapping[str, str]) -> Path:
    if mode == "system":
        return SYSTEM_UNIT_DIR
    config_home = env.get("XDG_CONFIG_HOME") or str(
        Path(env.get("HOME") or Path.home()) / ".config"
    )
    return Path(config_home) / "systemd" / "user"


def user_env_file(env: Mapping[str, str]) -> Path:
    config_home = env.get("XDG_CONFIG_HOME") or str(
        Path(env.get("HOME") or Path.home()) / ".config"
    )
    return Path(config_home) / "agent-gateway" / "env"


# ------------------------------------------------------------------------------------------ install
@dataclass(frozen=True, slots=True)
class Plan:
    unit_path: Path
    unit_text: str
    env_file: Path
    commands: tuple[tuple[str, ...], ...]  # run in order when enabling
    linger_user: str | None  # user units: who needs linger to run while logged out
    # False with --unit-dir: nothing is written outside what was named
    create_env_file: bool = True
    # said before anything is written (e.g. ExecStart the unit cannot reach)
    warnings: tuple[str, ...] = ()


def plan_install(
    spec: UnitSpec,
    *,
    unit_dir: Path,
    env_file: Path,
    user: str | None,
    create_env_file: bool = True,
) -> Plan:
    scope = ("systemctl",) if spec.mode == "system" else ("systemctl", "--user")
    commands = ((*scope, "daemon-reload"), (*scope, "enable", "--now", UNIT_NAME))
    return Plan(
        unit_path=unit_dir / UNIT_NAME,
        unit_text=render_unit(spec),
        env_file=env_file,
        commands=commands,
        linger_user=user if spec.mode == "user" else None,
        create_env_file=create_env_file,
        warnings=tuple(exec_warnings(spec)),
    )


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=60)


def install(
    plan: Plan,
    *,
    dry_run: bool,
    enable: bool,
    out: Callable[[str], None] = print,
    run: Runner = run_command,
    linger_dir: Path = Path("/var/lib/systemd/linger"),
) -> int:
    """Write the unit (and an empty env file), then daemon-reload + enable --now if asked. Prints
    each step."""
    for warning in plan.warnings:
        out(f"warning: {warning}")
    if dry_run:
        _say_dry_run(plan, enable, out, linger_dir)
        return 0
    if not _write_unit(plan, out):
        return 1
    if not enable:
        for argv in plan.commands:
            out(f"next: {' '.join(argv)}")
        _say_linger(plan, linger_dir, out, run=None)
        return 0
    for argv in plan.commands:
        if not _run(argv, out, run):
            return 1
    _say_linger(plan, linger_dir, out, run=run)
    return 0


def _say_dry_run(plan: Plan, enable: bool, out: Callable[[str], None], linger_dir: Path) -> None:
    out(f"# would write {plan.unit_path}:")
    out(plan.unit_text.rstrip("\n"))
    if plan.create_env_file and not plan.env_file.exists():
        out(f"# would create {plan.env_file} (mode 0600) for tokens")
    for argv in plan.commands if enable else ():
        out(f"# would run: {' '.join(argv)}")
    if plan.linger_user and not (linger_dir / plan.linger_user).exists():
        out(
            f"# would run: loginctl enable-linger {plan.linger_user}"
            if enable
            else "# linger is off: run `loginctl enable-linger "
            f"{plan.linger_user}` so it runs while you are logged out"
        )


def _write_unit(plan: Plan, out: Callable[[str], None]) -> bool:
    """The unit file, and the env file beside it (or a word on why not); False if not allowed."""
    try:
        plan.unit_path.parent.mkdir(parents=True, exist_ok=True)
        plan.unit_path.write_text(plan.unit_text, encoding="utf-8")
        plan.unit_path.chmod(0o644)
    except PermissionError:
        out(
            f"cannot write {plan.unit_path}: permission denied (a system unit needs root: sudo "
            "gateway install-service --system)"
        )
        return False
    out(f"wrote {plan.unit_path}")
    if plan.create_env_file:
        _ensure_env_file(plan.env_file, out)
    elif not plan.env_file.exists():
        out(
            f"not created: {plan.env_file} (--unit-dir writes only the unit); the unit reads "
            "tokens from it if you create it (mode 0600)"
        )
    return True


def _ensure_env_file(path: Path, out: Callable[[str], None]) -> None:
    if path.exists():
        out(f"kept {path} (tokens go there)")
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(ENV_TEMPLATE)
        out(f"created {path} (mode 0600): put your tokens there")
    except OSError as exc:
        out(f"could not create {path} ({exc.strerror}); create it (mode 0600) for your tokens")


def _run(argv: Sequence[str], out: Callable[[str], None], run: Runner) -> bool:
    try:
        done = run(argv)
    except (OSError, subprocess.SubprocessError) as exc:
        out(f"failed: {' '.join(argv)}: {exc}")
        return False
    if done.returncode != 0:
        detail = (done.stderr or done.stdout or "").strip().splitlines()
        out(
            f"failed: {' '.join(argv)} (exit "
            f"{done.returncode}){': ' + detail[-1] if detail else ''}"
        )
        return False
    out(f"ran: {' '.join(argv)}")
    return True


def _say_linger(
    plan: Plan, linger_dir: Path, out: Callable[[str], None], *, run: Runner | None
) -> None:
    """A user manager stops with the user's last session
    unless linger is on; a failure here is only advice."""
    user = plan.linger_user
    if user is None:
        return
    if (linger_dir / user).exists():
        out(f"linger is on for {user}: the service runs while you are logged out")
        return
    argv = ("loginctl", "enable-linger", user)
    if run is None:
        out(f"next: {' '.join(argv)}  (so the service runs while you are logged out)")
    elif not _run(argv, out, run):
        out(f"enable linger yourself: sudo {' '.join(argv)}")
