"""The platforms' side of the kill run: what each fake delivered to users (the Watcher), and how
each platform hands a user's message to a bot that may be dead: Slack pushes an unacked event again;
Discord delivers only to a connected bot and never again, so the gateway reads the history of chats
it knows after each start (its catch-up), and only a chat's very first message, which no catch-up
can know of, is repeated by its user."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.sessions.commands import NEW_TEXT
from tests.chaos.models import HEADER, LINE
from tests.fakes.discord import FakeDiscord, snowflake
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram


@dataclass
class Seen:
    """One chunk a user received, with the daemon life (epoch) that sent it."""

    index: int  # position in everything this process saw delivered
    chat: str  # `telegram:<id>`, `slack:<channel>` or `discord:<channel>`
    text: str
    epoch: int
    at: float  # when this process saw the fake store it (monotonic)


class Watcher:
    """Follows what the fake platforms stored and wakes
    the conversations waiting for their answers."""

    def __init__(self, tg: FakeTelegram, slack: FakeSlack, discord: FakeDiscord) -> None:
        self.tg = tg
        self.slack = slack
        self.discord = discord
        self.seen: list[Seen] = []
        self._taken = {"telegram": 0, "slack": 0, "discord": 0}
        self.headers: Counter[str] = Counter()
        self.lines: dict[str, set[int]] = defaultdict(set)
        self.news: Counter[str] = Counter()
        self.epoch = 0
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.catch_up()

    def _delivered(self) -> dict[str, list[tuple[str, str]]]:
        return {
            "telegram": [(f"telegram:{m.chat_id}", m.text) for m in self.tg.sent_messages()],
            "slack": [(f"slack:{m.channel}", m.text) for m in self.slack.posted()],
            "discord": [
                (f"discord:{m.channel_id}", m.content) for m in self.discord.sent_messages()
            ],
        }

    def catch_up(self) -> None:
        for platform, delivered in self._delivered().items():
            for chat, text in delivered[self._taken[platform] :]:
                self.seen.append(Seen(len(self.seen), chat, text, self.epoch, time.monotonic()))
                for tag, _ in HEADER.findall(text):
                    self.headers[tag] += 1
                for tag, line in LINE.findall(text):
                    self.lines[tag].add(int(line))
                if text == NEW_TEXT:
                    self.news[chat] += 1
            self._taken[platform] = len(delivered)
        self.poke()

    def poke(self) -> None:
        """Wake whoever waits: something they may wait for changed (not only a delivery)."""
        self.changed.set()
        self.changed = asyncio.Event()

    def _behind(self) -> bool:
        return (
            len(self.tg.sent_messages()) > self._taken["telegram"]
            or len(self.slack.posted()) > self._taken["slack"]
            or len(self.discord.sent) > self._taken["discord"]
        )

    async def _follow(self) -> None:
        async def watch(fake: Any) -> None:
            while True:
                await fake.wait_until(self._behind, timeout=3600)
                self.catch_up()

        await asyncio.gather(watch(self.tg), watch(self.slack), watch(self.discord))

    def answered(self) -> int:
        return sum(1 for n in self.headers.values() if n) + sum(self.news.values())

    async def wait(self, predicate: Any, timeout: float, what: str) -> None:
        async def loop() -> None:
            while not predicate():
                await self.changed.wait()

        try:
            await asyncio.wait_for(loop(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}") from None


class SlackDelivery:
    """Slack's side of Socket Mode: an event is pushed until it is acked. One not acked within 3 s
    (its socket died with the daemon, or the daemon never stored it) is pushed again with
    retry_attempt + 1, as Slack does."""

    ACK_WAIT_S = 3.0

    def __init__(self, slack: FakeSlack) -> None:
        self.slack = slack
        self.tasks: set[asyncio.Task[None]] = set()
        self.redeliveries = 0

    def send(self, channel: str, user: str, text: str, ts: str) -> None:
        event = {
            "type": "message",
            "channel_type": "im",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
        }
        task = asyncio.get_running_loop().create_task(
            self._deliver(event, f"Ev{channel}{ts.replace('.', '')}")
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _deliver(self, event: dict[str, Any], event_id: str) -> None:
        attempt = 0
        while True:
            try:
                envelope = await self.slack.push_event(
                    event,
                    event_id=event_id,
                    retry_attempt=attempt,
                    retry_reason="timeout" if attempt else "",
                )
                await self.slack.wait_for_ack(envelope, timeout=self.ACK_WAIT_S)
                return
            except (TimeoutError, ConnectionError, RuntimeError):
                attempt += 1  # no socket yet, or no ack: Slack tries again
                self.redeliveries += 1

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class DiscordUsers:
    """Discord's side: a MESSAGE_CREATE reaches only a bot connected at that moment, with no ack and
    no redelivery; a restarted daemon IDENTIFYs a new session, which gets nothing it missed, and
    catches up from the history of the chats it has stored a message from. So in a chat the bot
    knows a person sends once, whenever, online or not. A chat's first message only reaches a
    connected bot: that person sends once the bot is online and, if the killed daemon never stored
    it (no catch-up can know the chat), sends it again once the bot is back. `stored(message id)`
    and `known(channel)` read the daemon's database."""

    def __init__(
        self, discord: FakeDiscord, stored: Callable[[str], bool], known: Callable[[str], bool]
    ) -> None:
        self.discord = discord
        self.stored = stored
        self.known = known
        self.life = 0
        self.repeated = 0  # first messages of a chat, sent again
        # messages sent while no daemon was connected: only a catch-up can answer them
        self.sent_offline = 0
        # (channel, message id) sent once, in a chat the bot knew
        self.sent_once: list[tuple[str, str]] = []
        # (life to come, channel, message id) sent between lives
        self.sent_dead: list[tuple[int, str, str]] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self._ended: defaultdict[int, asyncio.Event] = defaultdict(asyncio.Event)
        self._ids = itertools.count()

    def send(self, channel: str, author: str, text: str) -> None:
        task = asyncio.get_running_loop().create_task(self._deliver(channel, author, text))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _deliver(self, channel: str, author: str, text: str) -> None:
        if self.known(channel):
            message_id = snowflake(increment=next(self._ids))
            self.sent_once.append((channel, message_id))
            self.sent_offline += not self.discord.online
            await self.discord.push_message(channel, text, author_id=author, message_id=message_id)
            return
        while True:
            await self.discord.wait_until(lambda: self.discord.online, timeout=3600)
            # no await from here to the dispatch: the socket
            # it goes to belongs to daemon life `life`
            life = self.life
            # dated now: the gateway replays by age
            message_id = snowflake(increment=next(self._ids))
            await self.discord.push_message(channel, text, author_id=author, message_id=message_id)
            await self._ended[life].wait()
            if self.stored(message_id):
                return
            self.repeated += 1

    async def send_while_dead(self, channel: str, author: str, text: str) -> str:
        """Sent now, between a kill and the restart, in a chat the bot knows: nobody can receive it
        live, so only the next daemon's catch-up (reading the channel's history) can answer it."""
        assert self.known(channel) and not self.discord.online, (
            "not a message only a catch-up can find"
        )
        message_id = snowflake(increment=next(self._ids))
        self.sent_once.append((channel, message_id))
        self.sent_dead.append((self.life, channel, message_id))
        self.sent_offline += 1
        await self.discord.push_message(channel, text, author_id=author, message_id=message_id)
        return message_id

    async def end_life(self) -> None:
        """The killed daemon is gone: wait until the fake holds no socket of it, then let the
        senders look."""
        await self.discord.wait_until(lambda: not self.discord.online, timeout=30)
        self._ended[self.life].set()
        self.life += 1

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
