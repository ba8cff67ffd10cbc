"""Voice replies on Discord, end to end: a voice message answered with the text, then a real voice
message (IS_VOICE_MESSAGE, one OGG/Opus attachment with duration and waveform, no content), posted
through discord.py's own HTTP client against the fake Discord, which holds it to Discord's rules;
an audio file where a voice message is refused."""

from __future__ import annotations

import base64
from pathlib import Path

from tests.adapters.test_discord import DM, MENTION, running
from tests.adapters.test_telegram_voice import probe
from tests.fakes.discord import CHANNEL_ID, VOICE_MESSAGE_FLAG, FakeDiscord
from tests.fakes.llm import FakeLLM
from tests.fakes.speech import FakeSpeech
from tests.fakes.transcription import FakeTranscription
from tests.mediafiles import VOICE_NOTE

HEARD = "echo: [voice note, transcribed] what's the weather tomorrow [users=1]"


def voice_yaml(stt: FakeTranscription, speech: FakeSpeech, replies: str = "auto") -> str:
    return (
        f"media:\n  transcription:\n    base_url: {stt.v1_url}\n"
        f"voice:\n  replies: {replies}\n  tts:\n    provider: openai\n"
        f"    base_url: {speech.v1_url}\n"
    )


async def test_a_voice_message_is_answered_with_text_then_a_voice_message(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with FakeTranscription(api_key=None) as stt, FakeSpeech(api_key=None) as speech:
        stt.says(VOICE_NOTE, "what's the weather tomorrow")
        async with running(home, fake_llm, fake_discord, voice_yaml(stt, speech)) as run:
            voice = fake_discord.add_attachment(
                VOICE_NOTE, "voice-message.ogg", "audio/ogg", channel_id=DM, voice=True
            )
            await fake_discord.push_message(DM, "", attachments=[voice], flags=VOICE_MESSAGE_FLAG)
            await fake_discord.wait_for_sent(DM, count=2)
            text, note = fake_discord.sent_messages(DM)
            assert text.content == HEARD
            assert note.flags & VOICE_MESSAGE_FLAG and note.content == "" and len(note.files) == 1
            upload = note.files[0]
            assert upload["data"].startswith(b"OggS") and b"OpusHead" in upload["data"][:200]
            assert float((await probe(upload["data"]))["format"]["duration"]) > 0.5
            assert upload["duration_secs"] > 0.5
            assert 1 <= len(base64.b64decode(upload["waveform"])) <= 256
            assert speech.requests[0].input == HEARD + "."
            assert fake_discord.voice_messages(DM) == [note]
            await run.gw.sessions.wait_idle()
            await fake_discord.push_message(DM, "and in text?")
            await fake_discord.wait_for_sent(DM, count=3)
            assert len(fake_discord.voice_messages(DM)) == 1  # a text message under auto: text only


async def test_a_channel_that_refuses_voice_messages_gets_an_audio_file(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with FakeTranscription(api_key=None) as stt, FakeSpeech(api_key=None) as speech:
        fake_discord.refuse_voice(CHANNEL_ID)
        always = voice_yaml(stt, speech, replies="always")
        async with running(home, fake_llm, fake_discord, always):
            await fake_discord.push_message(CHANNEL_ID, f"{MENTION} hello")
            await fake_discord.wait_for_sent(CHANNEL_ID, count=2)
            text, audio = fake_discord.sent_messages(CHANNEL_ID)
            assert text.content.startswith("echo: ")
            assert audio.flags == 0 and audio.files[0]["filename"] == "voice-reply.ogg"
            assert audio.files[0]["data"].startswith(b"OggS")
            creates = [c for c in fake_discord.calls if c.name == "POST /channels/{cid}/messages"]
            assert len(creates) == 3  # the text, the refused voice message, the audio file
