"""The fake MCP server's command as the gateway runs it (tests/fakes/mcp_zygote.py): hands this
process's stdin, stdout and stderr to a server forked by the zygote, forwards the signals it gets
to it, and exits with its code. Standard library only, run with `python -I -S`: it starts in
milliseconds.

    python -I -S mcp_launch.py ZYGOTE_SOCKET [mcp_server.py arguments]
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def main() -> int:
    path, argv = sys.argv[1], sys.argv[2:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(path)
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    pid = json.loads(conn.recv(4096))["pid"]

    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    reply = conn.recv(4096)  # the server's end (an empty read: the zygote is gone)
    code = json.loads(reply)["exit"] if reply else 1
    return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell says


if __name__ == "__main__":
    sys.exit(main())
