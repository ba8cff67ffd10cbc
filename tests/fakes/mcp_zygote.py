"""The fake MCP server (tests/fakes/mcp_server.py), started in milliseconds: one process imports the
`mcp` SDK once and forks a server for each start, on the stdin, stdout and stderr of a small
launcher (tests/fakes/mcp_launch.py) that the gateway runs as the server's command.

Importing the SDK builds ~550 pydantic models, about 2 s of CPU in every server process: on a busy
machine a server took 20-30 s to answer its first request, longer than a test's connect window.
The gateway still starts a real process and speaks real MCP over its pipes: the launcher passes
its own three descriptors to the forked server, forwards the signals it gets, and exits with the
server's code; a launcher that dies takes its server with it.

    command, args = server_command("--tools", "tools.json")   # for mcp_servers.<name>
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

LAUNCHER = Path(__file__).with_name("mcp_launch.py")
_zygote: dict[str, object] = {}


def server_command(*server_args: str) -> tuple[str, list[str]]:
    """The command and arguments that start one fake server with `server_args` (mcp_server.py's)."""
    return sys.executable, ["-I", "-S", str(LAUNCHER), zygote_socket(), *server_args]


def start() -> None:
    """Start this process's zygote now (it imports the
    SDK meanwhile); zygote_socket() waits for it."""
    if "proc" in _zygote:
        return
    folder = tempfile.mkdtemp(prefix="mcp-zygote-")
    root = Path(__file__).resolve().parent.parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    path = os.path.join(folder, "zygote.sock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_zygote", path, str(os.getpid())],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    atexit.register(_stop, proc)
    _zygote.update(path=path, proc=proc)


def zygote_socket() -> str:
    """The socket of this process's zygote, started on first use and stopped at exit."""
    start()
    if "socket" not in _zygote:
        proc = _zygote["proc"]
        assert isinstance(proc, subprocess.Popen) and proc.stdout is not None
        if proc.stdout.readline() != b"ready\n":  # the SDK is imported; it listens
            raise RuntimeError(f"the MCP zygote did not start (exit {proc.wait()})")
        proc.stdout.close()
        _zygote["socket"] = _zygote["path"]
    return str(_zygote["socket"])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------------------- the zygote itself
def serve(path: str, parent: int) -> None:
    from tests.fakes import mcp_server  # the expensive import, once

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector (through the wakeup fd)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    children: dict[int, socket.socket] = {}  # server pid -> its launcher's connection
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    print("ready", flush=True)
    try:
        while os.getppid() == parent:  # the test run went away: so does the zygote
            for key, _ in selector.select(timeout=1.0):
                if key.data == "accept":
                    _start(listener, selector, children, mcp_server.main)
                elif key.data == "wake":
                    os.read(wake_r, 4096)
                else:  # a launcher's connection: it died (or closed) before its server
                    _launcher_gone(key.fileobj, selector, children)  # type: ignore[arg-type]
            _reap(selector, children)
    finally:
        for pid in children:
            _kill(pid)


def _start(
    listener: socket.socket,
    selector: selectors.BaseSelector,
    children: dict[int, socket.socket],
    main: object,
) -> None:
    conn, _ = listener.accept()
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    except OSError:
        conn.close()
        return
    if len(fds) != 3:
        conn.close()
        return
    request = json.loads(data)
    pid = os.fork()
    if pid == 0:  # the server
        code = 1
        try:
            selector.close()
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = ["mcp_server.py", *request["argv"]]
            sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own streams, new fds)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            main(request["argv"])  # type: ignore[operator]
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 (the child's own end: report and exit)
            import traceback

            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
            finally:
                os._exit(code)
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode())
    children[pid] = conn
    selector.register(conn, selectors.EVENT_READ, "launcher")


def _reap(selector: selectors.BaseSelector, children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            selector.unregister(conn)
            code = os.waitstatus_to_exitcode(status)
            try:
                conn.sendall(json.dumps({"exit": code}).encode())
            except OSError:
                pass
            conn.close()


def _launcher_gone(
    conn: socket.socket, selector: selectors.BaseSelector, children: dict[int, socket.socket]
) -> None:
    for pid, theirs in list(children.items()):
        if theirs is conn:
            _kill(pid)  # reaped, and reported to nobody, by the next _reap
            children.pop(pid)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    selector.unregister(conn)
    conn.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
