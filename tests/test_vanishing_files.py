"""Files that vanish while they are fetched (issue #27's round): a platform file removed after its
first chunk came (the connection drops, the next try finds 404), and a web chat upload removed
between the message and the turn that reads it. The message is still answered, the sender told
what could not be used, and no partial file stays behind."""

from __future__ import annotations

import os
from pathlib import Path

from gateway.store.media_files import media_root
from tests.adapters.test_telegram import ALICE
from tests.adapters.test_telegram_media import message, running
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.mediafiles import make_pdf
from tests.test_webchat_media import say, start, upload


async def test_a_platform_file_removed_mid_download(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    pdf = make_pdf(["Quarterly report " + "padding " * 20_000])  # more than one 64 KB chunk
    async with running(home, fake_llm, fake_telegram):
        doc = fake_telegram.add_file(pdf, name="report.pdf", mime_type="application/pdf")
        key = next(iter(fake_telegram.shelf.files))
        fake_telegram.shelf.hold()
        message(
            fake_telegram,
            message_id=5,
            caption="summarize",
            document={**doc, "file_name": "report.pdf", "mime_type": "application/pdf"},
        )
        await fake_telegram.wait_until(lambda: fake_telegram.shelf.started[key] == 1)
        fake_telegram.shelf.remove(key)
        fake_telegram.shelf.release()
        notice = await fake_telegram.wait_for_sent(ALICE)
        reply = await fake_telegram.wait_for_sent(ALICE, count=2)
    assert notice.text.startswith("I couldn't use report.pdf: it could not be downloaded")
    said = "echo: summarize\n[The user sent report.pdf, but it could not be used:"
    assert reply.text.startswith(said)
    assert fake_telegram.shelf.served[key] == 0
    left = [p for p in media_root(home).rglob("*") if p.is_file()]
    assert not [p for p in left if p.name.endswith(".part") or p.stat().st_size >= 64 * 1024], left


async def test_an_upload_removed_before_its_turn_reads_it(home: Path) -> None:
    """The retention (or someone) removes an upload after the message naming it was accepted, while
    an earlier turn of the same chat still runs: the later turn says the file is gone instead of
    failing. One removed before the message is refused at once."""
    import json

    import aiohttp

    from tests.test_forget_running import HeldLLM
    from tests.test_webchat_media import auth

    llm = HeldLLM()
    await llm.start()
    daemon = await start(home, llm)
    try:
        port = daemon.web_port
        assert port
        _, gone = await upload(port, home, make_pdf(["early"]), "early.pdf", "application/pdf")
        os.unlink(home / "media" / "uploads" / gone["id"])
        frames = await say(port, home, {"text": "this", "files": [gone]})
        refused = "a file of this message was not uploaded (or is gone); attach it again"
        assert frames == [{"type": "error", "text": refused}]
        _, later = await upload(port, home, make_pdf(["later"]), "later.pdf", "application/pdf")
        llm.hold()
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}/ws?client=tab1"
            async with http.ws_connect(url, headers=auth(home)) as ws:
                await ws.send_str(json.dumps({"text": "first"}))
                await llm.arrived.wait()  # the first turn waits on the model
                second = {"id": "second-msg-1", "text": "second", "files": [later]}
                await ws.send_str(json.dumps(second))
                async for msg in ws:
                    data = json.loads(msg.data)
                    if data.get("type") == "ack" and data.get("id") == "second-msg-1":
                        break
                os.unlink(home / "media" / "uploads" / later["id"])  # accepted, not yet read
                llm.release()
                answers = []
                async for msg in ws:
                    data = json.loads(msg.data)
                    if data.get("type") == "message":
                        answers.append(data["text"])
                    if len([a for a in answers if a.startswith("echo: second")]) == 1:
                        break
    finally:
        await daemon.stop()
        llm.release()
        await llm.stop()
    told = "I couldn't use later.pdf: it could not be downloaded: the upload is gone"
    assert told in " ".join(answers)
    assert any(
        a.startswith("echo: second\n[The user sent later.pdf, but it could not be used:")
        for a in answers
    ), answers
