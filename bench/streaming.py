"""The streaming figure of bench/overhead.py: how soon the first words a model writes are visible on
the platform, and how many platform calls an answer costs, with `gateway run` (a subprocess)
streaming live previews.

The fake model streams each answer in `--pieces` pieces, `--every` seconds apart (a model writing at
a human pace); the first piece's write is the first token. Measured on this process's monotonic
clock, per answer:
  web chat   first token written → the first `draft` frame arrives on the browser's WebSocket
  Telegram   first token written → the fake Bot API gets the first sendMessageDraft (private chat)
minus the time the preview had to wait for the chat's pacing (none here: each answer goes to a chat
that has not had a message for longer than the pacing interval). Goal: p99 ≤ 50 ms. Calls per
answer: web frames (draft, deltas, the reply), Telegram requests (drafts and the final sendMessage).

Run:  PYTHONPATH=. .venv/bin/python bench/streaming.py [--answers 100] [--pieces 12] [--every 0.1]
      (bench/overhead.py runs it after its own figures; --streaming 0 there skips it)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.overhead import BENCH_WEB_TOKEN, start_gateway
from tests.fakes.llm import FakeLLM, Paced, Reply
from tests.fakes.telegram import TOKEN, FakeTelegram

ANSWER = (
    "Streaming lets people read the answer while it is written: the first words arrive at once, "
    "the rest as the model writes them, and the final message is the formatted answer itself. "
)


@dataclass
class Figures:
    surface: str
    first: list[float] = field(default_factory=list)  # first token → first visible text, seconds
    calls: list[int] = field(default_factory=list)  # platform calls per answer
    answer_s: list[float] = field(default_factory=list)  # first token → the answer delivered

    def line(self) -> str:
        return (
            f"{self.surface:<10}{_pct(self.first, 0.5):>9.1f}{_pct(self.first, 0.99):>8.1f}"
            f"{max(self.first) * 1000:>8.1f}{sum(self.calls) / len(self.calls):>13.1f}"
            f"{_pct(self.answer_s, 0.5):>15.0f}"
        )


class FirstTokens:
    """The model side: each answer streamed slowly;
    notes when each chat's first piece was written."""

    def __init__(self, llm: FakeLLM, pieces: int, every: float) -> None:
        self.llm, self.pieces, self.every = llm, pieces, every
        self.first: list[float] = []

    def answer(self) -> None:
        text = (ANSWER * 3)[: 60 * self.pieces]
        self.llm.stream_chunk_chars = max(1, len(text) // self.pieces)

        async def gate(index: int) -> None:
            if index == 0:  # the first piece is written right after this: the first token
                self.first.append(time.monotonic())

        self.llm.script(Paced(Reply(text), gate=gate, every=self.every))


async def web(home: Path, args: argparse.Namespace) -> Figures:
    figures = Figures("web chat")
    async with FakeLLM(validate=False) as llm:
        tokens = FirstTokens(llm, args.pieces, args.every)
        server = await start_gateway(home, llm, streaming="edit")
        try:
            async with aiohttp.ClientSession() as http:
                for n in range(args.answers + 5):
                    url = f"ws://127.0.0.1:{server.port}/ws?client=s{n:04d}&token={BENCH_WEB_TOKEN}"
                    async with http.ws_connect(url) as ws:
                        tokens.answer()
                        await ws.send_str(json.dumps({"text": f"question {n}"}))
                        seen, frames, answered = None, 0, 0.0
                        async for msg in ws:
                            frame = json.loads(msg.data)
                            if frame["type"] in ("draft", "delta", "message"):
                                frames += 1
                                seen = seen or time.monotonic()
                            if frame["type"] == "message":
                                answered = time.monotonic()
                                break
                    if n >= 5:  # warm-up: connections, caches, the model client
                        figures.first.append(seen - tokens.first[-1])  # type: ignore[operator]
                        figures.calls.append(frames)
                        figures.answer_s.append(answered - tokens.first[-1])
        finally:
            server.stop()
    return figures


async def telegram(home: Path, args: argparse.Namespace) -> Figures:
    figures = Figures("telegram")
    async with FakeLLM(validate=False) as llm, FakeTelegram() as tg:
        tokens = FirstTokens(llm, args.pieces, args.every)
        extra = (
            f"telegram:\n  token: '{TOKEN}'\n  api_server: {tg.base_url}\n  polling_timeout: 1\n"
            f"  allowed_users: [{', '.join(str(7000 + n) for n in range(args.answers + 5))}]\n"
        )
        # auto: drafts in private chats
        server = await start_gateway(home, llm, extra=extra, streaming="auto")
        try:
            for n in range(args.answers + 5):
                chat = 7000 + n  # a fresh chat each time: no pacing wait before its first draft
                tokens.answer()
                tg.inject_message(chat, f"question {n}", user_id=chat, username=f"u{chat}")
                sent = await tg.wait_for_sent(chat, timeout=60)
                if n >= 5:
                    drafts = [d.at for d in tg.drafts if d.chat_id == chat]
                    figures.first.append(drafts[0] - tokens.first[-1])
                    figures.calls.append(len(drafts) + len(tg.sent_messages(chat)))
                    figures.answer_s.append(
                        tg.calls_to(
                            lambda c, chat=chat: (
                                c.name == "sendmessage"  # type: ignore[misc]
                                and str(c.body.get("chat_id")) == str(chat)
                            )
                        )[-1].at
                        - tokens.first[-1]
                    )
                assert sent.text  # the answer came
            assert tg.flood_violations == []
        finally:
            server.stop()
    return figures


def report(results: Sequence[Figures], args: argparse.Namespace) -> str:
    lines = [
        (
            f"streaming: {args.answers} answers per surface, each written in {args.pieces} pieces "
            f"{args.every * 1000:.0f} ms apart ({args.pieces * args.every:.1f} s an answer)"
        ),
        f"{'first token → first visible text, ms':<10}",
        f"{'':<10}{'p50':>9}{'p99':>8}{'max':>8}{'calls/answer':>13}{'answer p50 ms':>15}",
    ]
    return "\n".join(lines + [r.line() for r in results])


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def measure(root: Path, args: argparse.Namespace) -> str:
    results = []
    for surface in (web, telegram):
        # its own parent: the notify socket lives there
        home = root / f"stream-{surface.__name__}" / "home"
        home.mkdir(parents=True, exist_ok=True)
        results.append(await surface(home, args))
    return report(results, args)


def arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    parser.add_argument(
        f"--{prefix}answers",
        dest="answers",
        type=int,
        default=100,
        help="answers per surface (0: skip the streaming figure)",
    )
    parser.add_argument(f"--{prefix}pieces", dest="pieces", type=int, default=12)
    parser.add_argument(
        f"--{prefix}every",
        dest="every",
        type=float,
        default=0.1,
        help="seconds between the model's pieces",
    )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gw-streaming-") as tmp:
        print(await measure(Path(tmp), args))


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments(cli)
    asyncio.run(main(cli.parse_args()))
