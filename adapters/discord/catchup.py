"""Discord catch-up: remembers how far each active chat was seen, and after a restart or a new
gateway session reads what was missed there and submits it, ahead of that channel's live messages
and within a time budget.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import discord

from adapters.discord.text import PLATFORM, roles_of
from gateway.events import ChatRef, Inbound, SubmitOutcome, SubmitResult

# one logger for the Discord adapter, whichever module speaks
log = logging.getLogger("adapters.discord.adapter")

# messages fetched per chat after a restart or a reconnect (one request)
CATCH_UP_PER_CHAT = 50
# the most recently active chats whose newest message id is kept, for a reconnect
REMEMBERED_CHANNELS = 500
# one catch-up reads no longer than this; channels not read by then are skipped
CATCH_UP_BUDGET_S = 60.0
# channels read at once (discord.py waits out 429s per route on its own)
CATCH_UP_CONCURRENCY = 4

Translate = Callable[[discord.Message], Awaitable[Inbound | None]]
SubmitInbound = Callable[[Inbound], Awaitable[SubmitResult]]
FetchChannel = Callable[[int], Awaitable[Any]]


class ChannelLocks:
    """A lock per channel, kept only while someone holds or waits for it; FIFO like `asyncio.Lock`,
    so whoever asks first (a catch-up before the live messages that arrive during it) goes first."""

    def __init__(self) -> None:
        self._locks: dict[int, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, channel_id: int) -> AsyncIterator[None]:
        lock, users = self._locks.get(channel_id, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[channel_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[channel_id]
            if users > 1:
                self._locks[channel_id] = (lock, users - 1)
            else:
                del self._locks[channel_id]


@dataclass(slots=True)
class _CatchUpRun:
    """One catch-up's shared state: its deadline, its read slots and its counts."""

    deadline: float
    slots: asyncio.Semaphore
    tally: Counter[str] = field(default_factory=Counter)
    skipped: list[int] = field(default_factory=list)


def channel_id_of(chat: ChatRef) -> int:
    """The Discord channel a chat's messages are in: its thread, else the channel or DM."""
    return int(chat.thread_id or chat.chat_id)


@dataclass(slots=True, eq=False)
class DiscordCatchUp:
    """The adapter's catch-up. It shares the adapter's intake lock and channel locks, and goes
    through the adapter's own translate and submit, so a missed message is filtered, gated and
    ordered exactly like a live one. `limits` gives the time budget and the channels read at once,
    asked at the start of each catch-up."""

    translate: Translate
    submit: SubmitInbound
    fetch_channel: FetchChannel
    intake: asyncio.Lock
    channels: ChannelLocks
    monotonic: Callable[[], float]
    limits: Callable[[], tuple[float, int]]
    # chat → newest id; recent last
    _floors: OrderedDict[int, int] = field(default_factory=OrderedDict, init=False)
    # `_floors` when the current gateway session began
    _gap: dict[int, int] | None = field(default=None, init=False)
    _running: set[asyncio.Task[int]] = field(default_factory=set, init=False)

    def saw(self, message: discord.Message, *, accepted: bool) -> None:
        """A message handled in order: a chat that addressed the bot becomes (again) the most
        recently active one; chatter only moves the floor of a chat already known, so a busy channel
        nobody asks is never read."""
        floors, channel_id = self._floors, message.channel.id
        if accepted:
            floors[channel_id] = max(message.id, floors.get(channel_id, 0))
            floors.move_to_end(channel_id)
            while len(floors) > REMEMBERED_CHANNELS:
                floors.popitem(last=False)
        elif message.id > floors.get(channel_id, message.id):
            floors[channel_id] = message.id

    def connected(self) -> None:
        """READY of a new gateway session (not a RESUME, which replays what was missed): what we had
        seen before it is where a catch-up starts; messages of the new session arrive after this."""
        self._gap = dict(reversed(self._floors.items()))  # the most recently active first

    def ready_again(self, client: discord.Client | None) -> None:
        """discord.py reconnected by itself with a new
        session: fetch what was said while it was away."""
        gap, self._gap = self._gap, None
        if gap:
            task = asyncio.get_running_loop().create_task(
                self._catch_up_channels(client, gap, "a reconnect"), name="discord-catch-up"
            )
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def catch_up(
        self, client: discord.Client | None, last_seen: Mapping[ChatRef, str]
    ) -> int:
        """After the newest stored message of each chat (or what was seen before reconnecting, if
        newer), fetch what came since and submit it. The stored chats are remembered too (behind the
        live ones), so a later reconnect looks at them again."""
        floors = dict(self._gap or {})
        self._gap = None
        for chat, message_id in last_seen.items():
            if chat.platform != PLATFORM:
                continue
            try:
                channel_id, after = channel_id_of(chat), int(message_id)
            except ValueError:
                continue
            floors[channel_id] = max(floors.get(channel_id, 0), after)
            if channel_id not in self._floors and len(self._floors) < REMEMBERED_CHANNELS:
                self._floors[channel_id] = after
                self._floors.move_to_end(channel_id, last=False)
        return await self._catch_up_channels(client, floors, "a restart")

    async def close(self) -> None:
        """Stops a reconnect's catch-up still running (before the client closes under it)."""
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def _catch_up_channels(
        self, client: discord.Client | None, floors: Mapping[int, int], why: str
    ) -> int:
        """Oldest first, at most `CATCH_UP_PER_CHAT` per channel, through the same filter, access
        gate and submit as live messages. A few channels are read at once, with no lock held but
        each channel's own: its live messages wait for its missed ones, other channels go on. The
        intake lock is held only to submit one channel's batch; what the budget leaves unread is
        skipped (and logged)."""
        if client is None or client.is_closed() or not floors:
            return 0
        budget, concurrency = self.limits()
        run = _CatchUpRun(self.monotonic() + budget, asyncio.Semaphore(concurrency))
        await asyncio.gather(
            *(
                self._catch_up_channel(client, run, channel_id, after)
                for channel_id, after in floors.items()
            )
        )
        tally = run.tally
        log.info(
            "discord: caught up after %s: %s channel(s), %s message(s) fetched, %s submitted, "
            "%s already stored, %s channel(s) failed, %s skipped",
            why,
            len(floors),
            tally["fetched"],
            tally["submitted"],
            tally["stored"],
            tally["failed"],
            len(run.skipped),
        )
        if run.skipped:
            log.warning(
                "discord: catching up after %s took longer "
                "than %.0f s; %s channel(s) not caught up: %s",
                why,
                budget,
                len(run.skipped),
                ", ".join(map(str, run.skipped[:20])),
            )
        return tally["submitted"]

    async def _catch_up_channel(
        self, client: discord.Client, run: _CatchUpRun, channel_id: int, after: int
    ) -> None:
        async with self.channels.hold(channel_id):
            # taken at once, in order: ahead of later live messages
            try:
                async with run.slots:
                    left = run.deadline - self.monotonic()
                    if left <= 0:
                        raise TimeoutError
                    async with asyncio.timeout(left):
                        missed = await self._read_missed(client, run, channel_id, after)
            except TimeoutError:
                run.skipped.append(channel_id)
                return
            except Exception:
                run.tally["failed"] += 1
                log.exception("discord: catching up on channel %s failed", channel_id)
                return
            async with self.intake:
                for message, inbound in missed:
                    outcome = await self._submit_missed(message, inbound)
                    run.tally["submitted"] += (
                        outcome is SubmitOutcome.ACCEPTED or outcome is SubmitOutcome.REFUSED
                    )
                    run.tally["stored"] += outcome is SubmitOutcome.DUPLICATE

    async def _read_missed(
        self, client: discord.Client, run: _CatchUpRun, channel_id: int, after: int
    ) -> list[tuple[discord.Message, Inbound | None]]:
        """The channel's messages after `after`, oldest first,
        each with what the core gets (None: dropped)."""
        channel = await self._history_channel(client, channel_id)
        if channel is None:
            run.tally["failed"] += 1
            return []
        missed: list[tuple[discord.Message, Inbound | None]] = []
        try:
            async for message in channel.history(
                after=discord.Object(id=after), oldest_first=True, limit=CATCH_UP_PER_CHAT
            ):
                run.tally["fetched"] += 1
                missed.append((message, await self._translate_missed(message)))
        except (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            run.tally["failed"] += 1
            log.warning(
                "discord: cannot read the history of channel %s (%s); not caught up",
                channel_id,
                exc or type(exc).__name__,
            )
        return missed  # what was read before a failure is still older than anything after it

    async def _translate_missed(self, message: discord.Message) -> Inbound | None:
        try:
            inbound = await self.translate(message)
            return None if inbound is None else await _with_roles(message, inbound)
        except Exception:
            log.exception(
                "discord: missed message %s in channel %s not handled",
                message.id,
                message.channel.id,
            )
            return None

    async def _submit_missed(
        self, message: discord.Message, inbound: Inbound | None
    ) -> SubmitOutcome | None:
        try:
            outcome = None if inbound is None else (await self.submit(inbound)).outcome
        except Exception:
            log.exception(
                "discord: missed message %s in channel %s not handled",
                message.id,
                message.channel.id,
            )
            return None
        self.saw(message, accepted=inbound is not None)
        return outcome

    async def _history_channel(self, client: discord.Client, channel_id: int) -> Any:
        """The channel to read: cached guild channels and threads, else asked once (a DM channel
        after a restart)."""
        channel = client.get_channel(channel_id) or await self.fetch_channel(channel_id)
        return channel if isinstance(channel, discord.abc.Messageable) else None


async def _with_roles(message: discord.Message, inbound: Inbound) -> Inbound:
    """A fetched guild message carries a user, not a
    member: ask for the roles the access rules may read."""
    guild, author = message.guild, message.author
    if guild is None or isinstance(author, discord.Member):
        return inbound
    try:
        member = guild.get_member(author.id) or await guild.fetch_member(author.id)
    except discord.HTTPException as exc:
        log.info("discord: cannot look up member %s (%s); no roles", author.id, exc)
        return inbound
    return replace(inbound, roles=roles_of(member))
