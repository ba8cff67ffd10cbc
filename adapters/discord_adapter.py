"""Discord adapter on discord.py 2: one Client with one CommandTree; MESSAGE_CREATE and slash commands → `Inbound`,
chunks → channel messages (or the slash command's own response). Named `discord_adapter` so it never shadows the
library. Access control, sessions and chunking live in the core; this module only translates.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl
from discord import app_commands

from gateway.config import DiscordConfig
from gateway.errors import (AdapterError, AdapterFatal, MarkupRejected, PlatformUnavailable, RateLimited,
                            RecipientUnavailable)
from gateway.events import (Attachment, ChatRef, ChatType, Inbound, OutboundMessage, Submit, SubmitOutcome,
                            SubmitResult)

log = logging.getLogger(__name__)

PLATFORM = "discord"
GUILD_READY_TIMEOUT_S = 2.0       # discord.py waits this long after the last GUILD_CREATE before on_ready
INTERACTION_TTL_S = 15 * 60.0      # an interaction token answers follow-ups for 15 minutes
REMEMBERED_MESSAGES = 5000         # triggering messages kept for reply references and mention scope
REMEMBERED_THREAD_STARTS = 1000    # planned auto threads whose turn has not started yet
THREAD_NAME_MAX = 80
CLOSE_TIMEOUT_S = 5.0
COMMANDS: tuple[tuple[str, str], ...] = (
    ("new", "Start a new conversation"),
    ("status", "Show the session, model and token usage"),
    ("usage", "Show token usage of this conversation"),
    ("stop", "Stop the answer in progress"),
    ("retry", "Answer your last message again"),
    ("undo", "Forget the last exchange"),
    ("help", "List the commands"),
)
ASK_DESCRIPTION = "Ask the agent something (instead of mentioning it)"
EPHEMERAL_COMMANDS = frozenset({"status", "usage", "help"})  # only the asker needs to see these
NOT_ANSWERED = {
    SubmitOutcome.IGNORED: "Sorry, I can't answer you here.",
    SubmitOutcome.DUPLICATE: "I already have this one.",
}
FAILED_TEXT = "Sorry, something went wrong on my side; please try again."
SHUTTING_DOWN_TEXT = "I'm restarting right now; please try again in a minute."
INTENT_HINT = ("message content intent not enabled for this bot (gateway close 4014) — enable MESSAGE CONTENT "
               "INTENT in the Discord developer portal → Bot, then restart the gateway")
TOKEN_HINT = "token rejected (401) — check DISCORD_BOT_TOKEN"
_FATAL_CLOSE = {4004: TOKEN_HINT, 4010: "invalid shard (4010)", 4011: "sharding required (4011)",
                4012: "invalid gateway API version (4012)", 4013: "invalid intents (4013)", 4014: INTENT_HINT}
_GONE_CODES = frozenset({10003, 50001, 50007, 50013})  # unknown channel, missing access, DMs closed, missing perms
_MENTION = re.compile(r"<(@!?|@&|#)(\d+)>")
_CHANNEL_MESSAGE_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})


@dataclass(frozen=True, slots=True)
class Addressing:
    """The message text as the model should read it, and whether it mentions the bot."""

    text: str
    mentioned: bool = False


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message lives, in the core's terms; `bot_thread` = a thread the bot itself opened."""

    chat_type: ChatType
    chat_id: str
    thread_id: str | None = None
    title: str | None = None
    space_id: str | None = None
    bot_thread: bool = False


@dataclass(frozen=True, slots=True)
class _Origin:
    channel_id: int
    author_id: int


@dataclass(eq=False)
class _PendingInteraction:
    interaction: discord.Interaction[Any]
    ephemeral: bool
    created: float
    answered: bool = False


class _Client(discord.Client):
    """The one discord.Client: hands its two events to the adapter."""

    def __init__(self, adapter: DiscordAdapter, **options: Any) -> None:
        super().__init__(**options)
        self.adapter = adapter
        self.ready = asyncio.Event()

    async def on_ready(self) -> None:
        self.ready.set()

    async def on_message(self, message: discord.Message) -> None:
        await self.adapter.on_message(message)


class DiscordAdapter:
    """`start` logs in (401 → AdapterFatal), connects the gateway, waits for READY, syncs slash commands."""

    platform = PLATFORM

    def __init__(self, config: DiscordConfig, *, guild_ready_timeout: float = GUILD_READY_TIMEOUT_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.guild_ready_timeout = guild_ready_timeout
        self.monotonic = monotonic
        self._submit: Submit | None = None
        self._client: _Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._intake = asyncio.Lock()  # one event at a time, in arrival order: a chat's messages stay in order
        self._synced = False
        self._origins: OrderedDict[str, _Origin] = OrderedDict()
        self._interactions: dict[str, _PendingInteraction] = {}
        self._thread_starts: OrderedDict[str, tuple[discord.Message, str]] = OrderedDict()
        self._thread_lock = asyncio.Lock()
        self._no_thread: set[str] = set()  # planned threads Discord refused: their replies go to the channel
        self._typing = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self, submit: Submit) -> None:
        self._submit = submit
        point_library_at(self.config)
        client = self._client = self._make_client()
        tree = self._command_tree(client)
        try:
            await self._login(client)
            self._runner = asyncio.get_running_loop().create_task(client.connect(reconnect=True),
                                                                  name="discord-gateway")
            await self._until_ready(client, self._runner)
            await self._sync_commands(client, tree)
        except BaseException:
            await self._close()
            raise
        assert client.user is not None
        log.info("discord: @%s ready in %s guild(s)", client.user.name, len(client.guilds))

    async def stop(self) -> None:
        await self._close()

    async def wait_closed(self) -> None:
        """Returns when the gateway loop ended on its own; 4014/4004 and the like raise `AdapterFatal`."""
        runner = self._runner
        if runner is None:
            return
        await asyncio.wait({runner})
        if not runner.cancelled() and runner.exception() is not None:
            raise gateway_failure(runner.exception())  # type: ignore[arg-type]

    def _make_client(self) -> _Client:
        intents = discord.Intents.default()
        intents.message_content = True  # privileged: without it Discord closes the gateway with 4014
        intents.typing = False
        intents.presences = False
        return _Client(self, intents=intents, guild_ready_timeout=self.guild_ready_timeout,
                       allowed_mentions=discord.AllowedMentions.none())

    async def _login(self, client: _Client) -> None:
        try:
            await client.login(self.config.token.value)
        except discord.LoginFailure:
            raise AdapterFatal(PLATFORM, TOKEN_HINT) from None
        except (discord.DiscordException, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise AdapterError(PLATFORM, f"cannot reach the Discord API at {discord.http.Route.BASE}: "
                                         f"{exc or type(exc).__name__}") from None

    async def _until_ready(self, client: _Client, runner: asyncio.Task[None]) -> None:
        ready = asyncio.ensure_future(client.ready.wait())
        try:
            await asyncio.wait({ready, runner}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if client.ready.is_set():
            return
        error = None if runner.cancelled() else runner.exception()
        raise gateway_failure(error) if error is not None else AdapterError(PLATFORM, "gateway closed before READY")

    async def _close(self) -> None:
        client, runner = self._client, self._runner
        if client is not None and not client.is_closed():
            await client.close()
        if runner is not None:
            await asyncio.wait({runner}, timeout=CLOSE_TIMEOUT_S)  # close() ends the gateway loop by itself
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    # ------------------------------------------------------------------ slash commands
    def _command_tree(self, client: _Client) -> app_commands.CommandTree[_Client]:
        tree: app_commands.CommandTree[_Client] = app_commands.CommandTree(client)
        for name, description in COMMANDS:
            tree.add_command(app_commands.Command(name=name, description=description,
                                                  callback=self._command_callback(name)))

        @app_commands.describe(prompt="What to ask")
        async def ask(interaction: discord.Interaction[Any], prompt: str) -> None:
            await self.on_command(interaction, "ask", prompt)

        tree.add_command(app_commands.Command(name="ask", description=ASK_DESCRIPTION, callback=ask))
        return tree

    def _command_callback(self, name: str) -> Callable[[discord.Interaction[Any]], Any]:
        async def callback(interaction: discord.Interaction[Any]) -> None:
            await self.on_command(interaction, name, "")
        return callback

    async def _sync_commands(self, client: _Client, tree: app_commands.CommandTree[_Client]) -> None:
        """Once per process: a bulk overwrite with unchanged commands is harmless but still rate limited."""
        mode = self.config.command_sync
        if mode == "off" or self._synced:
            return
        try:
            if mode == "global":
                synced = await tree.sync()
                log.info("discord: synced %s slash commands globally", len(synced))
            else:
                guild_ids = self.config.allowed_guilds or tuple(str(g.id) for g in client.guilds)
                for guild_id in guild_ids:
                    guild = discord.Object(id=int(guild_id))
                    tree.copy_global_to(guild=guild)
                    synced = await tree.sync(guild=guild)
                    log.info("discord: synced %s slash commands to guild %s", len(synced), guild_id)
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: syncing slash commands failed (%s); invite the bot with the "
                        "applications.commands scope, or set discord.command_sync: off", exc)
            return
        self._synced = True

    async def on_command(self, interaction: discord.Interaction[Any], name: str, prompt: str) -> None:
        """Acknowledge at once (Discord allows 3 s), then submit; `send` answers through the interaction."""
        ephemeral = name in EPHEMERAL_COMMANDS
        try:
            await interaction.response.defer(ephemeral=ephemeral, thinking=True)
        except discord.HTTPException as exc:
            log.warning("discord: could not acknowledge /%s (%s)", name, exc)
            return
        try:
            inbound = interaction_inbound(interaction, prompt if name == "ask" else f"/{name}")
            self._remember_interaction(inbound.message_id, interaction, ephemeral)
            async with self._intake:
                result = await self._submit_inbound(inbound)
            await self._settle_interaction(inbound.message_id, result)
        except Exception:  # noqa: BLE001 - task root for one slash command
            log.exception("discord: /%s from user %s not handled", name, interaction.user.id)
            with suppress(discord.HTTPException):
                await interaction.edit_original_response(content=FAILED_TEXT)

    def _remember_interaction(self, key: str, interaction: discord.Interaction[Any], ephemeral: bool) -> None:
        now = self.monotonic()
        for old in [k for k, p in self._interactions.items() if now - p.created >= INTERACTION_TTL_S]:
            del self._interactions[old]
        self._interactions[key] = _PendingInteraction(interaction, ephemeral, now)

    async def _settle_interaction(self, key: str, result: SubmitResult) -> None:
        """Nothing will be sent for an ignored or duplicate command: replace "thinking…" with one sentence."""
        text = NOT_ANSWERED.get(result.outcome)
        if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
            text = SHUTTING_DOWN_TEXT
        pending = self._interactions.get(key)
        if text is None or pending is None or pending.answered:
            return
        del self._interactions[key]
        try:
            await pending.interaction.edit_original_response(content=text)
        except discord.HTTPException as exc:
            log.debug("discord: could not settle interaction %s: %s", key, exc)

    # ------------------------------------------------------------------ inbound
    async def on_message(self, message: discord.Message) -> None:
        async with self._intake:
            try:
                inbound = await self.translate(message)
                if inbound is not None:
                    await self._submit_inbound(inbound)
            except Exception:  # noqa: BLE001 - task root for one gateway event
                log.exception("discord: message %s in channel %s not handled", message.id, message.channel.id)

    async def _submit_inbound(self, inbound: Inbound) -> SubmitResult:
        assert self._submit is not None
        result = await self._submit(inbound)
        if result.outcome is SubmitOutcome.REFUSED and result.reason == "shutting down":
            log.info("discord: shutting down; message %s in channel %s was not stored", inbound.message_id,
                     inbound.chat.chat_id)
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
        said = addressing(message.content, me.id, users={u.id: u.display_name for u in message.mentions},
                          roles={r.id: r.name for r in message.role_mentions},
                          bot_roles={r.id for r in message.role_mentions if r.tags and r.tags.bot_id == me.id},
                          channels={c.id: c.name for c in message.channel_mentions})
        attachments = tuple(_attachment(a) for a in message.attachments)
        if not said.text and not attachments:
            return None
        replied = _replied_author(message)
        addressed = place.chat_type == "dm" or said.mentioned or replied == me.id or place.bot_thread
        if place.chat_type != "dm" and self.config.require_mention and not addressed:
            return None
        if (addressed and isinstance(message.channel, discord.TextChannel) and self.config.thread_replies == "auto"
                and not said.text.startswith("/")):
            place = self._plan_thread(message, place, said.text)
        self._remember(message)
        reference = message.reference
        return Inbound(
            chat=ChatRef(PLATFORM, place.chat_type, place.chat_id, place.thread_id),
            user_id=str(author.id), text=said.text, message_id=str(message.id), received_at=message.created_at,
            user_name=author.display_name, username=author.name,
            reply_to_id=str(reference.message_id) if reference and reference.message_id else None,
            attachments=attachments, is_addressed=addressed, is_bot=is_bot, chat_title=place.title,
            space_id=place.space_id, roles=_roles(author))

    async def _place(self, channel: Any, guild: discord.Guild | None) -> Place | None:
        if isinstance(channel, discord.PartialMessageable) and guild is not None:
            channel = await self._fetch_channel(channel.id)  # not cached: ask once what kind it is
            if channel is None:
                return None
        return place_of(channel, guild, self._client.user.id if self._client and self._client.user else 0)

    async def _fetch_channel(self, channel_id: int) -> Any:
        assert self._client is not None
        try:
            return await self._client.fetch_channel(channel_id)
        except discord.HTTPException as exc:
            log.warning("discord: cannot look up channel %s (%s); its message is dropped", channel_id, exc)
            return None

    def _plan_thread(self, message: discord.Message, place: Place, text: str) -> Place:
        """`thread_replies: auto`: a thread started from a message has the message's id, so the session key is
        known now; the thread itself is opened only once the core answers (a stranger's mention opens nothing)."""
        if message.thread is None:  # a replayed mention already has its thread
            self._thread_starts[str(message.id)] = (message, thread_name(text, message.author.display_name))
            while len(self._thread_starts) > REMEMBERED_THREAD_STARTS:
                self._thread_starts.popitem(last=False)
        return replace(place, thread_id=str(message.id), bot_thread=True)

    async def _open_thread(self, chat: ChatRef) -> int:
        """Open the planned thread before the first typing indicator or message; returns where to post."""
        thread_id = chat.thread_id or ""
        async with self._thread_lock:
            planned = self._thread_starts.pop(thread_id, None)
            if planned is not None:
                message, name = planned
                try:
                    await message.create_thread(name=name)
                except discord.HTTPException as exc:
                    if exc.code != 160004:  # 160004: the message already has a thread (ours, from a replay)
                        log.warning("discord: cannot open a thread in channel %s (%s); answering in the channel",
                                    chat.chat_id, exc)
                        self._no_thread.add(thread_id)
                except BaseException:
                    self._thread_starts[thread_id] = planned  # a network failure: the retry tries again
                    raise
        return int(chat.chat_id) if thread_id in self._no_thread else int(thread_id or chat.chat_id)

    def _remember(self, message: discord.Message) -> None:
        self._origins[str(message.id)] = _Origin(message.channel.id, message.author.id)
        while len(self._origins) > REMEMBERED_MESSAGES:
            self._origins.popitem(last=False)

    # ------------------------------------------------------------------ outbound
    async def send(self, message: OutboundMessage) -> str:
        client = self._client
        if client is None or client.is_closed():
            raise PlatformUnavailable(PLATFORM, "not connected")
        text = message.plain if message.use_plain else message.text
        origin = self._origins.get(message.reply_to_id or "")
        mentions = allowed_mentions(origin.author_id if origin else None)
        try:
            pending = self._interaction_for(message.reply_to_id)
            if pending is not None:
                sent = await self._answer_interaction(pending, text, mentions)
                if sent is not None:
                    return sent
            target = await self._open_thread(message.chat)
            channel = client.get_partial_messageable(target)
            reference = reference_for(message, target, origin)
            if reference is not None:
                posted = await channel.send(text, reference=reference, allowed_mentions=mentions)
            else:
                posted = await channel.send(text, allowed_mentions=mentions)
        except (discord.DiscordException, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise translate_error(exc) from None
        return str(posted.id)

    def _interaction_for(self, our_id: str | None) -> _PendingInteraction | None:
        pending = self._interactions.get(our_id or "")
        if pending is not None and self.monotonic() - pending.created >= INTERACTION_TTL_S:
            del self._interactions[our_id or ""]
            return None
        return pending

    async def _answer_interaction(self, pending: _PendingInteraction, text: str,
                                  mentions: discord.AllowedMentions) -> str | None:
        """The first message replaces the "thinking…" placeholder; later ones are follow-ups."""
        interaction = pending.interaction
        sent: discord.Message
        try:
            if not pending.answered:
                sent = await interaction.edit_original_response(content=text, allowed_mentions=mentions)
                pending.answered = True
            else:
                sent = await interaction.followup.send(text, ephemeral=pending.ephemeral, allowed_mentions=mentions,
                                                       wait=True)
        except discord.NotFound:  # the token expired or the response was dismissed: post in the channel
            self._interactions = {k: p for k, p in self._interactions.items() if p is not pending}
            return None
        return str(sent.id)

    # ------------------------------------------------------------------ typing
    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """discord.py's `channel.typing()` refreshes "is typing…" every 5 s; it stops the moment the turn ends."""
        client = self._client
        indicator = None
        if client is not None and not client.is_closed():
            try:
                indicator = client.get_partial_messageable(await self._open_thread(chat)).typing()
                await indicator.__aenter__()
            except (discord.DiscordException, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                log.debug("discord: typing indicator in channel %s failed: %s", chat.chat_id, exc)
                indicator = None
        self._typing += indicator is not None
        try:
            yield
        finally:
            if indicator is not None:
                self._typing -= 1
                await indicator.__aexit__(None, None, None)

    @property
    def typing_active(self) -> int:
        return self._typing


# ---------------------------------------------------------------------- the one place the library's URLs are set
def point_library_at(config: DiscordConfig) -> None:
    """discord.py keeps its endpoints in class attributes (process-wide); set them from config, here only."""
    if config.api_base:
        discord.http.Route.BASE = config.api_base.rstrip("/")
    if config.gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(config.gateway_url)


# ---------------------------------------------------------------------- pure translation helpers
def addressing(content: str, me_id: int, *, users: Mapping[int, str], roles: Mapping[int, str],
               bot_roles: set[int], channels: Mapping[int, str]) -> Addressing:
    """Drop our mention (or our bot role's); show other mentions the way a Discord user reads them."""
    mentioned = False

    def readable(match: re.Match[str]) -> str:
        nonlocal mentioned
        kind, target = match.group(1), int(match.group(2))
        if (kind in ("@", "@!") and target == me_id) or (kind == "@&" and target in bot_roles):
            mentioned = True
            return "\x00"
        if kind == "#":
            return f"#{channels[target]}" if target in channels else match.group(0)
        names = roles if kind == "@&" else users
        return f"@{names[target]}" if target in names else match.group(0)

    text = _MENTION.sub(readable, content)
    text = re.sub(r"^\s*\x00[,:;]?\s*", "", text)  # "@bot, what…" → "what…"
    text = re.sub(r"(?m)^[ \t]*\x00[ \t]*\n", "", text)  # a line that only mentioned us
    text = re.sub(r"[ \t]*\x00", "", text)
    return Addressing(text=text.strip(), mentioned=mentioned)


def place_of(channel: Any, guild: discord.Guild | None, me_id: int) -> Place | None:
    if isinstance(channel, (discord.DMChannel, discord.GroupChannel)) or (
            guild is None and isinstance(channel, discord.PartialMessageable)):
        return Place("dm", str(channel.id))
    space = str(guild.id) if guild is not None else None
    if isinstance(channel, discord.Thread):
        return Place("group", str(channel.parent_id), str(channel.id), channel.name, space,
                     bot_thread=channel.owner_id == me_id)
    if isinstance(channel, discord.abc.GuildChannel):
        return Place("group", str(channel.id), None, channel.name, space)
    return None


def interaction_inbound(interaction: discord.Interaction[Any], text: str) -> Inbound:
    me_id = interaction.client.user.id if interaction.client.user else 0
    place = place_of(interaction.channel, interaction.guild, me_id)
    if place is None:
        chat_id = str(interaction.channel_id or interaction.user.id)
        guild_id = interaction.guild_id
        place = Place("group", chat_id, space_id=str(guild_id)) if guild_id else Place("dm", chat_id)
    user = interaction.user
    return Inbound(chat=ChatRef(PLATFORM, place.chat_type, place.chat_id, place.thread_id),
                   user_id=str(user.id), text=text, message_id=str(interaction.id),
                   received_at=interaction.created_at, user_name=user.display_name, username=user.name,
                   is_addressed=True, is_bot=user.bot, chat_title=place.title, space_id=place.space_id,
                   roles=_roles(user))


def thread_name(text: str, author: str) -> str:
    first = " ".join(text.split())
    if not first:
        return f"Chat with {author}"[:THREAD_NAME_MAX]
    return first if len(first) <= THREAD_NAME_MAX else first[:THREAD_NAME_MAX - 1].rstrip() + "…"


def allowed_mentions(asker_id: int | None) -> discord.AllowedMentions:
    """Model output never pings @everyone, @here or roles; it may ping only the person it answers."""
    users: bool | list[discord.Object] = [discord.Object(id=asker_id)] if asker_id else False
    return discord.AllowedMentions(everyone=False, roles=False, users=users, replied_user=False)


def reference_for(message: OutboundMessage, target: int, origin: _Origin | None) -> discord.MessageReference | None:
    """The first chunk replies to the triggering message when it lives where we post: a thread grown from it
    (same id) already shows it, and Discord refuses references across channels."""
    our_id = message.reply_to_id or ""
    if message.chunk_index != 0 or not our_id.isdigit() or target == int(our_id):
        return None
    if origin is not None and origin.channel_id != target:
        return None
    return discord.MessageReference(message_id=int(our_id), channel_id=target, fail_if_not_exists=False)


def translate_error(exc: BaseException) -> AdapterError:
    """discord.py already waits out 429s and retries some 5xx; what still surfaces is mapped once, here."""
    if isinstance(exc, discord.RateLimited):
        return RateLimited(PLATFORM, float(exc.retry_after))
    if isinstance(exc, discord.HTTPException):
        detail = f"{exc.status} {exc.code}: {exc.text}".strip()
        if exc.status == 429:
            return RateLimited(PLATFORM, _retry_after(exc))
        if exc.status >= 500:
            return PlatformUnavailable(PLATFORM, detail)
        if exc.status == 403 or exc.code in _GONE_CODES:
            return RecipientUnavailable(PLATFORM, detail)
        if exc.status == 400 and exc.code == 50035 and "content" in exc.text:
            return MarkupRejected(PLATFORM, detail)
        return AdapterError(PLATFORM, detail)
    if isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError)):
        return PlatformUnavailable(PLATFORM, str(exc) or type(exc).__name__)
    return AdapterError(PLATFORM, f"{type(exc).__name__}: {exc}")


def gateway_failure(exc: BaseException) -> AdapterError:
    """Close codes no reconnect can fix become `AdapterFatal` (the supervisor logs it once and stays down)."""
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        return AdapterFatal(PLATFORM, INTENT_HINT)
    if isinstance(exc, discord.ConnectionClosed) and exc.code in _FATAL_CLOSE:
        return AdapterFatal(PLATFORM, _FATAL_CLOSE[exc.code])
    if isinstance(exc, discord.LoginFailure):
        return AdapterFatal(PLATFORM, TOKEN_HINT)
    return AdapterError(PLATFORM, f"gateway: {type(exc).__name__}: {exc}")


def _retry_after(exc: discord.HTTPException) -> float:
    try:
        return float(exc.response.headers.get("Retry-After", 1.0))
    except (TypeError, ValueError, AttributeError):
        return 1.0


def _replied_author(message: discord.Message) -> int | None:
    reference = message.reference
    resolved = reference.resolved if reference is not None else None
    return resolved.author.id if isinstance(resolved, discord.Message) else None


def _roles(user: discord.abc.User) -> tuple[str, ...]:
    if not isinstance(user, discord.Member):
        return ()
    return tuple(str(r.id) for r in user.roles if not r.is_default())


def _attachment(item: discord.Attachment) -> Attachment:
    mime = item.content_type or ""
    kind = {"image": "photo", "audio": "audio", "video": "video"}.get(mime.split("/", 1)[0], "file")
    return Attachment(kind, name=item.filename, mime_type=item.content_type, size=item.size)
