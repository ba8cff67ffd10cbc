"""The terminal as a platform (`cli`): each stdin line is one message, each reply goes to stdout.

It waits for the answer to a line before reading the next, so a piped conversation reads like a chat
and the second message sees the first exchange; a question for the person (an approval request,
shown as text with its `/approve CODE` line: the console has no buttons) is an answer too, so the
next line can answer it. Replies are separated by a blank line, and the adapter counts the lines
whose answer was an error, so `gateway chat` can exit non-zero when none of them got an answer.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from gateway.events import ChatRef, Inbound, OutboundKind, OutboundMessage, Submit, SubmitOutcome


class ConsoleAdapter:
    platform = "cli"

    def __init__(
        self,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        user_id: str = "local",
        prompt: str = "",
    ) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.user_id = user_id
        self.prompt = prompt
        self.chat = ChatRef("cli", "dm", user_id)
        self._submit: Submit | None = None
        self._answered: dict[str, _Waiter] = {}
        self._count = 0
        self.turns = 0  # lines sent to the agent (commands excluded)
        self.failed = 0  # of those, how many were answered with an error

    @property
    def all_failed(self) -> bool:
        """Every message sent to the agent got an error back (and there was at least one)."""
        return self.turns > 0 and self.failed == self.turns

    async def start(self, submit: Submit) -> None:
        self._submit = submit

    async def stop(self) -> None:
        for waiter in self._answered.values():
            waiter.event.set()

    async def send(self, message: OutboundMessage) -> str:
        if message.chunk_index == 0 and self._count:
            self.stdout.write("\n")  # a blank line between replies: piped output stays readable
        self.stdout.write(message.plain if message.kind is OutboundKind.ERROR else message.text)
        self.stdout.write("\n")
        self.stdout.flush()
        self._count += 1
        last = message.chunk_index == message.chunk_count - 1
        waiter = self._answered.get(message.reply_to_id or "")
        # A question for the person (a request with its /approve, /deny lines) ends the wait too:
        # the next line typed may be the answer.
        asks = message.choices is not None
        answers = message.kind is not OutboundKind.NOTICE or asks
        if last and waiter is not None and (answers or waiter.is_command):
            waiter.failed = message.kind is OutboundKind.ERROR
            waiter.event.set()
        return f"cli-{self._count}"

    async def say(self, text: str, *, timeout: float | None = None) -> None:
        """Submit one line and wait until its answer has been printed."""
        assert self._submit is not None, "start() first"
        message_id = uuid.uuid4().hex
        waiter = self._answered[message_id] = _Waiter(is_command=text.lstrip().startswith("/"))
        result = await self._submit(
            Inbound(
                chat=self.chat,
                user_id=self.user_id,
                text=text,
                message_id=message_id,
                received_at=datetime.now(UTC),
                user_name=None,
            )
        )
        try:
            if result.outcome is SubmitOutcome.ACCEPTED or result.reason == "queue full":
                # a turn's reply or error; a command's answer
                # (a notice) is sent in the background too
                waiter.is_command = result.reason in ("command", "queue full")
                await asyncio.wait_for(waiter.event.wait(), timeout)
                if not waiter.is_command:
                    self.turns += 1
                    self.failed += waiter.failed
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


@dataclass
class _Waiter:
    """What `say` waits for: the final chunk replying to
    its line (a notice counts only for a command)."""

    is_command: bool
    event: asyncio.Event = field(default_factory=asyncio.Event)
    failed: bool = False
