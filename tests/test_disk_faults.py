"""Disk faults under a real `gateway run` (issue #27's round): GATEWAY_HOME on a small tmpfs that
is then filled. The daemon stays up and says what it cannot do: an upload is refused with a clear
answer and leaves no partial file, a message is refused (not lost silently), /healthz answers; once
there is space again, the chat works again. Needs root (to mount the tmpfs); skipped otherwise.
(A read-only remount under a running daemon is refused by the kernel while the database is open for
writing; a read-only or damaged state.db at start is tests/test_home.py's.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.daemon_proc import DaemonProc, WebChatClient, free_port
from tests.fakes.llm import FakeLLM
from tests.helpers import write_config
from tests.mediafiles import make_pdf
from tests.test_webchat_media import auth


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte (a file written until the disk says no)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


async def test_a_full_disk_is_said_not_suffered(small_disk: Path, fake_llm: FakeLLM) -> None:
    home, port = small_disk / "home", free_port()
    home.mkdir()
    extra = f"web:\n  port: {port}\n"
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra=extra)
    daemon = DaemonProc(home)
    await daemon.start()
    try:
        await daemon.wait_ready()
        async with WebChatClient(port, home=home) as tab:
            assert (await tab.say("before"))["outcome"] == "accepted"
            assert (await tab.next("message"))["text"] == "echo: before [users=1]"
        filler = fill(small_disk)
        form = aiohttp.FormData()
        form.add_field(
            "file",
            make_pdf(["x" * 10_000]) * 20,
            filename="big.pdf",
            content_type="application/pdf",
        )
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}/upload"
            async with http.post(url, data=form, headers=auth(home)) as resp:
                status, body = resp.status, await resp.json(content_type=None)
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert resp.status == 200
        assert status == 507 and "disk" in body["error"], (status, body)
        assert list((home / "media" / "uploads").iterdir()) == []
        async with WebChatClient(port, home=home, client="tab2") as tab:
            ack = await tab.say("during " + "y" * 50_000)
            told = await tab.next("message") if ack["outcome"] == "refused" else None
        assert ack["outcome"] == "refused" and told is not None, (ack, told)
        filler.unlink()
        async with WebChatClient(port, home=home, client="tab3") as tab:
            deadline = asyncio.get_running_loop().time() + 90  # met at once unless stuck
            while (await tab.say("after"))["outcome"] != "accepted":
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.5)
            assert (await tab.next("message"))["text"].startswith("echo: after")
        code = await daemon.stop()
    finally:
        await daemon.kill()
    assert code == 0, daemon.output()[-3000:]
    assert os.path.ismount(small_disk)
    worst = [r["msg"] for r in daemon.log_records() if r["level"] in ("ERROR", "CRITICAL")]
    store = "the database takes no writes (database or disk is full"
    assert all(m.startswith(store) for m in worst), worst
