"""Benchmark the provider prefix cache: a 20-turn Telegram conversation over the Anthropic wire
against the fake LLM's cache emulation, with the gateway pipeline restarted (new object graph, same
home and database) after turn 10. Two turns use a tool (a memory write, a search), so some turns
make two model calls. Every third turn sends a photo (a different picture each time, prepared and
stored like any attachment), so the history carries image blocks that must come back byte for byte
on every later request, also after the restart.

Run:  python bench/cache_efficiency.py [--turns 20] [--restart-after 10] [--photo-every 3] [-v]
Prints cached input tokens, total input tokens, the ideal bound for "system_and_3" and cached /
bound (goal ≥ 0.99), and whether the system prompt was byte-identical in every request.

The ideal bound: with breakpoints on the system prompt and the last 3 messages, request n can at
best read from cache everything request n-1 sent (its last breakpoint is on its final message, and a
conversation only grows), provided that prefix reaches the cache's minimum size. The first request
is cold.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gateway.config.settings import load_config
from gateway.events import Attachment, ChatRef, Inbound
from gateway.ops.wiring import Gateway, build_gateway

# the repo root: tests/ holds the fakes
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.llm import FakeLLM, ToolCall, Usage
from tests.helpers import RecordingAdapter, write_config

CACHE_MIN_TOKENS = 1024  # Anthropic's minimum cacheable prefix for Sonnet-class models
GOAL = 0.99
TOPICS = (
    "the garden",
    "a trip to Porto",
    "my sourdough starter",
    "the home server",
    "a birthday present",
    "learning Portuguese",
    "the quarterly budget",
    "a running plan",
    "the bike repair",
    "a reading list",
)


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass(frozen=True)
class Figures:
    cached: int
    total: int
    written: int
    bound: int
    requests: int
    same_system: bool
    images: int = 0

    @property
    def ratio(self) -> float:
        return self.cached / self.bound if self.bound else 1.0


def messages(turns: int) -> Iterator[str]:
    for n in range(1, turns + 1):
        topic = TOPICS[(n - 1) % len(TOPICS)]
        yield (
            f"Message {n}: let's talk about {topic}. I'd like a few practical suggestions, and "
            "please keep in mind what I told you earlier in this conversation."
        )


def script_for(n: int) -> list[Any]:
    """Turn 4 saves to memory, turn 14 searches past sessions: each costs one extra model call."""
    if n == 4:
        return [
            ToolCall(
                "memory",
                {"action": "add", "target": "user", "content": "Grows tomatoes on a balcony."},
            )
        ]
    if n == 14:
        return [ToolCall("session_search", {"query": "tomatoes"})]
    return []


class PhotoAdapter(RecordingAdapter):
    """The Telegram side of the bench: records replies
    and serves the photos users send (a MediaSource)."""

    def __init__(self) -> None:
        super().__init__("telegram")
        self.files: dict[str, bytes] = {}

    async def media(self, attachment: Attachment) -> AsyncIterator[bytes]:
        data = self.files[attachment.ref or ""]
        for offset in range(0, len(data), 65536):
            yield data[offset : offset + 65536]


def photo(n: int) -> bytes:
    """A 1600×1200 picture (scaled to 1313×985 by the gateway), different for every turn."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (1600, 1200), ((n * 37) % 256, (n * 91) % 256, (n * 53) % 256))
    draw = ImageDraw.Draw(image)
    for x in range(0, 1600, 40 + n):
        draw.line([(x, 0), (1600 - x, 1200)], fill=(255, 255, 255), width=3)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def inbound_for(
    n: int, text: str, now: datetime, adapter: PhotoAdapter, photo_every: int
) -> Inbound:
    files: tuple[Attachment, ...] = ()
    if photo_every and n % photo_every == 0:
        adapter.files[f"photo-{n}"] = data = photo(n)
        files = (Attachment("photo", mime_type="image/jpeg", size=len(data), ref=f"photo-{n}"),)
    return Inbound(
        chat=ChatRef("telegram", "dm", "42", None),
        user_id="42",
        text=text,
        message_id=str(n),
        received_at=now,
        user_name="Dana",
        attachments=files,
    )


def build(home: Path, clock: Clock, adapter: RecordingAdapter) -> Gateway:
    gw = build_gateway(
        load_config(home), env={}, adapters=[adapter], clock=clock, probe_ollama=False
    )
    adapter.submit = gw.sessions.submit
    return gw


async def close(gw: Gateway) -> None:
    await gw.llm.close()
    gw.store.close()


async def run(turns: int, restart_after: int, verbose: bool, photo_every: int = 3) -> Figures:
    fake = FakeLLM(cache=True, cache_min_tokens=CACHE_MIN_TOKENS)
    await fake.start()
    with tempfile.TemporaryDirectory(prefix="cache-bench-") as tmp:
        home = Path(tmp)
        write_config(
            home,
            base_url=fake.base_url,
            extra=textwrap.dedent("""\
            telegram:
              token: bench-token
              allowed_users: ["42"]
            sessions:
              timezone: UTC
            """),
        )
        clock = Clock(datetime(2026, 6, 1, 10, 0, tzinfo=UTC))
        adapter = PhotoAdapter()
        gw = build(home, clock, adapter)
        try:
            for n, text in enumerate(messages(turns), start=1):
                fake.script(*script_for(n))
                clock.now += timedelta(minutes=1)
                await gw.sessions.submit(inbound_for(n, text, clock.now, adapter, photo_every))
                await gw.sessions.wait_idle()
                if n == restart_after:
                    await close(gw)
                    gw = build(home, clock, adapter)
        finally:
            await close(gw)
    await fake.stop()
    if len(adapter.sent) != turns:
        raise SystemExit(
            f"expected {turns} replies, got {len(adapter.sent)}: {[m.text for m in adapter.sent]}"
        )
    return figures(fake.anthropic_requests(), fake.usages, verbose)


def figures(bodies: list[dict[str, Any]], usages: list[Usage], verbose: bool) -> Figures:
    systems = {b["system"][0]["text"] for b in bodies}
    bound = 0
    for i, usage in enumerate(usages):
        ideal = usages[i - 1].prompt_total if i else 0
        ideal = ideal if ideal >= CACHE_MIN_TOKENS else 0
        bound += ideal
        if verbose:
            print(
                f"request {i + 1:2}: prompt {usage.prompt_total:6}  read {usage.cache_read:6}  "
                f"write {usage.cache_creation:5}  uncached {usage.input_tokens:5}  ideal read "
                f"{ideal:6}"
            )
    images = sum(
        1 for m in bodies[-1]["messages"] for b in m["content"] if b.get("type") == "image"
    )
    return Figures(
        cached=sum(u.cache_read for u in usages),
        total=sum(u.prompt_total for u in usages),
        written=sum(u.cache_creation for u in usages),
        bound=bound,
        requests=len(usages),
        same_system=len(systems) == 1,
        images=images,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--restart-after", type=int, default=10)
    parser.add_argument(
        "--photo-every", type=int, default=3, help="a photo with every Nth message (0: none)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per model request")
    args = parser.parse_args(argv)
    f = asyncio.run(run(args.turns, args.restart_after, args.verbose, args.photo_every))
    photos = args.turns // args.photo_every if args.photo_every else 0
    print(
        f"turns: {args.turns} (pipeline restarted after turn {args.restart_after}), model "
        f"requests: {f.requests}, photos: {photos} (image blocks in the last request: {f.images})"
    )
    print(f"cached input tokens:     {f.cached}")
    print(f"cache write tokens:      {f.written}")
    print(f"total input tokens:      {f.total}")
    print(f"ideal bound (system_and_3): {f.bound}")
    print(f"cached / bound:          {f.ratio:.4f}  (goal ≥ {GOAL})")
    print(f"cached / total input:    {f.cached / f.total:.4f}")
    print(
        f"system prompt identical in all {f.requests} requests: {'yes' if f.same_system else 'NO'}"
    )
    return 0 if f.ratio >= GOAL and f.same_system else 1


if __name__ == "__main__":
    sys.exit(main())
