"""Voice replies on Slack, end to end: slack-bolt in Socket Mode against the fake Slack; an audio
clip is answered with the text, then the spoken answer uploaded as an audio file in the same thread
through Slack's upload flow (files.getUploadURLExternal, the upload,
files.completeUploadExternal)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_slack import CHANNEL, DM, USERS, dm, mention, running
from tests.adapters.test_telegram_voice import probe
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack
from tests.fakes.speech import FakeSpeech
from tests.fakes.transcription import FakeTranscription
from tests.mediafiles import VOICE_NOTE


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(users=USERS) as fake:
        yield fake


def voice_yaml(stt: FakeTranscription, speech: FakeSpeech, replies: str = "auto") -> str:
    return (
        f"media:\n  transcription:\n    base_url: {stt.v1_url}\n"
        f"voice:\n  replies: {replies}\n  tts:\n    provider: openai\n"
        f"    base_url: {speech.v1_url}\n"
    )


async def uploaded_to(slack: FakeSlack, channel: str) -> dict[str, Any]:
    """The file the bot uploaded and shared in `channel`, once there is one."""

    def find() -> dict[str, Any] | None:
        return next((f for f in slack.files.values() if f.get("channel") == channel), None)

    await slack.wait_until(lambda: find() is not None)
    found = find()
    assert found is not None
    return found


async def test_an_audio_clip_is_answered_with_text_then_an_audio_file_in_the_thread(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    async with FakeTranscription(api_key=None) as stt, FakeSpeech(api_key=None) as speech:
        stt.says(VOICE_NOTE, "please summarize the thread")
        async with running(home, fake_llm, slack, voice_yaml(stt, speech)):
            clip = slack.add_file(
                VOICE_NOTE, "audio_message.webm", "audio/webm", subtype="slack_audio"
            )
            await slack.push_event(dm("", subtype="file_share", files=[clip]))
            text = await slack.wait_for_post(DM)
            assert text.text == (
                "echo: [voice note, transcribed] please summarize the thread [users=1]"
            )
            uploaded = await uploaded_to(slack, DM)
            assert uploaded["filename"] == "voice-reply.ogg" and uploaded["title"] == "Voice reply"
            assert uploaded["thread_ts"] == text.thread_ts
            assert uploaded["data"].startswith(b"OggS") and b"OpusHead" in uploaded["data"][:200]
            assert float((await probe(uploaded["data"]))["format"]["duration"]) > 0.5
            names = [c.name for c in slack.calls if c.name.startswith(("files.", "upload"))]
            assert names == ["files.getUploadURLExternal", "upload", "files.completeUploadExternal"]
            file_id = next(k for k, v in slack.files.items() if v is uploaded)
            assert slack.posted(DM)[-1].params["files"] == [file_id]  # shared as the bot's message


async def test_in_a_channel_the_note_follows_the_answer_into_its_thread(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack
) -> None:
    async with FakeTranscription(api_key=None) as stt, FakeSpeech(api_key=None) as speech:
        async with running(home, fake_llm, slack, voice_yaml(stt, speech, replies="always")):
            await slack.push_event(mention("<@UBOT> how are you"))
            text = await slack.wait_for_post(CHANNEL)
            assert text.thread_ts is not None
            uploaded = await uploaded_to(slack, CHANNEL)
            assert uploaded["thread_ts"] == text.thread_ts
            assert speech.requests[0].input == "echo: [Alice] how are you [users=1]."


async def test_without_files_write_the_text_still_goes_and_nothing_is_retried(
    home: Path, fake_llm: FakeLLM, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    slack.files_write = False
    async with FakeTranscription(api_key=None) as stt, FakeSpeech(api_key=None) as speech:
        async with running(home, fake_llm, slack, voice_yaml(stt, speech, replies="always")) as run:
            await slack.push_event(dm("hello"))
            assert (await slack.wait_for_post(DM)).text == "echo: hello [users=1]"
            await run.gw.sessions.wait_idle()

            def voice_status() -> str | None:
                row = run.gw.store.one("SELECT status FROM outbound WHERE kind = 'voice'")
                return None if row is None else str(row[0])

            await slack.wait_until(lambda: voice_status() == "failed")
            assert len(slack.calls_to("files.getUploadURLExternal")) == 1
            assert "add the files:write bot scope" in caplog.text
