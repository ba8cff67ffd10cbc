"""The terminal as a platform (`cli`): each stdin line is one message, each reply goes to stdout.

It waits for the answer to a line before reading the next, so a piped conversation reads like a chat and
the second message sees the first exchange.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import UTC, datetime
from typing import TextIO

from gateway.events import ChatRef, Inbound, OutboundKind, OutboundMessage, Submit, SubmitOutcome


class ConsoleAdapter:
    platform = "cli"

    def __init__(self, *, stdin: TextIO | None = None, stdout: TextIO | None = None, user_id: str = "local",
                 prompt: str = "") -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.user_id = user_id
        self.prompt = prompt
        self.chat = ChatRef("cli", "dm", user_id)
        self._submit: Submit | None = None
        self._answered: dict[str, asyncio.Event] = {}
        self._count = 0

    async def start(self, submit: Submit) -> None:
        self._submit = submit

    async def stop(self) -> None:
        for event in self._answered.values():
            event.set()

    async def send(self, message: OutboundMessage) -> str:
        self.stdout.write(message.plain if message.kind is OutboundKind.ERROR else message.text)
        self.stdout.write("\n")
        self.stdout.flush()
        self._count += 1
        last = message.chunk_index == message.chunk_count - 1
        # Notices (busy, reset) are not the answer; command answers are sent before submit returns.
        if last and message.reply_to_id in self._answered and message.kind is not OutboundKind.NOTICE:
            self._answered[message.reply_to_id].set()
        return f"cli-{self._count}"

    async def say(self, text: str, *, timeout: float | None = None) -> None:
        """Submit one line and wait until its answer has been printed."""
        assert self._submit is not None, "start() first"
        message_id = uuid.uuid4().hex
        done = self._answered[message_id] = asyncio.Event()
        result = await self._submit(Inbound(chat=self.chat, user_id=self.user_id, text=text, message_id=message_id,
                                            received_at=datetime.now(UTC), user_name=None))
        try:
            if result.outcome is SubmitOutcome.ACCEPTED and result.reason != "command":
                await asyncio.wait_for(done.wait(), timeout)
        finally:
            self._answered.pop(message_id, None)

    async def run(self) -> None:
        """Read lines until EOF."""
        loop = asyncio.get_running_loop()
        while True:
            if self.prompt and self.stdin.isatty():
                self.stdout.write(self.prompt)
                self.stdout.flush()
            line = await loop.run_in_executor(None, self.stdin.readline)
            if not line:
                return
            text = line.rstrip("\n")
            if text.strip():
                await self.say(text)
