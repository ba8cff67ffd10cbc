"""The bubblewrap command line for one command: what the sandbox shows and what it refuses.

Built on an empty root (a tmpfs, read-only once built), never on a bind of `/`: /usr and the
merged-/usr links, a short list of /etc files (no shadow, no SSL private keys, no package
managers' tokens), a fresh /proc for its own PID namespace, a minimal /dev, a private /tmp, the
owner's extra mounts, the gateway's home masked when a mount would show it, and the workspace, the
one place a command may write. Its own user, PID, IPC, UTS, cgroup and (unless `network`) network
namespaces (no hostname of its own: the unit's ProtectHostname= refuses sethostname); no
capabilities; no nested user namespaces where /proc/sys is writable; a new session (no terminal to
inject into); killed when the daemon goes. The caller opens the file descriptors (`Fds`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.sandbox.spec import Bind, SandboxSpec

UID = GID = 1000  # who commands are inside (a name in the sandbox's own /etc/passwd)
HOSTNAME = "sandbox"  # in its /etc files only: systemd's ProtectHostname= forbids sethostname(2)
PATH = "/usr/local/bin:/usr/bin:/bin"
HOME = "/tmp"  # private and emptied with the sandbox: tools' dotfiles never reach the workspace
PRLIMIT = "/usr/bin/prlimit"
TOP_LINKS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")  # links into /usr, or dirs
# /etc, by name: what programs read to start, resolve names, find certificates and time zones.
ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "timezone",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "mime.types",
    "magic",
    "magic.mime",
    "protocols",
    "services",
    "gai.conf",
    "host.conf",
    "locale.alias",
    "os-release",
    "debian_version",
    "profile",
    "bash.bashrc",
    "inputrc",
    "xdg",
)
NETWORK_ETC = ("resolv.conf",)  # read through the link (systemd-resolved keeps it under /run)


@dataclass(frozen=True, slots=True)
class Fds:
    """How the builder gets descriptors for what it cannot name by path: `data` a pipe holding
    bytes (the sandbox's passwd), `path` a directory opened by the daemon (so a root daemon can
    show a folder its dropped user could not even reach)."""

    data: Callable[[bytes], int]
    path: Callable[[Path], int]


def bwrap_args(spec: SandboxSpec, fds: Fds, *, root: Path = Path("/")) -> list[str]:
    """bwrap's options for `spec`'s sandbox (given it through --args; the command follows them on
    its command line)."""
    args = _namespaces(spec)
    args += ["--tmpfs", "/", *_system(root), *_etc(spec, fds, root)]
    args += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(spec.limits.tmp_mb << 20),
        "--tmpfs",
        "/tmp",
        "--dir",
        "/var",
        "--symlink",
        "../tmp",
        "/var/tmp",
    ]
    for bind in spec.mounts:
        args += _bind(bind, fds)
    masks = _home_shown(spec)
    for target in masks:
        args += ["--perms", "0555", "--tmpfs", str(target)]
    args += _bind(Bind(spec.workspace, spec.workspace, writable=True), fds)
    for target in [*masks, Path("/")]:  # after the workspace's mount point was made
        args += ["--remount-ro", str(target)]
    return [*args, "--chdir", str(spec.workspace), *_env(spec.env)]


def _namespaces(spec: SandboxSpec) -> list[str]:
    args = [
        "--unshare-user",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--uid",
        str(UID),
        "--gid",
        str(GID),
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]
    if nested_userns_can_be_disabled():
        args.append("--disable-userns")
    return args if spec.network else [*args, "--unshare-net"]


def nested_userns_can_be_disabled() -> bool:
    """bwrap's --disable-userns writes /proc/sys/user/max_user_namespaces, which systemd's
    ProtectKernelTunables=yes makes read-only: there nested user namespaces stay possible (still
    without any capability outside them)."""
    try:
        return not os.statvfs("/proc/sys/user").f_flag & os.ST_RDONLY
    except OSError:
        return False


def _system(root: Path) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in TOP_LINKS:
        path = root / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", f"/{name}", f"/{name}"]
    return args


def _etc(spec: SandboxSpec, fds: Fds, root: Path) -> list[str]:
    args = ["--dir", "/etc"]
    for name in (*ETC, *(NETWORK_ETC if spec.network else ())):
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    made = {
        "passwd": f"root:x:0:0:root:/root:/bin/sh\nuser:x:{UID}:{GID}:sandbox:{HOME}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nuser:x:{GID}:\nnogroup:x:65534:\n",
        "hostname": f"{HOSTNAME}\n",
        "hosts": f"127.0.0.1\tlocalhost {HOSTNAME}\n::1\tlocalhost ip6-localhost\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    }
    for name, text in made.items():
        args += ["--ro-bind-data", str(fds.data(text.encode())), f"/etc/{name}"]
    return args


def _bind(bind: Bind, fds: Fds) -> list[str]:
    how = "--bind-fd" if bind.writable else "--ro-bind-fd"
    return [how, str(fds.path(bind.source)), str(bind.target)]


def _home_shown(spec: SandboxSpec) -> list[Path]:
    """Where a mount would show the gateway's home (a mount of /home/alice with the home in
    /home/alice/.agent-gateway): an empty, read-only folder goes over it, and the workspace is bound
    back after."""
    home = spec.home
    return [
        b.target / home.relative_to(b.source.resolve())
        for b in spec.mounts
        if home.is_relative_to(b.source.resolve())
    ]


def _env(env: Mapping[str, str]) -> list[str]:
    base = {
        "PATH": PATH,
        "HOME": HOME,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "USER": "user",
        "TMPDIR": "/tmp",
    }
    args = ["--clearenv"]
    for name, value in {**base, **env}.items():
        args += ["--setenv", name, value]
    return args


def limited(argv: list[str], spec: SandboxSpec) -> list[str]:
    """`argv` under the kernel's per-process limits (prlimit(1), util-linux): address space,
    processes of the sandbox's user, CPU seconds, file size, no core files."""
    limits = spec.limits
    return [
        PRLIMIT,
        f"--as={limits.memory_mb << 20}",
        f"--nproc={limits.processes}",
        f"--cpu={int(limits.timeout_s) + 1}",
        f"--fsize={limits.file_mb << 20}",
        "--core=0",
        "--nofile=1024",
        "--",
        *argv,
    ]
