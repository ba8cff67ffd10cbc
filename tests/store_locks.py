"""Another process holding state.db's write lock,
for the tests of what the daemon does meanwhile.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Self

HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


class LockHolder:
    """Another process holding state.db's write lock until told to let go."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Self:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            HOLD_LOCK,
            str(self.db),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        assert (await asyncio.wait_for(self.proc.stdout.readline(), 30)) == b"locked\n"
        return self

    async def release(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"\n")
            await self.proc.stdin.drain()
            await asyncio.wait_for(self.proc.wait(), 30)

    async def __aexit__(self, *exc: object) -> None:
        await self.release()
