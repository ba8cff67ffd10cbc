"""Voice replies: how long a voice note takes to make,
and how much CPU, for answers of several lengths.

Runs the gateway's own pipeline (gateway/voice: the spoken words, espeak-ng, ffmpeg's OGG/Opus) with
the local espeak-ng, so it needs no service: `PYTHONPATH=. python bench/voice.py [--runs 3]`.
Prints, per answer length: the seconds of speech, wall time, the children's CPU time and the note's
size.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time

from gateway.config.voice import TtsConfig, VoiceConfig
from gateway.voice.speaker import Speaker

SENTENCE = "The tomatoes want water every morning, and the basil every other day. "


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def measure(chars: int, runs: int) -> tuple[float, float, float, int]:
    speaker = Speaker(VoiceConfig(max_chars=chars), TtsConfig(provider="espeak"), None)
    words = speaker.words(SENTENCE * (chars // len(SENTENCE) + 1))
    walls, cpus, note = [], [], None
    for _ in range(runs):
        cpu, wall = children_cpu(), time.perf_counter()
        note = await speaker.speak(words)
        walls.append(time.perf_counter() - wall)
        cpus.append(children_cpu() - cpu)
    assert note is not None
    return note.duration_s, min(walls), min(cpus), len(note.data)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per length; the best is shown")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; best of {args.runs}")
    print(f"{'chars':>6} {'speech s':>9} {'wall s':>7} {'cpu s':>6} {'note KB':>8}")
    for chars in (200, 500, 1500):
        speech, wall, cpu, size = await measure(chars, args.runs)
        print(f"{chars:>6} {speech:>9.1f} {wall:>7.2f} {cpu:>6.2f} {size / 1024:>8.0f}")


if __name__ == "__main__":
    asyncio.run(main())
