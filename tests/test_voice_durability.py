"""A voice reply is as durable as its text: the gateway "dies" before each of its SQLite writes and
right after each send the platform took (tests/chaos/crashpoints.py: every moment a kill -9 could
pick), then boots again on the same home. Whatever the moment, the user gets the whole text, then
exactly one voice note after it; only the send in flight at the death goes out again on Telegram
(its at-least-once boundary, the same as for a text chunk), and Discord's nonce keeps even that
single."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.events import OutboundAudio, OutboundMessage
from tests.chaos import crashpoints
from tests.chaos.crashpoints import DyingAdapter, Scenario, run_with_crash
from tests.helpers import write_config

SPOKEN = "[voice] "
SAID = "re: tell me.\nline 000 of a long answer line 001 of a long answer line 002 of a"


class SpeakingAdapter(DyingAdapter):
    """The crash-point platform, able to take voice notes: one is recorded like a message, under
    its row's key."""

    async def send_audio(self, audio: OutboundAudio) -> str:
        assert audio.data.startswith(b"OggS") and audio.duration_s > 0
        note = OutboundMessage(
            chat=audio.chat, text=SPOKEN + audio.transcript, plain="", key=audio.key
        )
        return await self.send(note)


def long_answer(text: str, users: int) -> str:
    return f"re: {text}\n\n" + "\n".join(f"line {n:03d} of a long answer" for n in range(180))


SCENARIO = Scenario(
    "an answer in several chunks, then its voice note",
    before=("hi",),
    text="tell me",
    answer=long_answer,
)


def home_for(tmp_path: Path, name: str, platform: str) -> Path:
    home = tmp_path / name
    home.mkdir()
    write_config(
        home,
        extra=f"web:\n  enabled: false\n{platform}:\n  token: '123:abc'\n"
        "  allowed_users: ['42']\nvoice:\n  replies: always\n  max_chars: 80\n"
        "  tts:\n    provider: espeak\n",
    )
    return home


@pytest.mark.parametrize("platform", ["telegram", "discord"])
async def test_a_crash_anywhere_loses_and_doubles_no_voice_note(
    tmp_path: Path, platform: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crashpoints, "DyingAdapter", SpeakingAdapter)
    clean, baseline, _ = await run_with_crash(
        home_for(tmp_path, "clean", platform), platform, SCENARIO
    )
    expected = clean.texts()[len(clean.sent) - baseline.sends :]
    chunks = 2 if platform == "telegram" else 3
    assert [t.startswith(SPOKEN) for t in expected] == [False] * chunks + [True]  # text, then voice
    assert expected[-1] == SPOKEN + SAID
    failures = []
    points = [{"at_write": n} for n in range(1, baseline.writes + 1)]
    points += [{"after_send": n} for n in range(1, baseline.sends + 1)]
    for point in points:
        home = home_for(tmp_path, "-".join(map(str, *point.items())), platform)
        record, life, _ = await run_with_crash(home, platform, SCENARIO, **point)
        got = record.texts()[len(clean.sent) - baseline.sends :]
        k = life.died_after_send if platform != "discord" else 0
        allowed = expected[:k] + expected[k - 1 :] if k else expected
        if got != allowed:
            failures.append(f"died at {point}: user saw {[t[:30] for t in got]}")
    assert not failures, "\n".join(failures)
    assert baseline.sends == chunks + 1 and baseline.writes >= 3
