"""Attachments on Slack, end to end: slack-bolt in Socket Mode against the fake Slack, files fetched
from their private URLs with the bot token; what is asserted is the bytes the model was sent and
what the user saw."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_slack import DM, USERS, dm, running
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack
from tests.fakes.transcription import FakeTranscription
from tests.mediafiles import CORRUPT_PDF, VOICE_NOTE, image_size, make_pdf, picture


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(users=USERS) as fake:
        yield fake


def shared(slack: FakeSlack, text: str, *files: dict[str, Any]) -> dict[str, Any]:
    return dm(text, subtype="file_share", files=list(files))


def last_user_content(llm: FakeLLM) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = llm.anthropic_requests()[-1]["messages"][-1]["content"]
    return content


def texts(content: list[dict[str, Any]]) -> str:
    return "\n".join(b["text"] for b in content if b["type"] == "text")


async def test_a_photo_reaches_the_model_as_an_image_block(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    async with running(home, fake_llm, slack):
        photo = slack.add_file(picture(1000, 800, fmt="PNG"), "whiteboard.png", "image/png")
        await slack.push_event(shared(slack, "can you read this?", photo))
        post = await slack.wait_for_post(DM)
        assert post.text == "echo: can you read this?\n[image: whiteboard.png] [users=1]"
        image = last_user_content(fake_llm)[0]
        assert image["type"] == "image" and image_size(
            base64.b64decode(image["source"]["data"])
        ) == (1000, 800)
        assert [c.headers.get("Authorization") for c in slack.calls_to("files-pri")] == [
            f"Bearer {slack.bot_token}"
        ]


async def test_a_pdf_s_text_reaches_the_model(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    async with running(home, fake_llm, slack):
        pdf = slack.add_file(
            make_pdf(["Meeting notes", "Ship on Friday."]), "notes.pdf", "application/pdf"
        )
        await slack.push_event(shared(slack, "", pdf))
        await slack.wait_for_post(DM)
        assert (
            '<document name="notes.pdf">\nMeeting notes\n\nShip on Friday.\n</document>'
            in texts(last_user_content(fake_llm))
        )


async def test_an_audio_clip_is_transcribed(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    async with FakeTranscription(api_key=None) as stt:
        stt.says(VOICE_NOTE, "please summarize the thread")
        async with running(
            home, fake_llm, slack, f"media:\n  transcription:\n    base_url: {stt.v1_url}\n"
        ):
            clip = slack.add_file(
                VOICE_NOTE, "audio_message.webm", "audio/webm", subtype="slack_audio"
            )
            await slack.push_event(shared(slack, "", clip))
            post = await slack.wait_for_post(DM)
            assert (
                post.text == "echo: [voice note, transcribed] please summarize the thread [users=1]"
            )
        assert (
            stt.uploads[0].filename == "audio_message.webm"
            and stt.uploads[0].content_type == "audio/webm"
        )


async def test_without_the_token_slack_gives_a_sign_in_page_which_is_refused(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    async with running(home, fake_llm, slack):
        slack.files_scope = False  # the app was installed without files:read
        photo = slack.add_file(picture(60, 60), "p.jpg", "image/jpeg")
        await slack.push_event(shared(slack, "see", photo))
        notice = await slack.wait_for_post(DM)
        assert notice.text == (
            "I couldn't use p.jpg: it could not be downloaded: Slack refused the download (the app "
            "needs the files:read scope)."
        )
        assert (await slack.wait_for_post(DM, count=2)).text.startswith("echo: see\n")


async def test_corrupt_oversized_and_failed_files_get_clear_answers(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    async with running(home, fake_llm, slack, "media:\n  max_bytes: 50000\n"):
        broken = slack.add_file(CORRUPT_PDF, "broken.pdf", "application/pdf")
        big = slack.add_file(b"y" * 70_000, "big.csv", "text/csv")
        await slack.push_event(shared(slack, "", broken, big))
        notice = await slack.wait_for_post(DM)
        assert notice.text == (
            "I couldn't use broken.pdf: the PDF is damaged or not a PDF at all.\n"
            "I couldn't use big.csv: it is too large (68 KB; the limit is 48 KB)."
        )
        # a 429 or 5xx is asked again (tests/adapters/test_media_everyday.py)
        slack.fail("files-pri", Fault(404))
        photo = slack.add_file(picture(40, 40), "q.jpg", "image/jpeg")
        await slack.push_event(shared(slack, "and this", photo))
        failed = await slack.wait_for_post(DM, count=2)
        assert (
            failed.text
            == "I couldn't use q.jpg: it could not be downloaded: Slack answered HTTP 404."
        )
        assert (await slack.wait_for_post(DM, count=3)).text.startswith("echo: and this\n")
        # the message of two unusable files got its answer alone
        assert len(fake_llm.anthropic_requests()) == 1


async def test_a_file_hidden_by_the_workspace_limit_is_described(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    async with running(home, fake_llm, slack):
        hidden = slack.add_file(b"old", "old.txt", "text/plain", hidden=True)
        await slack.push_event(shared(slack, "remember this?", hidden))
        post = await slack.wait_for_post(DM)
        assert post.text == (
            "echo: remember this?\n[File: old.txt (text/plain). Its contents were not loaded: the "
            "platform gave no way to download it.] [users=1]"
        )
