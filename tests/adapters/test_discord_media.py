"""Attachments on Discord, end to end: discord.py against the fake gateway and REST, attachments
fetched from the fake's signed CDN URLs; what is asserted is the bytes the model was sent and what
the user saw."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

from tests.adapters.test_discord import DM, running
from tests.fakes.discord import BOT_ID, CHANNEL_ID, VOICE_MESSAGE_FLAG, FakeDiscord
from tests.fakes.llm import FakeLLM
from tests.fakes.transcription import FakeTranscription
from tests.mediafiles import CORRUPT_PDF, VOICE_NOTE, image_size, make_pdf, picture


def last_user_content(llm: FakeLLM) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = llm.anthropic_requests()[-1]["messages"][-1]["content"]
    return content


def texts(content: list[dict[str, Any]]) -> str:
    return "\n".join(b["text"] for b in content if b["type"] == "text")


async def test_a_photo_reaches_the_model_as_an_image_block(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord):
        photo = fake_discord.add_attachment(
            picture(2400, 1800), "cat.png", "image/png", channel_id=DM
        )
        await fake_discord.push_message(DM, "what breed?", attachments=[photo])
        reply = await fake_discord.wait_for_sent(DM)
        assert reply.content == "echo: what breed?\n[image: cat.png] [users=1]"
        image = last_user_content(fake_llm)[0]
        assert image["type"] == "image" and image["source"]["media_type"] == "image/jpeg"
        assert image_size(base64.b64decode(image["source"]["data"])) == (1238, 928)
        assert len(fake_discord.calls_to("GET /attachments")) == 1


async def test_a_pdf_s_text_reaches_the_model(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord):
        pdf = fake_discord.add_attachment(
            make_pdf(["Invoice 2026-17", "Total: 420 EUR"]),
            "invoice.pdf",
            "application/pdf",
            channel_id=DM,
        )
        await fake_discord.push_message(DM, "", attachments=[pdf])
        await fake_discord.wait_for_sent(DM)
        text = texts(last_user_content(fake_llm))
        assert text.startswith("[Document: invoice.pdf (application/pdf, ")
        assert (
            '<document name="invoice.pdf">\nInvoice 2026-17\n\nTotal: 420 EUR\n</document>' in text
        )


async def test_a_voice_message_is_transcribed(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with FakeTranscription(api_key=None) as stt:
        stt.says(VOICE_NOTE, "what's the weather tomorrow")
        async with running(
            home, fake_llm, fake_discord, f"media:\n  transcription:\n    base_url: {stt.v1_url}\n"
        ):
            voice = fake_discord.add_attachment(
                VOICE_NOTE, "voice-message.ogg", "audio/ogg", channel_id=DM, voice=True
            )
            await fake_discord.push_message(DM, "", attachments=[voice], flags=VOICE_MESSAGE_FLAG)
            reply = await fake_discord.wait_for_sent(DM)
            assert (
                reply.content
                == "echo: [voice note, transcribed] what's the weather tomorrow [users=1]"
            )
        assert stt.uploads[0].filename == "voice.ogg" and stt.uploads[0].data == VOICE_NOTE


async def test_oversized_and_corrupt_files_get_clear_answers(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord, "media:\n  max_bytes: 50000\n"):
        big = fake_discord.add_attachment(b"x" * 80_000, "dump.txt", "text/plain", channel_id=DM)
        broken = fake_discord.add_attachment(
            CORRUPT_PDF, "scan.pdf", "application/pdf", channel_id=DM
        )
        await fake_discord.push_message(DM, "two files", attachments=[big, broken])
        notice = await fake_discord.wait_for_sent(DM)
        assert notice.content == (
            "I couldn't use dump.txt: it is too large (78 KB; the limit is 48 KB).\n"
            "I couldn't use scan.pdf: the PDF is damaged or not a PDF at all."
        )
        reply = await fake_discord.wait_for_sent(DM, count=2)
        assert reply.content.startswith(
            "echo: two files\n[The user sent dump.txt, but it could not be used"
        )
        assert len(fake_discord.calls_to("GET /attachments")) == 1  # the big one was never fetched


async def test_an_expired_link_is_refreshed_and_the_photo_still_arrives(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    """A turn replayed a day later (an outage, a restart) finds its signed CDN link expired: Discord
    is asked for a fresh one (POST /attachments/refresh-urls, with the bot's token) and the picture
    still reaches the model."""
    async with running(home, fake_llm, fake_discord):
        photo = fake_discord.add_attachment(picture(50, 50), "a.png", "image/png", channel_id=DM)
        fake_discord.expire_attachments()
        await fake_discord.push_message(DM, "look", attachments=[photo])
        reply = await fake_discord.wait_for_sent(DM)
        assert reply.content == "echo: look\n[image: a.png] [users=1]"
        assert image_size(base64.b64decode(last_user_content(fake_llm)[0]["source"]["data"])) == (
            50,
            50,
        )
        refresh = fake_discord.calls_to("POST /attachments/refresh-urls")
        assert len(refresh) == 1 and refresh[0].body == {"attachment_urls": [photo["url"]]}
        # the dead link, then the fresh one
        assert len(fake_discord.calls_to("GET /attachments")) == 2


async def test_a_deleted_file_still_lets_the_text_through(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord):
        photo = fake_discord.add_attachment(picture(50, 50), "a.png", "image/png", channel_id=DM)
        fake_discord.expire_attachments()
        fake_discord.delete_attachment(photo)
        await fake_discord.push_message(DM, "look", attachments=[photo])
        notice = await fake_discord.wait_for_sent(DM)
        assert notice.content == (
            "I couldn't use a.png: it could not be downloaded: Discord no longer serves it "
            "(the message or the file was deleted)."
        )
        assert (await fake_discord.wait_for_sent(DM, count=2)).content.startswith("echo: look\n")


def apng(size: int) -> bytes:
    """An animated PNG (as Discord's APNG stickers): a green first frame, then a red one."""
    from PIL import Image

    frames = [
        Image.new("RGBA", (size, size), color) for color in ((0, 200, 0, 255), (200, 0, 0, 255))
    ]
    out = io.BytesIO()
    frames[0].save(out, "PNG", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return out.getvalue()


async def test_stickers_are_seen_as_still_images(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    """PNG, APNG (its first frame) and GIF stickers reach the model as pictures; a Lottie sticker (a
    vector animation) is described instead of fetched."""
    async with running(home, fake_llm, fake_discord):
        still = fake_discord.add_sticker(picture(320, 320, fmt="PNG"), "Thumbs up", 1)
        moving = fake_discord.add_sticker(apng(160), "Wave", 2)
        gif = fake_discord.add_sticker(picture(100, 80, fmt="GIF"), "Dance", 4)
        lottie = fake_discord.add_sticker(b'{"v": "5.5.2", "layers": []}', "Clyde", 3)
        await fake_discord.push_message(DM, "", stickers=[still, moving, gif, lottie])
        reply = await fake_discord.wait_for_sent(DM)
        assert reply.content == (
            "echo: [image: sticker Thumbs up]\n[image: sticker Wave]\n[image: sticker Dance]\n"
            "[Sticker: sticker Clyde (application/x-lottie+json). Its contents were not loaded: "
            "it is an animation only the chat app can play.] [users=1]"
        )
        images = [b for b in last_user_content(fake_llm) if b["type"] == "image"]
        sizes = [image_size(base64.b64decode(b["source"]["data"])) for b in images]
        assert sizes == [(320, 320), (160, 160), (100, 80)]
        from PIL import Image

        with Image.open(io.BytesIO(base64.b64decode(images[1]["source"]["data"]))) as first:
            red, green, _ = first.convert("RGB").getpixel((80, 80))  # type: ignore[misc]
        assert green > 150 and red < 50  # the first frame, not the last
        assert len(fake_discord.calls_to("GET /stickers")) == 3  # the Lottie file was never fetched


async def test_a_link_to_another_host_is_never_fetched(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord):
        evil = {
            "id": "1",
            "filename": "x.png",
            "size": 10,
            "content_type": "image/png",
            "url": "http://169.254.169.254/latest/meta-data",
            "proxy_url": "http://169.254.169.254/",
        }
        await fake_discord.push_message(DM, "hi", attachments=[evil])
        notice = await fake_discord.wait_for_sent(DM)
        assert notice.content == (
            "I couldn't use x.png: it could not be downloaded: Discord gave no downloadable "
            "link for it."
        )


async def test_a_channel_photo_with_a_mention(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord):
        photo = fake_discord.add_attachment(picture(300, 200), "chart.jpg", "image/jpeg")
        await fake_discord.push_message(
            CHANNEL_ID, f"<@{BOT_ID}> thoughts?", mentions=[BOT_ID], attachments=[photo]
        )
        await fake_discord.wait_for_sent(CHANNEL_ID)
        assert [b["type"] for b in last_user_content(fake_llm)] == ["image", "text"]
