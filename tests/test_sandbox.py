"""The shell's sandbox against the real bubblewrap (Debian's `bubblewrap`): each promise of
docs/tools.md "The shell" — the gateway's home invisible, the filesystem read-only but for the
workspace, /tmp private, no network, a clean environment, its own PID namespace, killed with the
daemon and at its deadline with nothing left, its output bounded."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config.shell import MountConfig, ShellConfig
from gateway.sandbox.process import Finished, SandboxFailed
from gateway.sandbox.report import describe, result_text
from gateway.sandbox.runner import Sandbox
from gateway.sandbox.spec import DROP_TO, SandboxSpec
from tests.helpers import require

BWRAP = shutil.which("bwrap")
pytestmark = pytest.mark.skipif(
    BWRAP is None and not os.environ.get("GATEWAY_CI"),
    reason="bubblewrap is not installed (apt install bubblewrap)",
)


def _bwrap_problem() -> str | None:
    if BWRAP is None:
        return "bubblewrap is not installed (apt install bubblewrap)"
    probe = subprocess.run(
        [BWRAP, "--unshare-user", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if probe.returncode == 0 else f"bwrap cannot make namespaces here: {probe.stderr}"


@pytest.fixture(scope="module", autouse=True)
def _bwrap_works() -> None:
    require(_bwrap_problem())


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.yaml").write_text("telegram:\n  token: 123:SECRET-IN-CONFIG\n")
    (home / "state.db").write_bytes(b"SQLite format 3\0SECRET-IN-DB")
    (home / "memories").mkdir()
    (home / "memories" / "MEMORY.md").write_text("SECRET-MEMORY\n")
    return home


def sandbox(home: Path, **options: Any) -> Sandbox:
    return Sandbox(SandboxSpec.of(ShellConfig(enabled=True, **options), home))


def run(box: Sandbox, command: str) -> Finished:
    return asyncio.run(box.run(command))


def said(done: Finished) -> str:
    return done.stdout.head + done.stdout.tail + done.stderr.head + done.stderr.tail


def test_a_command_runs_in_the_workspace(home: Path) -> None:
    done = run(sandbox(home), "echo hi-$((6*7)); pwd")
    assert done.exit_code == 0 and done.stopped is None
    assert done.stdout.head == f"hi-42\n{home.resolve() / 'workspace'}\n"
    assert result_text(done, 1000, 60).startswith("Exit code: 0\nDuration: ")


def test_the_home_is_invisible_also_around_the_workspace(home: Path) -> None:
    box = sandbox(home)
    done = run(
        box,
        f"ls -la {home} ..; cat {home}/config.yaml ../config.yaml ../state.db "
        f"../memories/MEMORY.md; find / -xdev 2>/dev/null | xargs grep -ls SECRET",
    )
    text = said(done)
    assert "SECRET" not in text
    assert "config.yaml" in text and "No such file or directory" in text  # cat's complaint
    listing = run(box, "ls -A ..").stdout.head.split()
    assert listing == ["workspace"]


def test_only_the_workspace_is_writable(home: Path, tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    done = run(
        sandbox(home),
        f"echo {marker} > inside.txt; echo {marker} > {home}/outside.txt;"
        f" echo {marker} > /usr/x; echo {marker} > {tmp_path}/x; echo done",
    )
    assert done.stdout.head == "done\n"
    assert (home / "workspace" / "inside.txt").read_text() == f"{marker}\n"
    assert not (home / "outside.txt").exists() and not (tmp_path / "x").exists()
    assert "Read-only file system" in said(done) or "No such file" in said(done)


def test_tmp_is_private_and_fresh_for_each_command(home: Path) -> None:
    host_file = Path("/tmp") / f"h31-{uuid.uuid4().hex}"
    host_file.write_text("host")
    try:
        box = sandbox(home)
        work = box.spec.workspace
        # empty but for the way to the workspace when that lies under /tmp (pytest's tmp_path)
        way = [work.relative_to("/tmp").parts[0]] if work.is_relative_to("/tmp") else []
        first = run(box, f"ls -A /tmp; cat {host_file}; echo mine > /tmp/left; echo $HOME $TMPDIR")
        assert first.stdout.head.split() == [*way, "/tmp", "/tmp"]
        assert "No such file" in said(first)
        assert not Path("/tmp/left").exists()
        assert run(box, "ls -A /tmp").stdout.head.split() == way
    finally:
        host_file.unlink()


@pytest.fixture
def listening() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


CONNECT = (
    'python3 -c \'import socket; socket.create_connection(("127.0.0.1", {port}), 5);'
    ' print("connected")\''
)


def test_no_network_unless_configured(home: Path, listening: int) -> None:
    require(None if Path("/usr/bin/python3").exists() else "needs /usr/bin/python3")
    closed = run(sandbox(home), CONNECT.format(port=listening))
    assert closed.exit_code != 0 and "connected" not in closed.stdout.head
    assert "Connection refused" in said(closed) or "unreachable" in said(closed)
    opened = run(sandbox(home, network=True), CONNECT.format(port=listening))
    assert opened.stdout.head == "connected\n", said(opened)


def test_the_environment_has_no_secret_but_what_env_names(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:SECRET-TOKEN")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-SECRET-KEY")
    from gateway.config.yamlload import Secret

    box = sandbox(home, env={"GREETING": Secret("hello")})
    done = run(box, "env; cat /proc/1/environ | tr '\\0' '\\n'")
    names = {line.split("=", 1)[0] for line in done.stdout.head.splitlines() if "=" in line}
    assert "SECRET" not in done.stdout.head
    assert "GREETING=hello" in done.stdout.head
    assert names <= {
        "PATH",
        "HOME",
        "LANG",
        "TERM",
        "USER",
        "TMPDIR",
        "GREETING",
        "PWD",
        "SHLVL",
        "_",
        "OLDPWD",
    }


def test_its_own_pid_namespace(home: Path) -> None:
    listing = "ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '; echo; cat /etc/hostname"
    done = run(sandbox(home), listing)
    pids = [int(p) for p in done.stdout.head.splitlines()[0].split()]
    assert os.getpid() not in pids and max(pids) < 50, pids
    assert pids[0] == 1
    assert done.stdout.head.splitlines()[1] == "sandbox"


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if marker.encode() in cmdline and state != "Z":
                found.append(int(entry.name))
    return found


def test_the_deadline_kills_every_process_of_the_command(home: Path) -> None:
    marker = f"{uuid.uuid4().int % 10_000_000 + 1000}"
    box = sandbox(home, timeout_s=3)
    done = run(box, f"sleep {marker} & (sleep {marker}; true) & sh -c 'sleep {marker}'")
    assert done.stopped == "time" and done.exit_code is None
    assert _processes_with(f"sleep\0{marker}") == []  # run returns once the kernel reaped them all
    text = result_text(done, 1000, 3)
    assert "ran past its limit of 3 seconds and was killed" in text
    print(f"\nsleep {marker} with timeout_s=3: stopped after {done.duration_s:.2f} s wall time")


def test_200_kb_of_output_is_capped_and_says_so(home: Path) -> None:
    box = sandbox(home, max_output_chars=4000)
    done = run(box, "head -c 200000 /dev/zero | tr '\\0' a; echo END")
    assert done.exit_code == 0
    text = result_text(done, 4000, 60)
    assert len(text) < 4300
    assert "output cut" in text and "left out here" in text
    assert text.rstrip().endswith("END")


def test_endless_output_is_stopped_and_costs_little_memory(home: Path) -> None:
    done = run(sandbox(home, max_output_chars=1000, timeout_s=120), "yes")
    assert done.stopped == "output"
    assert len(done.stdout.head) + len(done.stdout.tail) <= 2 * 1000
    assert "printed far too much output" in result_text(done, 1000, 120)


def test_memory_and_process_limits_hold(home: Path) -> None:
    require(None if Path("/usr/bin/python3").exists() else "needs /usr/bin/python3")
    box = sandbox(home, max_memory_mb=64, max_processes=16)
    big = run(box, "python3 -c 'x = bytearray(512 << 20); print(\"allocated\")'")
    assert "allocated" not in big.stdout.head and "MemoryError" in said(big)


def test_extra_mounts_are_read_only_unless_rw(home: Path, tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    (data / "in.txt").write_text("shared")
    os.chmod(tmp_path, 0o755)
    box = sandbox(home, mounts=(MountConfig(data, Path("/data")), MountConfig(out, None, "rw")))
    done = run(box, f"cat /data/in.txt; echo x > /data/new; echo y > {out}/new; echo ok")
    assert done.stdout.head == "sharedok\n"
    assert not (data / "new").exists() and (out / "new").read_text() == "y\n"


def test_a_mount_of_a_folder_holding_the_home_masks_it(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    home = parent / "home"
    home.mkdir(parents=True)
    (home / "config.yaml").write_text("SECRET")
    (parent / "visible.txt").write_text("fine\n")
    box = Sandbox(SandboxSpec.of(ShellConfig(enabled=True, mounts=(MountConfig(parent),)), home))
    done = run(box, f"cat {parent}/visible.txt; ls -A {home}; cat {home}/config.yaml; echo w > f")
    assert "fine" in done.stdout.head and "SECRET" not in said(done)
    assert done.stdout.head.split() == ["fine", "workspace"]
    assert (home / "workspace" / "f").read_text() == "w\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="what a root daemon does")
def test_a_root_daemon_runs_commands_as_nobody_where_it_can(home: Path) -> None:
    reachable = Path(f"/tmp/h31-ws-{uuid.uuid4().hex}")
    try:
        box = sandbox(home, workdir=reachable)
        assert box.spec.run_as == DROP_TO
        done = run(box, "id -u; touch made")
        assert done.stdout.head == "1000\n"
        assert (reachable / "made").stat().st_uid == DROP_TO[0]
        hidden = sandbox(home)  # the workspace in a home only root may enter
        assert hidden.spec.run_as is None
        assert run(hidden, "touch made; id -u").stdout.head == "1000\n"
        assert (home / "workspace" / "made").stat().st_uid == 0
    finally:
        shutil.rmtree(reachable, ignore_errors=True)


DAEMON = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from gateway.config.shell import ShellConfig
    from gateway.sandbox.runner import Sandbox
    from gateway.sandbox.spec import SandboxSpec
    box = Sandbox(SandboxSpec.of(ShellConfig(enabled=True, timeout_s=600), Path(sys.argv[1])))
    asyncio.run(box.run("sleep " + sys.argv[2] + " & sleep " + sys.argv[2]))
""")


def test_the_sandbox_dies_with_the_daemon(home: Path) -> None:
    marker = f"{uuid.uuid4().int % 10_000_000 + 1000}"
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON, str(home), marker])
    try:
        _wait(lambda: len(_processes_with(f"sleep\0{marker}")) == 2)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        _wait(lambda: _processes_with(f"sleep\0{marker}") == [])
    finally:
        daemon.kill()
        daemon.wait()


def _wait(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    async def poll() -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.05)

    asyncio.run(poll())


def test_a_missing_bwrap_is_a_clear_failure(home: Path) -> None:
    box = sandbox(home, bwrap=Path("/nonexistent/bwrap"))
    with pytest.raises(SandboxFailed, match="could not be started"):
        run(box, "true")
    assert asyncio.run(box.probe()) is not None
    assert asyncio.run(sandbox(home).probe()) is None


def test_the_request_shows_the_exact_command() -> None:
    command = "rm -rf ./build && echo '```' done"
    text = describe({"command": command})
    assert command in text and "````sh" in text


def test_doctor_says_whether_the_sandbox_runs(tmp_path: Path) -> None:
    from gateway.ops.doctor import Doctor

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.yaml").write_text("tools:\n  shell:\n    enabled: true\n")
    shell = [c.line() for c in asyncio.run(Doctor(home, {}, timeout=5).run()) if c.name == "shell"]
    assert shell[0].startswith("ok   shell     bubblewrap ran `true` (no network; workspace ")
    (home / "config.yaml").write_text(
        "tools:\n  shell:\n    enabled: true\n    bwrap: /nonexistent/bwrap\n"
    )
    shell = [c.line() for c in asyncio.run(Doctor(home, {}, timeout=5).run()) if c.name == "shell"]
    assert shell == [
        (
            "FAIL shell     /nonexistent/bwrap is missing: the shell cannot run commands"
            " — fix: apt-get install bubblewrap"
        )
    ]
    (home / "config.yaml").write_text("tools:\n  shell:\n    enabled: false\n")
    assert not [c for c in asyncio.run(Doctor(home, {}, timeout=5).run()) if c.name == "shell"]


def test_doctor_tells_when_bubblewrap_cannot_make_its_namespaces(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    from gateway.sandbox.runner import doctor_check

    found = asyncio.run(doctor_check(ShellConfig(enabled=True, bwrap=fake), tmp_path / "home"))
    assert found[0][0] == "fail" and "No permissions to create new namespace" in found[0][1]
    assert "install-service" in str(found[0][2])
