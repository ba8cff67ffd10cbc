"""kill -9 in the middle of a download: the real daemon (a subprocess, as systemd runs it) is killed
while the fake Bot API holds a photo half sent; the restarted daemon downloads it again and the turn
is answered once."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import sqlite3
from pathlib import Path

import pytest

from tests.daemon_proc import DaemonProc
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.helpers import write_config
from tests.mediafiles import image_size

pytestmark = [pytest.mark.chaos, pytest.mark.heavy]
ALICE = 1001


def noisy_photo() -> bytes:
    """A photo of noise: large (no compression helps), so its download spans many chunks."""
    from PIL import Image

    image = Image.frombytes("RGB", (700, 500), os.urandom(700 * 500 * 3))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def rows(home: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(home / "state.db") as conn:
        return [tuple(r) for r in conn.execute(sql)]


async def until(predicate: object, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.05)


async def test_a_kill_during_a_download_downloads_again_and_answers_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with FakeLLM() as llm, FakeTelegram() as tg:
        write_config(
            home,
            provider="anthropic",
            base_url=llm.base_url,
            extra=(
                "web:\n  enabled: false\ntelegram:\n  token: "
                f"'{TOKEN}'\n  api_server: {tg.base_url}\n"
                f"  polling_timeout: 1\n  allowed_users: ['{ALICE}']\n"
            ),
        )
        data = noisy_photo()
        photo = tg.add_file(data, name="noise.png", mime_type="image/png", folder="photos")
        path = next(iter(tg.shelf.files))
        tg.shelf.hold()  # the download stops after its first chunk
        first = DaemonProc(home)
        await first.start()
        try:
            await first.wait_ready()
            tg.inject_message(
                ALICE,
                "",
                extra={
                    "text": None,
                    "caption": "what is this noise?",
                    "photo": [{**photo, "width": 700, "height": 500}],
                },
            )
            await until(
                lambda: (
                    tg.shelf.started[path] == 1
                    and any(  # the first chunk is on disk
                        p.stat().st_size > 0 for p in (home / "media").rglob("*.part")
                    )
                )
            )
        finally:
            await first.kill()  # SIGKILL, mid-download
        part = next((home / "media").rglob("*.part"))
        assert 0 < part.stat().st_size < len(data)  # a partial file, never taken for the photo
        assert (
            rows(home, "SELECT status FROM inbound") == [("running",)]
            and llm.anthropic_requests() == []
        )
        tg.shelf.release()
        second = DaemonProc(home)
        await second.start()
        try:
            await second.wait_ready()
            reply = await tg.wait_for_sent(ALICE, timeout=60)
            assert reply.text == "echo: what is this noise?\n[image: photo] [users=1]"
            await until(lambda: rows(home, "SELECT status FROM inbound") == [("answered",)])
        finally:
            code = await second.stop()
            await second.kill()  # closes its notify socket
        assert code == 0
    # fetched again, whole this time
    assert tg.shelf.started[path] == 2 and tg.shelf.served[path] == 1
    assert len(tg.sent_messages(ALICE)) == 1 and len(llm.anthropic_requests()) == 1
    image = llm.anthropic_requests()[0]["messages"][-1]["content"][0]
    assert image_size(base64.b64decode(image["source"]["data"])) == (700, 500)
    assert not list((home / "media").rglob("*.part"))
