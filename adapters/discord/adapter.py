"""Discord adapter on discord.py 2: one Client with one CommandTree; MESSAGE_CREATE and slash
commands → `Inbound`, chunks → channel messages (or the slash command's own response). Access
control, sessions and chunking live in the core; this module holds the lifecycle and the inbound
side and only translates (the pure parts in `text`, the slash commands in `commands`, catching up on
missed messages in `catchup`, the threads that `thread_replies: auto` opens in `threads`, sending
and "is typing…" in `outbound`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl

from adapters.discord.buttons import close, on_click
from adapters.discord.catchup import (
    CATCH_UP_BUDGET_S,
    CATCH_UP_CONCURRENCY,
    ChannelLocks,
    DiscordCatchUp,
    channel_id_of,
)
from adapters.discord.commands import ASK_DESCRIPTION, COMMANDS, SlashCommands
from adapters.discord.files import DiscordFiles, refresher, sticker
from adapters.discord.outbound import Outbound
from adapters.discord.preview import DiscordPreview
from adapters.discord.shards import ShardPlan, shard_plan
from adapters.discord.text import (
    INTENT_HINT,
    PLATFORM,
    TOKEN_HINT,
    Addressing,
    Place,
    addressing,
    attachment,
    gateway_failure,
    place_of,
    replied_author,
    roles_of,
    thread_name,
)
from adapters.discord.threads import AutoThreads
from adapters.discord.voice import VoiceNotes
from gateway.config.settings import DiscordConfig
from gateway.errors import AdapterError, AdapterFatal, PlatformUnavailable
from gateway.events import (
    DEFAULT_ACCOUNT,
    Attachment,
    ChatRef,
    Inbound,
    OutboundAudio,
    OutboundFile,
    OutboundMessage,
    PreviewPart,
    PreviewStyle,
    Submit,
    SubmitOutcome,
    SubmitResult,
    on_account,
)

__all__ = [
    "ASK_DESCRIPTION",
    "COMMANDS",
    "INTENT_HINT",
    "TOKEN_HINT",
    "Addressing",
    "DiscordAdapter",
    "addressing",
    "thread_name",
]

log = logging.getLogger(__name__)

# discord.py waits this long after the last GUILD_CREATE before on_ready
GUILD_READY_TIMEOUT_S = 2.0
CLOSE_TIMEOUT_S = 5.0
_CHANNEL_MESSAGE_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})


class _Client(discord.Client):
    """The one discord.Client: hands its two events to the adapter."""

    def __init__(self, adapter: DiscordAdapter, **options: Any) -> None:
        super().__init__(**options)
        self.adapter = adapter
        self.ready = asyncio.Event()

    async def on_connect(self) -> None:
        self.adapter.connected()

    async def on_ready(self) -> None:
        again = self.ready.is_set()
        self.ready.set()
        if again:
            # a new session after a full reconnect: discord.py replays nothing, so look ourselves
            self.adapter.ready_again()

    async def on_message(self, message: discord.Message) -> None:
        await self.adapter.on_message(message)

    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        # slash commands go to the CommandTree
        if interaction.type is discord.InteractionType.component:
            await on_click(interaction, self.adapter.submit_click)


class _ShardedClient(_Client, discord.AutoShardedClient):
    """The same client over several shards (`discord.shards`: adapters/discord/shards.py)."""


class DiscordAdapter:
    """`start` logs in (401 → AdapterFatal), connects the
    gateway, waits for READY, syncs slash commands."""

    platform = PLATFORM

    def __init__(
        self,
        config: DiscordConfig,
        *,
        guild_ready_timeout: float = GUILD_READY_TIMEOUT_S,
        monotonic: Callable[[], float] = time.monotonic,
        catch_up_budget: float = CATCH_UP_BUDGET_S,
        catch_up_concurrency: int = CATCH_UP_CONCURRENCY,
        account: str = DEFAULT_ACCOUNT,
    ) -> None:
        self.config = config
        self.account = account  # the bot account (one adapter each): what it hands in names it
        self.guild_ready_timeout = guild_ready_timeout
        self.monotonic = monotonic
        self.catch_up_budget = catch_up_budget
        self.catch_up_concurrency = catch_up_concurrency
        self._submit: Submit | None = None
        self._client: _Client | None = None
        self._runner: asyncio.Task[None] | None = None
        # one event at a time, in arrival order: a chat's messages stay in order
        self._intake = asyncio.Lock()
        # a channel being caught up holds its live messages back until it is done
        self._channels = ChannelLocks()
        self._commands = SlashCommands(config, self._submit_in_order, monotonic)
        # `thread_replies: auto`: planned on arrival, opened with the answer
        self._threads = AutoThreads()
        self._outbound = Outbound(self._commands, self._threads)  # replies and "is typing…"
        # the answer as it is written: a message edited in place
        self._preview = DiscordPreview(self._outbound)
        self._voice = VoiceNotes(self._threads)  # voice replies (voice messages)
        self._files = DiscordFiles(config.api_base)  # attachments, streamed from the CDN
        self._catch_up = DiscordCatchUp(
            self.translate,
            self._submit_inbound,
            self._fetch_channel,
            self._intake,
            self._channels,
            monotonic,
            lambda: (self.catch_up_budget, self.catch_up_concurrency),
        )

    # ------------------------------------------------------------------ lifecycle
    async def start(self, submit: Submit) -> None:
        self._submit = on_account(submit, self.account)
        point_library_at(self.config)
        plan = await shard_plan(self.config)  # None: one connection
        client = self._client = self._make_client(plan)
        self._outbound.client = self._voice.client = client
        # expired attachment links, renewed with the bot's token
        self._files.refresh = refresher(client.http)
        tree = self._commands.tree(client)
        try:
            await self._login(client)
            self._runner = asyncio.get_running_loop().create_task(
                client.connect(reconnect=True), name="discord-gateway"
            )
            await self._until_ready(client, self._runner)
            await self._commands.sync(client, tree)
        except BaseException:
            await self._close()
            raise
        assert client.user is not None
        log.info(
            "discord: @%s ready in %s guild(s)%s",
            client.user.name,
            len(client.guilds),
            f" on {plan.describe()}" if plan else "",
        )

    async def stop(self) -> None:
        await self._close()
        await self._files.close()

    def media(self, attachment: Attachment) -> AsyncIterator[bytes]:
        """An attachment's bytes from its CDN URL (the core bounds size and time; see `files`)."""
        return self._files.chunks(attachment)

    async def wait_closed(self) -> None:
        """Returns when the gateway loop ended on its own;
        4014/4004 and the like raise `AdapterFatal`."""
        runner = self._runner
        if runner is None:
            return
        await asyncio.wait({runner})
        if not runner.cancelled() and runner.exception() is not None:
            raise gateway_failure(runner.exception())  # type: ignore[arg-type]

    def _make_client(self, plan: ShardPlan | None = None) -> _Client:
        intents = discord.Intents.default()
        # privileged: without it Discord closes the gateway with 4014
        intents.message_content = True
        intents.typing = False
        intents.presences = False
        wait = self.guild_ready_timeout
        options: dict[str, Any] = {
            "intents": intents,
            "guild_ready_timeout": wait,
            "allowed_mentions": discord.AllowedMentions.none(),
        }
        if plan is not None:
            return _ShardedClient(self, shard_count=plan.count, shard_ids=list(plan.ids), **options)
        return _Client(self, **options)

    async def _login(self, client: _Client) -> None:
        try:
            await client.login(self.config.token.value)
        except discord.LoginFailure:
            raise AdapterFatal(PLATFORM, TOKEN_HINT) from None
        except (TimeoutError, discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            raise AdapterError(
                PLATFORM,
                f"cannot reach the Discord API at {discord.http.Route.BASE}: "
                f"{exc or type(exc).__name__}",
            ) from None

    async def _until_ready(self, client: _Client, runner: asyncio.Task[None]) -> None:
        ready = asyncio.ensure_future(client.ready.wait())
        try:
            await asyncio.wait({ready, runner}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if client.ready.is_set():
            return
        error = None if runner.cancelled() else runner.exception()
        raise (
            gateway_failure(error)
            if error is not None
            else AdapterError(PLATFORM, "gateway closed before READY")
        )

    async def _close(self) -> None:
        client, runner = self._client, self._runner
        await self._catch_up.close()
        if client is not None and not client.is_closed():
            await client.close()
        if runner is not None:
            # close() ends the gateway loop by itself
            await asyncio.wait({runner}, timeout=CLOSE_TIMEOUT_S)
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    # ------------------------------------------------------------------ inbound
    async def on_message(self, message: discord.Message) -> None:
        async with self._channels.hold(message.channel.id), self._intake:
            try:
                inbound = await self.translate(message)
                if inbound is not None:
                    await self._submit_inbound(inbound)
                self._catch_up.saw(message, accepted=inbound is not None)
            except Exception:
                log.exception(
                    "discord: message %s in channel %s not handled", message.id, message.channel.id
                )

    async def _submit_in_order(self, inbound: Inbound) -> SubmitResult:
        """A slash command's submit: behind the gateway messages that came before it (and its
        channel's missed ones)."""
        try:
            channel_id = channel_id_of(inbound.chat)
        except ValueError:
            channel_id = 0
        async with self._channels.hold(channel_id), self._intake:
            return await self._submit_inbound(inbound)

    async def _submit_inbound(self, inbound: Inbound) -> SubmitResult:
        assert self._submit is not None
        result = await self._submit(inbound)
        if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
            log.info(
                "discord: shutting down; message %s in channel %s was not stored",
                inbound.message_id,
                inbound.chat.chat_id,
            )
        return result

    async def translate(self, message: discord.Message) -> Inbound | None:
        """The message as the core sees it, or None when it is not for us (dropped at the edge)."""
        client = self._client
        assert client is not None and client.user is not None
        me = client.user
        author = message.author
        is_bot = author.bot or message.webhook_id is not None
        if author.id == me.id or message.type not in _CHANNEL_MESSAGE_TYPES:
            return None  # our own echo, joins, pins, thread starters …
        if is_bot and not self.config.answer_bots:
            return None
        place = await self._place(message.channel, message.guild)
        if place is None:
            return None
        said = addressing(
            message.content,
            me.id,
            users={u.id: u.display_name for u in message.mentions},
            roles={r.id: r.name for r in message.role_mentions},
            bot_roles={r.id for r in message.role_mentions if r.tags and r.tags.bot_id == me.id},
            channels={c.id: c.name for c in message.channel_mentions},
        )
        attachments = (
            *(attachment(a) for a in message.attachments),
            *(sticker(s, self._files.cdn_origin) for s in message.stickers),
        )
        if not said.text and not attachments:
            return None
        replied = replied_author(message)
        addressed = (
            place.chat_type == "dm" or said.mentioned or replied == me.id or place.bot_thread
        )
        if place.chat_type != "dm" and self.config.require_mention and not addressed:
            return None
        if (
            addressed
            and isinstance(message.channel, discord.TextChannel)
            and self.config.thread_replies == "auto"
            and not said.text.startswith("/")
        ):
            place = self._threads.plan(message, place, said.text)
        self._outbound.remember(message)
        reference = message.reference
        return Inbound(
            chat=ChatRef(PLATFORM, place.chat_type, place.chat_id, place.thread_id),
            user_id=str(author.id),
            text=said.text,
            message_id=str(message.id),
            received_at=message.created_at,
            user_name=author.display_name,
            username=author.name,
            reply_to_id=str(reference.message_id) if reference and reference.message_id else None,
            attachments=attachments,
            is_addressed=addressed,
            is_bot=is_bot,
            chat_title=place.title,
            space_id=place.space_id,
            roles=roles_of(author),
        )

    async def _place(self, channel: Any, guild: discord.Guild | None) -> Place | None:
        if isinstance(channel, discord.PartialMessageable) and guild is not None:
            channel = await self._fetch_channel(channel.id)  # not cached: ask once what kind it is
            if channel is None:
                return None
        return place_of(
            channel, guild, self._client.user.id if self._client and self._client.user else 0
        )

    async def _fetch_channel(self, channel_id: int) -> Any:
        assert self._client is not None
        try:
            return await self._client.fetch_channel(channel_id)
        except discord.HTTPException as exc:
            log.warning(
                "discord: cannot look up channel %s (%s); its message is dropped", channel_id, exc
            )
            return None

    # ------------------------------------------------------------------ catch-up (in `catchup`)
    def connected(self) -> None:
        self._catch_up.connected()

    def ready_again(self) -> None:
        self._catch_up.ready_again(self._client)

    async def catch_up(self, last_seen: Mapping[ChatRef, str]) -> int:
        """The daemon's catch-up once this connection is up: what came since the newest stored
        message of each chat."""
        return await self._catch_up.catch_up(self._client, last_seen)

    space_noun = "server"

    async def member_roles(self, space_id: str, user_id: str) -> tuple[str, ...] | None:
        """A server member's roles now (asked over REST: the member cache needs the privileged
        members intent); None when they have left the server or the bot is no longer in it;
        AdapterError when Discord cannot say."""
        client = self._client
        if client is None or not client.is_ready():
            raise AdapterError(PLATFORM, "not connected")
        guild = client.get_guild(int(space_id))
        if guild is None:
            return None
        try:
            member = await guild.fetch_member(int(user_id))
        except discord.NotFound:
            return None
        except (discord.HTTPException, aiohttp.ClientError) as exc:
            raise AdapterError(PLATFORM, f"cannot look up member {user_id}: {exc}") from None
        return roles_of(member)

    # ------------------------------------------------------------------ outbound (in `outbound`)
    async def send(self, message: OutboundMessage) -> str:
        return await self._outbound.send(message)

    async def submit_click(self, inbound: Inbound) -> SubmitResult:
        """A click on one of our buttons (buttons.py), in order with the gateway's other events."""
        return await self._submit_in_order(inbound)

    async def close_choices(self, message: OutboundMessage, platform_message_id: str) -> None:
        """A decided request: its buttons go, its text shows the outcome."""
        client = self._client
        if client is None or client.is_closed():
            raise PlatformUnavailable(PLATFORM, "not connected")
        await close(
            client, await self._threads.open(message.chat), platform_message_id, message.text
        )

    def typing(self, chat: ChatRef) -> AbstractAsyncContextManager[None]:
        """discord.py's `channel.typing()` refreshes "is typing…" every 5 s; it stops the moment the
        turn ends."""
        return self._outbound.typing(chat)

    async def send_audio(self, audio: OutboundAudio) -> str:
        """A voice reply: a voice message, or an audio file where one is refused (in `voice`)."""
        return await self._voice.send(audio)

    async def send_file(self, file: OutboundFile) -> str:
        """A file for the chat: an attachment (in `voice`)."""
        return await self._voice.send_file(file)

    @property
    def typing_active(self) -> int:
        return self._outbound.typing_active

    # ----------------------------------------------------------------- live previews (in `preview`)
    def preview_style(self, chat: ChatRef, reply_to_id: str | None) -> PreviewStyle | None:
        return self._preview.style(reply_to_id)

    async def show_preview(self, part: PreviewPart) -> str:
        return await self._preview.show(part)

    async def finish_preview(self, message: OutboundMessage, platform_message_id: str) -> str:
        return await self._preview.finish(message, platform_message_id)

    async def drop_preview(self, chat: ChatRef, platform_message_id: str) -> None:
        await self._preview.drop(chat, platform_message_id)


# --------------------------------------------------------- the one place the library's URLs are set
def point_library_at(config: DiscordConfig) -> None:
    """discord.py keeps its endpoints in class attributes
    (process-wide); set them from config, here only."""
    if config.api_base:
        discord.http.Route.BASE = config.api_base.rstrip("/")
    if config.gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(config.gateway_url)
