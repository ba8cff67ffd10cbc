"""gateway/voice on its own: what of an answer is spoken, the bounded child processes, the OGG/Opus
encoding (checked with ffprobe), the OpenAI-compatible speech service's failures (against the fake
service), and what `gateway config check` and `gateway doctor` say when a provider's programs are
missing."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.config.settings import load_config
from gateway.config.voice import TtsConfig, VoiceConfig
from gateway.errors import ConfigError, SpeechError
from gateway.ops.doctor import Doctor
from gateway.store.rows import utcnow
from gateway.voice import process
from gateway.voice.encode import encode_voice, waveform
from gateway.voice.process import MEMORY_BYTES, run_tool
from gateway.voice.speaker import Speaker, missing_tools
from gateway.voice.speech import spoken_text
from gateway.voice.tts import OpenAISpeech
from tests.adapters.test_telegram_voice import probe
from tests.fakes.base import Delay, Fault
from tests.fakes.llm import FakeLLM
from tests.fakes.speech import FakeSpeech
from tests.helpers import write_config
from tests.test_people_cli import _say as say
from tests.test_people_cli import _users as users
from tests.test_people_cli import gateway


# ----------------------------------------------------------------------------------- what is spoken
def test_code_blocks_urls_pictures_and_marks_are_not_spoken() -> None:
    answer = (
        "## Steps\n\n1. Open **Settings** → _Privacy_.\n"
        "2. Run `ls -la` and see [the guide](https://x.io/g).\n\n"
        "```bash\nrm -rf /tmp/cache\n```\n\n    indented code too\n\n"
        "![chart](https://x.io/c.png)\n\n> Quoted advice, <b>bold</b> html.\n\n"
        "| tool | cost |\n|---|---|\n| curl | free |\n\n"
        "Links: https://example.com/a?b=1 and www.example.org/x, mail me@example.com; "
        "snake_case_name."
    )
    said = spoken_text(answer, 1000)
    assert said == (
        "Steps.\nOpen Settings → Privacy.\nRun ls -la and see the guide.\n"
        "Quoted advice, bold html.\ntool, cost.\ncurl, free.\n"
        "Links: and mail me@example.com; snake case name."
    )
    for gone in ("rm -rf", "indented", "http", "www.", "chart", "**", "`", "#", "|", "<b>"):
        assert gone not in said


def test_long_inline_code_is_left_out_and_an_all_code_answer_says_nothing() -> None:
    long_code = "Use `docker run --rm -it -v $PWD:/work image:latest bash` now."
    assert spoken_text(long_code, 100) == "Use now."
    assert spoken_text("```python\nprint(1)\n```", 100) == ""
    assert spoken_text("", 100) == ""


def test_past_max_chars_the_rest_is_not_spoken_and_the_cut_is_at_a_sentence_or_word() -> None:
    text = "First sentence here. Second one is longer than the first. Third never fits at all."
    assert spoken_text(text, 60) == "First sentence here. Second one is longer than the first."
    assert spoken_text("one two three four five six seven", 20) == "one two three four"
    assert len(spoken_text("word " * 10_000, 1500)) <= 1500


def test_hostile_markdown_does_not_break_it() -> None:
    deep = "> " * 5000 + "deep" + "\n" + "[" * 10_000 + "x" + "]" * 10_000
    said = spoken_text(deep, 200)
    assert len(said) <= 200


# ---------------------------------------------------------------------------------- child processes
async def test_a_missing_program_a_stuck_one_and_a_flood_are_each_a_speech_error() -> None:
    missing = r"^no-such-tts is not installed \(apt-get install no-such-tts\)$"
    with pytest.raises(SpeechError, match=missing):
        await run_tool(["no-such-tts"], timeout_s=5, max_output=10)
    with pytest.raises(SpeechError, match=r"^sleep took longer than 0\.2 s$"):
        await run_tool(["sleep", "30"], timeout_s=0.2, max_output=10)
    with pytest.raises(SpeechError, match=r"^yes wrote more than 100,000 bytes$"):
        await run_tool(["yes"], timeout_s=30, max_output=100_000)
    with pytest.raises(SpeechError, match=r"^false failed \(exit status 1\)$"):
        await run_tool(["false"], timeout_s=5, max_output=10)
    # more output than is read, from a shell whose own child holds the pipe open: the group is
    # killed and the pipes read to their end, or asyncio's wait for the exit never returns
    flood = ["sh", "-c", "head -c 1000000 /dev/zero; sleep 600"]
    with pytest.raises(SpeechError, match=r"^sh wrote more than 1,000 bytes$"):
        await run_tool(flood, timeout_s=600, max_output=1000)


@pytest.mark.parametrize("prlimit", [True, False])
async def test_the_child_gets_a_file_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prlimit: bool
) -> None:
    """Through util-linux's prlimit, and (on a machine without it) set on the started child."""
    if not prlimit:
        monkeypatch.setattr(process, "_prlimit", lambda: None)
    target = tmp_path / "big"
    dd = ["dd", f"of={target}", "status=none"]  # it writes stdin only after its limits are set
    with pytest.raises(SpeechError, match=r"^dd failed"):  # SIGXFSZ past 4 KB
        await run_tool(dd, stdin=bytes(100_000), timeout_s=5, max_output=10, max_file_bytes=4096)
    assert target.stat().st_size == 4096
    await run_tool(dd, stdin=bytes(4000), timeout_s=5, max_output=10, max_file_bytes=4096)
    assert target.stat().st_size == 4000


# ----------------------------------------------------------------------------------------- encoding
async def espeak_wav(text: str) -> bytes:
    return await run_tool(
        ["espeak-ng", "--stdout", "-b", "1"],
        stdin=text.encode(),
        timeout_s=30,
        max_output=50_000_000,
    )


async def test_speech_becomes_an_ogg_opus_note_with_its_duration_and_a_waveform() -> None:
    wav = await espeak_wav("Good morning. The tomatoes want water.")
    note = await encode_voice(wav, timeout_s=60, max_bytes=5_000_000)
    assert note.data.startswith(b"OggS") and b"OpusHead" in note.data[:200]
    info = await probe(note.data)
    assert info["streams"][0]["codec_name"] == "opus" and info["streams"][0]["channels"] == 1
    assert abs(float(info["format"]["duration"]) - note.duration_s) < 0.1 and note.duration_s > 1
    assert len(note.waveform) == int(note.duration_s * 10) and max(note.waveform) == 255


async def test_a_note_is_cut_at_max_seconds_and_garbage_or_silence_is_refused() -> None:
    wav = await espeak_wav("one two three four five six seven eight nine ten eleven twelve")
    cut = await encode_voice(wav, timeout_s=60, max_bytes=5_000_000, max_seconds=1.0)
    assert 0.9 <= cut.duration_s <= 1.05
    assert float((await probe(cut.data))["format"]["duration"]) <= 1.1
    with pytest.raises(SpeechError, match="ffmpeg failed"):
        await encode_voice(b"this is not audio" * 100, timeout_s=60, max_bytes=5_000_000)
    with pytest.raises(SpeechError, match="came back empty"):
        await encode_voice(b"", timeout_s=60, max_bytes=5_000_000)
    with pytest.raises(SpeechError, match="larger than 2,000 bytes"):
        await encode_voice(wav, timeout_s=60, max_bytes=2000)


def test_the_waveform_has_at_most_256_points_none_under_100_ms() -> None:
    import array

    samples = array.array("h", [0, 1000, -32000, 5] * 250_000)  # 1,000 s at 1 kHz
    assert len(waveform(samples, 1000.0)) == 256
    assert len(waveform(array.array("h", [0, 100] * 150), 0.3)) == 3
    assert waveform(array.array("h", [0] * 100), 0.1) == b"\x00"


# ------------------------------------------------------------------------------- the speech service
async def test_the_service_s_refusals_are_said_in_words_and_a_blip_is_tried_once_more() -> None:
    async with FakeSpeech(api_key="tts-key") as fake:
        config = TtsConfig(provider="openai", base_url=fake.v1_url, timeout_s=5)
        wrong = OpenAISpeech(config, "wrong-key")
        refused = r"^the speech service refused the request \(HTTP 401, the key\)$"
        with pytest.raises(SpeechError, match=refused):
            await wrong.audio("hi")
        await wrong.close()
        speech = OpenAISpeech(replace(config, model=""), "tts-key")
        with pytest.raises(SpeechError, match="HTTP 400: 'model' is a required property"):
            await speech.audio("hi")
        await speech.close()
        speech = OpenAISpeech(config, "tts-key")
        fake.fail("speech", Fault(502))
        assert (await speech.audio("hello")).startswith(b"OggS")  # one retry
        fake.fail("speech", Delay(10))
        slow = OpenAISpeech(replace(config, timeout_s=0.5), "tts-key")
        with pytest.raises(SpeechError, match=r"^the speech service did not answer within 0\.5 s$"):
            await slow.audio("x")
        await slow.close()
        fake.answer = b"\0" * 200_000
        small = OpenAISpeech(replace(config, max_bytes=100_000), "tts-key")
        with pytest.raises(SpeechError, match="sent more than 100,000 bytes"):
            await small.audio("x")
        await small.close()
        await speech.close()
        assert [r.input for r in fake.requests] == ["hello", "x"]  # the faults took none


async def test_openai_input_is_held_to_4096_characters() -> None:
    async with FakeSpeech(api_key=None) as fake:
        tts = TtsConfig(provider="openai", base_url=fake.v1_url)
        speaker = Speaker(VoiceConfig(max_chars=10_000), tts, None)
        words = speaker.words("word " * 5000)
        assert len(words) <= 4096
        note = await speaker.speak(words[:200])
        assert note.data.startswith(b"OggS")
        await speaker.close()


# ----------------------------------------------------------------------------------- config, doctor
def test_voice_and_models_keys_are_checked_with_file_and_line(home: Path) -> None:
    write_config(home, extra="voice:\n  replies: sometimes\n  tts:\n    provider: festival\n")
    with pytest.raises(ConfigError) as found:
        load_config(home, env={})
    said = str(found.value)
    assert ":2: voice.replies: expected one of auto, always, never; got 'sometimes'" in said
    assert ":4: voice.tts.provider: expected one of openai, espeak; got 'festival'" in said
    write_config(
        home,
        extra="models:\n  fast:\n    provider: openai\n    name: m\n  'no spaces':\n"
        "    provider: openai\n    name: m\n",
    )
    with pytest.raises(ConfigError, match=r":5: models.no spaces: 'no spaces' cannot name a model"):
        load_config(home, env={})
    write_config(home, extra="models:\n  default:\n    provider: openai\n    name: m\n")
    with pytest.raises(ConfigError, match=r":2: models.default: .*`default` means the main"):
        load_config(home, env={})
    write_config(home, extra="models:\n  fast:\n    provider: openai\n    nmae: m\n")
    with pytest.raises(ConfigError, match=r":4: models.fast.nmae: unknown key"):
        load_config(home, env={})


@pytest.fixture
def no_espeak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH where ffmpeg is but espeak-ng is not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ffmpeg").symlink_to("/usr/bin/ffmpeg")
    monkeypatch.setenv("PATH", str(bin_dir))


def test_config_check_and_doctor_say_which_program_is_missing(
    home: Path, no_espeak: None, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(
        home,
        extra="web:\n  enabled: false\nvoice:\n  replies: always\n  tts:\n    provider: espeak\n",
    )
    assert missing_tools(TtsConfig(provider="espeak")) == ["espeak-ng"]
    assert main(["--home", str(home), "config", "check"]) == 78
    said = capsys.readouterr().err
    assert said == (
        f"{home / 'config.yaml'}:6: voice.tts.provider: provider espeak needs "
        "espeak-ng, which is not installed (apt-get install espeak-ng)\n"
    )
    checks = asyncio.run(Doctor(home, {}).run())
    voice = [c.line() for c in checks if c.name == "voice"]
    assert voice == [
        (
            "FAIL voice     voice.tts: provider espeak needs espeak-ng, which is not "
            "installed (apt-get install espeak-ng) — fix: apt-get install espeak-ng"
        )
    ]


def test_doctor_says_ok_with_the_programs_there(home: Path) -> None:
    assert os.path.exists("/usr/bin/espeak-ng") and os.path.exists("/usr/bin/ffmpeg")
    write_config(home, extra="web:\n  enabled: false\nvoice:\n  tts:\n    provider: espeak\n")
    checks = asyncio.run(Doctor(home, {}).run())
    assert [c.line() for c in checks if c.name == "voice"] == [
        "ok   voice     speech from espeak-ng, encoded by ffmpeg (voice.replies: auto)"
    ]
    assert main(["--home", str(home), "config", "check"]) == 0


async def test_forgetting_a_person_takes_their_voice_setting_and_model_choice(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with gateway(home, fake_llm) as (gw, adapters):
        tg = adapters["telegram"]
        await say(gw, tg, "hello", chat_id="1", user_id="1")
        await say(gw, tg, "hello", chat_id="2", user_id="2")
        for chat in ("1", "2"):
            gw.store.set_chat_voice("telegram", chat, "on", now=utcnow())
            gw.store.set_model_choice(f"telegram:dm:{chat}", "fast", now=utcnow())
    code, _ = users(home, "forget", "telegram:1", "--yes")
    assert code == 0
    async with gateway(home, fake_llm) as (gw, _):
        assert gw.store.chat_voice("telegram", "1") is None
        assert gw.store.model_choice("telegram:dm:1") is None
        assert gw.store.chat_voice("telegram", "2") == "on"  # someone else's stay
        assert gw.store.model_choice("telegram:dm:2") == "fast"


async def test_the_limits_hold_from_the_child_s_first_instruction() -> None:
    """A child that does its work at once (before any input) already runs under its limits: they
    are set before it starts (util-linux's prlimit execs it), not from here after it has started,
    which a fast child beat 16 times in 20."""
    for _ in range(5):
        out = await run_tool(
            ["sh", "-c", "ulimit -v; ulimit -t; ulimit -f"],
            timeout_s=5,
            max_output=1000,
            max_file_bytes=5000,
        )
        assert out.decode().split() == [str(MEMORY_BYTES // 1024), "6", str(5000 // 512)]


def test_control_characters_and_espeak_s_phoneme_brackets_are_not_spoken() -> None:
    """Terminal colours, bells, bidi overrides and zero-width characters are not words (and the
    transcript a web page shows must not carry them); espeak-ng reads `[[…]]` as phoneme codes,
    so a wiki link `[[Main Page]]` came out as "see for more"."""
    answer = (
        "A \x07bell, \x1b[31mred\x1b[0m text, \u202eevil\u202c and zero\u200bwidth; "
        "see [[Main Page]] for more.\nTabs\there."
    )
    said = spoken_text(answer, 500)
    assert said == "A bell, red text, evil and zerowidth; see Main Page for more. Tabs here."
