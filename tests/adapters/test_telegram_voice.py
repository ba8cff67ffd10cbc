"""Voice replies on Telegram, end to end: real aiogram polling against the fake Bot API (sendVoice),
the whole gateway, the fake model, a fake transcription service for the voice notes people send, and
a fake OpenAI speech service (or the real espeak-ng) for the ones the gateway sends back; every note
is checked with ffprobe."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from adapters.telegram.adapter import TelegramAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.adapters.test_telegram import ALICE, BOB, GROUP, VirtualTime, telegram_yaml
from tests.fakes.base import Delay, Fault
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.speech import FakeSpeech
from tests.fakes.telegram import FakeTelegram, SentMessage
from tests.fakes.transcription import FakeTranscription
from tests.helpers import write_config
from tests.mediafiles import VOICE_NOTE

ANSWER = (
    "Here is how:\n\n```python\nprint('secret code')\n```\n\n"
    "Read https://example.com/guide for more, or the [manual](https://example.com/manual). "
    "**Good luck!**"
)


def voice_yaml(speech: FakeSpeech | None, stt: FakeTranscription, *, replies: str = "auto") -> str:
    tts = "    provider: espeak\n"
    if speech is not None:
        tts = (
            f"    provider: openai\n    base_url: {speech.v1_url}\n    api_key_env: TTS_KEY\n"
            "    voice: nova\n"
        )
    return (
        f"media:\n  transcription:\n    base_url: {stt.v1_url}\n    api_key_env: STT_KEY\n"
        f"voice:\n  replies: {replies}\n  tts:\n{tts}"
    )


@asynccontextmanager
async def running(home: Path, llm: FakeLLM, tg: FakeTelegram, extra: str) -> AsyncIterator[Gateway]:
    write_config(home, base_url=llm.base_url, extra=telegram_yaml(tg, extra))
    config = load_config(home, env={})
    assert config.telegram is not None
    virtual = VirtualTime()
    tg.clock = virtual.monotonic
    adapter = TelegramAdapter(config.telegram, submit_retry_delays=(), clock=virtual.monotonic)
    env = {"STT_KEY": "stt-key", "TTS_KEY": "tts-key"}
    gw = build_gateway(
        config,
        env=env,
        adapters=[adapter],
        probe_ollama=False,
        sleep=virtual.sleep,
        monotonic=virtual.monotonic,
    )
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    try:
        yield gw
    finally:
        await daemon.stop()


def send_voice_note(tg: FakeTelegram, message_id: int, chat: int = ALICE) -> None:
    voice = tg.add_file(VOICE_NOTE, name="voice.oga", mime_type="audio/ogg", folder="voice")
    tg.inject_update(
        {
            "message": {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": chat, "type": "private", "first_name": "Alice"},
                "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
                "voice": {**voice, "duration": 3, "mime_type": "audio/ogg"},
            }
        }
    )


async def probe(data: bytes) -> dict[str, Any]:
    """What ffprobe reads in a note: its container, codec and duration (from a file: an Ogg's
    duration is read from its last page)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "note.ogg"
        path.write_bytes(data)
        entries = "format=format_name,duration:stream=codec_name,channels"
        proc = await asyncio.create_subprocess_exec(
            "ffprobe",
            "-v",
            "error",
            "-show_entries",
            entries,
            "-of",
            "json",
            str(path),
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
    assert proc.returncode == 0
    found: dict[str, Any] = json.loads(out)
    return found


async def assert_real_voice_note(note: SentMessage) -> bytes:
    assert note.method == "sendvoice" and note.document is not None
    data: bytes = note.document["data"]
    assert data.startswith(b"OggS") and b"OpusHead" in data[:200]
    info = await probe(data)
    assert info["format"]["format_name"] == "ogg" and info["streams"][0]["codec_name"] == "opus"
    assert float(info["format"]["duration"]) > 0.5
    assert int(note.params["duration"]) >= 1
    return data


# --------------------------------------------------------------------------------------------- auto
async def test_a_voice_note_is_answered_with_text_then_a_real_voice_note(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with FakeTranscription() as stt, FakeSpeech() as speech:
        stt.says(VOICE_NOTE, "how do I print in python")
        async with running(home, fake_llm, fake_telegram, voice_yaml(speech, stt)) as gw:
            fake_llm.script(Reply("Just type it."), Reply(ANSWER))
            fake_telegram.inject_message(ALICE, "hello there")
            text_only = await fake_telegram.wait_for_sent(ALICE)
            assert text_only.text == "Just type it." and text_only.method == "sendmessage"
            send_voice_note(fake_telegram, 50)
            await fake_telegram.wait_for_sent(ALICE, count=3)
            _, answer, note = fake_telegram.sent_messages(ALICE)
            assert answer.method == "sendmessage"  # the text, first
            assert "print('secret code')" in answer.text
            await assert_real_voice_note(note)
            assert fake_telegram.voice_notes(ALICE) == [note]  # the text message before got none
            spoken = [r.input for r in speech.requests]
            assert spoken == ["Here is how.\nRead for more, or the manual. Good luck!"]
            assert "secret" not in spoken[0] and "http" not in spoken[0] and "*" not in spoken[0]
            asked = speech.requests[0]
            assert asked.voice == "nova" and asked.response_format == "opus"
            rows = gw.store.all("SELECT turn_id, kind, status FROM outbound ORDER BY id")
            assert [tuple(r) for r in rows][-2:] == [
                ("t2", "reply", "sent"),
                ("t2:voice", "voice", "sent"),
            ]


async def test_voice_off_in_a_chat_keeps_answers_text_and_survives_a_restart(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with FakeTranscription() as stt, FakeSpeech() as speech:
        async with running(home, fake_llm, fake_telegram, voice_yaml(speech, stt)):
            fake_telegram.inject_message(ALICE, "/voice off")
            said = await fake_telegram.wait_for_sent(ALICE)
            assert said.text == "Voice replies are off in this chat: answers come as text only."
        async with running(home, fake_llm, fake_telegram, voice_yaml(speech, stt)):
            send_voice_note(fake_telegram, 60)
            await fake_telegram.wait_for_sent(ALICE, count=2)
            fake_telegram.inject_message(ALICE, "/voice on")
            await fake_telegram.wait_for_sent(ALICE, count=3)
            fake_telegram.inject_message(ALICE, "and now?")
            await fake_telegram.wait_for_sent(ALICE, count=5)
            sent = fake_telegram.sent_messages(ALICE)
            assert [m.method for m in sent] == ["sendmessage"] * 4 + ["sendvoice"]
            assert sent[2].text.startswith("Voice replies are on in this chat")
            assert [r.input for r in speech.requests] == ["echo: and now? [users=2]."]


async def test_always_speaks_every_answer_with_espeak_and_no_service(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with FakeTranscription() as stt:
        async with running(home, fake_llm, fake_telegram, voice_yaml(None, stt, replies="always")):
            fake_telegram.inject_message(ALICE, "say something")
            await fake_telegram.wait_for_sent(ALICE, count=2)
            text, note = fake_telegram.sent_messages(ALICE)
            assert text.text == "echo: say something [users=1]"
            await assert_real_voice_note(note)


async def test_a_speech_failure_loses_no_text_and_is_said_once(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with FakeTranscription() as stt, FakeSpeech() as speech:
        speech.fail("speech", Fault(503), Fault(503))
        always = voice_yaml(speech, stt, replies="always")
        async with running(home, fake_llm, fake_telegram, always) as gw:
            fake_llm.script(Reply("word " * 1000))  # two chunks of text
            fake_telegram.inject_message(ALICE, "a long answer please")
            await fake_telegram.wait_for_sent(ALICE, count=3)
            texts = fake_telegram.sent_texts(ALICE)
            assert texts[0].startswith("word word") and texts[1].startswith("word")
            assert "".join(texts[:2]).split() == ["word"] * 1000  # all of the text went out, first
            assert texts[2] == (
                "I couldn't read this answer aloud (the speech service answered "
                "HTTP 503); the text above is all of it."
            )
            assert len(speech.calls_to("speech")) == 2  # tried once more, then gave up
            fake_telegram.inject_message(ALICE, "again")
            await fake_telegram.wait_for_sent(ALICE, count=5)  # the service is back: a voice note
            sent = fake_telegram.sent_messages(ALICE)
            assert [m.method for m in sent] == ["sendmessage"] * 4 + ["sendvoice"]
            assert sum(m.text.startswith("I couldn't read") for m in sent) == 1

            def voice_rows() -> list[tuple[Any, ...]]:
                found = gw.store.all(
                    "SELECT turn_id, status, last_error FROM outbound"
                    " WHERE kind = 'voice' ORDER BY id"
                )
                return [tuple(r) for r in found]

            # Telegram has the note; the outbox records it once the answer is back
            async with asyncio.timeout(30):
                while voice_rows()[-1][1] == "pending":
                    await asyncio.sleep(0.01)
            assert voice_rows() == [
                ("t1:voice", "failed", "the speech service answered HTTP 503"),
                ("t2:voice", "sent", None),
            ]


async def test_a_user_who_refuses_voice_messages_gets_an_audio_file(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with FakeTranscription() as stt, FakeSpeech() as speech:
        fake_telegram.forbid_voice(ALICE)
        always = voice_yaml(speech, stt, replies="always")
        async with running(home, fake_llm, fake_telegram, always):
            fake_telegram.inject_message(ALICE, "hi")
            await fake_telegram.wait_for_sent(ALICE, count=2)
            audio = fake_telegram.sent_messages(ALICE)[1]
            assert audio.method == "sendaudio" and audio.document is not None
            assert audio.document["data"].startswith(b"OggS")
            tried = [c.name for c in fake_telegram.calls if c.name in ("sendvoice", "sendaudio")]
            assert tried == ["sendvoice", "sendaudio"]


async def test_the_next_message_is_answered_while_the_voice_note_is_being_made(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Speech takes seconds: it is made in the background, so the conversation's next turn starts
    at once; what the user sees stays in order (the first answer's voice note before the second)."""
    async with FakeTranscription() as stt, FakeSpeech() as speech:
        speech.fail("speech", Delay(2.0))
        always = voice_yaml(speech, stt, replies="always")
        async with running(home, fake_llm, fake_telegram, always):
            fake_telegram.inject_message(ALICE, "one")
            await fake_telegram.wait_for_sent(ALICE)
            fake_telegram.inject_message(ALICE, "two")
            await fake_llm.wait_until(lambda: len(fake_llm.anthropic_requests()) == 2)
            assert speech.requests == []  # the first note is still being spoken
            await fake_telegram.wait_for_sent(ALICE, count=4)
            sent = fake_telegram.sent_messages(ALICE)
            assert [(m.method, m.text) for m in sent] == [
                ("sendmessage", "echo: one [users=1]"),
                ("sendvoice", ""),
                ("sendmessage", "echo: two [users=2]"),
                ("sendvoice", ""),
            ]


async def test_in_a_group_only_an_admin_switches_voice_replies(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    async with FakeTranscription() as stt, FakeSpeech() as speech:
        extra = voice_yaml(speech, stt) + f"access:\n  admins: ['telegram:{ALICE}']\n"
        async with running(home, fake_llm, fake_telegram, extra) as gw:
            fake_telegram.inject_message(
                GROUP,
                "/voice on",
                chat_type="supergroup",
                user_id=BOB,
                username="bob",
                first_name="Bob",
            )
            refused = await fake_telegram.wait_for_sent(GROUP)
            assert refused.text == (
                "Only an admin can switch voice replies for everyone in this group."
            )
            assert gw.store.chat_voice("telegram", str(GROUP)) is None
            fake_telegram.inject_message(GROUP, "/voice on", chat_type="supergroup")
            said = await fake_telegram.wait_for_sent(GROUP, count=2)
            assert said.text.startswith("Voice replies are on in this chat")
            assert gw.store.chat_voice("telegram", str(GROUP)) == "on"
