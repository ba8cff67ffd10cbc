"""Slack adapter on slack-bolt (async): one AsyncApp over Socket Mode or the HTTP Events API; events
→ `Inbound`, chunks → chat.postMessage (or a slash command's `respond`).

Stored, then acked: bolt runs our listener before it answers Slack (`process_before_response`), and
the listener only translates and hands the message to `submit` (which stores and queues; the turn
runs later), so a message we ack is on disk and one we could not store is not acked and comes again.
Slack gives up after 3 s, so the listener is bounded: lookups that enrich a message
(conversations.info, users.info, a thread's history) get 1.5 s together; what is not back by then is
guessed from the id, left out, or, for a thread's history, shown with the thread's next message
(this one carries a note); and the listener returns by 2.5 s even when the core is still sending an
inline answer (a command's reply), which in any case waits until the ack is out. Slack's
redeliveries (same event id, same message) and the two events one mention makes (`app_mention` and
`message`) are dropped here by channel + ts before they reach the store; the store's own dedupe on
the message id covers a restart. This module holds the lifecycle and the inbound side (events and
the slash command); the HTTP server or Socket Mode websocket is in `connection`, sending and the
thinking reaction in `outbound`, the ack plumbing in `ack`, the Web API lookups in `lookup`, the
pure translation in `text`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.ack import Intake, NotStored
from adapters.slack.buttons import ACTION, Buttons
from adapters.slack.connection import Connection
from adapters.slack.files import SlackFiles
from adapters.slack.lookup import Directory, task_result
from adapters.slack.outbound import THINKING_REACTION, Outbound
from adapters.slack.preview import SlackPreview
from adapters.slack.text import (
    NETWORK_ERRORS,
    PLATFORM,
    Me,
    Person,
    Recent,
    Target,
    attachments,
    describe,
    event_target,
    mentioned_users,
    put,
    received_at,
    slack_to_text,
    slash_text,
    start_error,
)
from adapters.slack.voice import upload_file, upload_voice
from gateway.config.settings import SlackConfig
from gateway.errors import PlatformUnavailable
from gateway.events import (
    DEFAULT_ACCOUNT,
    Attachment,
    ChatRef,
    ChatType,
    Inbound,
    OutboundAudio,
    OutboundFile,
    OutboundMessage,
    PreviewPart,
    PreviewStyle,
    ServeHttp,
    Submit,
    SubmitOutcome,
    SubmitResult,
    on_account,
)

__all__ = ["THREAD_UNREAD_NOTE", "SlackAdapter", "mentioned_users", "slack_to_text"]

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://slack.com/api/"
# names, channel type, thread history: what is not back by then is guessed or deferred
ENRICH_BUDGET_S = 1.5
# the listener returns by then, whatever the core is still doing (Slack waits 3 s)
ACK_BUDGET_S = 2.5
THREAD_UNREAD_NOTE = (
    "[This message is part of a thread that began before you joined; its earlier messages could "
    "not be read in time and will come with the next message here.]"
)


@dataclass(frozen=True, slots=True)
class SlackTimings:
    """The clock the adapter reads and how long it waits: Socket Mode's ping interval and timeout,
    the budget for Web API lookups before a message is handed in, and for Slack's ack (3 s)."""

    ping_interval: float = 10.0
    ping_timeout: float = 10.0
    enrich_budget: float = ENRICH_BUDGET_S
    ack_budget: float = ACK_BUDGET_S
    monotonic: Callable[[], float] = time.monotonic


# ---------------------------------------------------------------------- the adapter
class SlackAdapter:
    """`start` checks the bot token (auth.test), then opens Socket Mode or serves the Events API
    over HTTP.

    Platform-private state stays here, keyed by our ids: the threads the bot takes part in (so
    follow-ups need no mention) with the chat type each started with, and (in its helpers) the
    newest triggering message per chat (for the thinking reaction), slash commands' `respond`
    callables, Web API lookups in flight and the requests not yet acked.
    """

    platform = PLATFORM
    space_noun = "workspace"

    def __init__(
        self,
        config: SlackConfig,
        *,
        timings: SlackTimings = SlackTimings(),
        thinking_reaction: str = THINKING_REACTION,
        serve: ServeHttp | None = None,
        account: str = DEFAULT_ACCOUNT,
    ) -> None:
        self.config = config
        self.account = account  # the bot account (one adapter each): what it hands in names it
        self.monotonic = timings.monotonic
        self.enrich_budget = timings.enrich_budget
        self.ack_budget = timings.ack_budget
        self._client: AsyncWebClient | None = None
        self._me: Me | None = None
        self._connection = Connection(
            config,
            ping_interval=timings.ping_interval,
            ping_timeout=timings.ping_timeout,
            serve=serve,
        )
        # listeners, hand-ins and requests not yet acked
        self._intake = Intake(timings.ack_budget)
        # chat types, people, threads, lookups in flight
        self._directory = Directory(config, timings.enrich_budget)
        # replies and the thinking mark
        self._outbound = Outbound(self._intake, timings.monotonic, thinking_reaction)
        # Slack's own streaming, or a message updated
        self._preview = SlackPreview(self._outbound, timings.monotonic)
        self._message_keys = Recent()
        # keeps the type it started with
        self._threads: OrderedDict[tuple[str, str], ChatType] = OrderedDict()
        # thread reads that were late
        self._unread: OrderedDict[tuple[str, str], asyncio.Task[str]] = OrderedDict()
        # attachments, with the bot token
        self._files = SlackFiles(config.bot_token.value, config.api_url)
        self._buttons = Buttons()  # Block Kit buttons and their block_actions

    # ------------------------------------------------------------------ lifecycle
    def remember_threads(self, threads: Sequence[ChatRef]) -> None:
        """The threads the bot took part in before a restart (the core read them from its store):
        their next message is followed without a mention, as before the restart."""
        for chat in threads:
            if chat.thread_id:
                put(self._threads, (chat.chat_id, chat.thread_id), chat.chat_type)

    async def start(self, submit: Submit) -> None:
        cfg = self.config
        self._intake.submit = on_account(submit, self.account)
        client = AsyncWebClient(token=cfg.bot_token.value, base_url=cfg.api_url or DEFAULT_API_URL)
        self._client = self._outbound.client = self._buttons.client = client
        me = self._me = await self._auth_test(client)
        self._directory.client, self._directory.me = client, me
        app = self._build_app(client)
        try:
            await self._connection.open(app, client)
        except BaseException:
            await self.stop()
            raise
        log.info("slack: @%s ready in team %s (%s mode)", me.name, me.team_id, cfg.mode)

    async def stop(self) -> None:
        await self._connection.close()
        await self._intake.drain()
        await self._buttons.stop()
        lookups = [*self._directory.in_flight.values(), *self._unread.values()]
        for task in lookups:
            task.cancel()
        await asyncio.gather(*lookups, return_exceptions=True)
        self._directory.in_flight.clear()
        self._unread.clear()
        await self._files.close()

    def media(self, attachment: Attachment) -> AsyncIterator[bytes]:
        """A file's bytes from its private URL with the bot token (the core bounds size and time;
        see `files`)."""
        return self._files.chunks(attachment)

    async def _auth_test(self, client: AsyncWebClient) -> Me:
        try:
            found = await client.auth_test()
        except SlackApiError as exc:
            raise start_error(exc, "bot token", "SLACK_BOT_TOKEN") from None
        except NETWORK_ERRORS as exc:
            raise PlatformUnavailable(
                PLATFORM, f"cannot reach the Slack Web API at {client.base_url}: {describe(exc)}"
            ) from None
        return Me(
            user_id=str(found.get("user_id") or ""),
            bot_id=str(found.get("bot_id") or ""),
            team_id=str(found.get("team_id") or ""),
            name=str(found.get("user") or "bot"),
        )

    def _build_app(self, client: AsyncWebClient) -> AsyncApp:
        cfg = self.config
        # process_before_response: bolt acks (HTTP 200 / envelope ack) only once the listener has
        # returned, and not at all (HTTP 500 / no ack) when it raised, so Slack redelivers a message
        # we did not store.
        # logger: bolt's own loggers copy this one's level (WARNING, gateway/telemetry/logs.py)
        # rather than the root's, which let it write every unsigned request body at INFO.
        app = AsyncApp(
            client=client,
            signing_secret=cfg.signing_secret.value if cfg.signing_secret else "",
            request_verification_enabled=cfg.mode == "http",
            process_before_response=True,
            logger=logging.getLogger("slack_bolt"),
        )

        # Bolt injects listener arguments by parameter name,
        # so these are plain functions, not bound methods.
        async def on_message(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self._on_event(body, event, via_mention=False)

        async def on_mention(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self._on_event(body, event, via_mention=True)

        async def on_command(
            ack: Callable[[], Awaitable[None]],
            body: dict[str, Any],
            respond: Callable[..., Awaitable[Any]],
        ) -> None:
            await ack()  # recorded; bolt sends it when this returns (the prompt is stored by then)
            await self._on_command(body, respond)

        async def on_action(
            ack: Callable[[], Awaitable[None]],
            body: dict[str, Any],
            respond: Callable[..., Awaitable[Any]],
        ) -> None:
            await ack()  # sent when this returns: the click is handed in first (buttons.py)
            with self._intake.tracked():
                await self._buttons.click(body, respond, self._intake.submit, self._display_name)

        async def on_error(error: Exception, body: dict[str, Any]) -> None:
            what = body.get("command") or (body.get("event") or {}).get("type") or body.get("type")
            if isinstance(error, NotStored):
                log.warning(
                    "slack: %s not acked: %s; Slack sends events again (a slash command shows its "
                    "user an error)",
                    what,
                    error,
                )
            else:
                log.error(
                    "slack: %s not handled, so not acked (%s)",
                    what,
                    describe(error),
                    exc_info=error,
                )

        app.event("message")(on_message)
        app.event("app_mention")(on_mention)
        app.command(cfg.slash_command)(on_command)
        app.action(ACTION)(on_action)
        app.error(on_error)
        return app

    @property
    def http_port(self) -> int | None:
        return self._connection.http_port

    async def ping(self) -> bool:
        """Socket Mode: one websocket ping answered in time;
        HTTP mode: the server is up (see `connection`)."""
        return await self._connection.ping()

    # ------------------------------------------------------------------ inbound: events
    async def _on_event(
        self, body: Mapping[str, Any], event: Mapping[str, Any], *, via_mention: bool
    ) -> None:
        with self._intake.tracked():
            await self._handle_event(body, event, via_mention)

    async def _handle_event(
        self, body: Mapping[str, Any], event: Mapping[str, Any], via_mention: bool
    ) -> None:
        assert self._me is not None
        target = event_target(event, via_mention, self._me, self.config, self._threads)
        if target is None:
            return
        key = (target.channel, target.ts)
        if not self._message_keys.add(key):
            # a redelivery, or the other event of a mention: Slack's retries, sent
            log.debug(
                "slack: %s %s delivered again (event %s); dropped", *key, body.get("event_id")
            )
            return  # while the first delivery is still being stored, never reach the store
        try:
            inbound = await self._inbound(body, event, target)
            if inbound is not None:
                await self._intake.store(
                    inbound, lambda result: self._accepted(inbound, target, result)
                )
        except BaseException:
            # not stored, so bolt does not ack it: Slack's retry of it must get through
            self._message_keys.discard(key)
            raise

    def _accepted(self, inbound: Inbound, target: Target, result: SubmitResult) -> None:
        """A message that gets a turn: its thread is ours
        from now on, and it gets the thinking mark."""
        if result.outcome is not SubmitOutcome.ACCEPTED or result.reason == "command":
            return
        chat = inbound.chat
        if chat.thread_id:
            put(self._threads, (chat.chat_id, chat.thread_id), chat.chat_type)
        self._outbound.answering(chat.chat_id, chat.thread_id, target.ts)

    async def _inbound(
        self, body: Mapping[str, Any], event: Mapping[str, Any], target: Target
    ) -> Inbound | None:
        assert self._me is not None
        raw = str(event.get("text") or "")
        files = attachments(event)
        if not slack_to_text(raw, self._me.user_id, {}) and not files:
            return None
        people = (mentioned_users(raw) - {self._me.user_id}) | (
            set() if target.is_bot else {target.user_id}
        )
        thread = (target.channel, target.thread_id) if target.thread_id else None
        late = self._unread.pop(thread, None) if thread else None
        history = late
        if history is None and target.hydrate:
            history = self._directory.lookup(
                ("thread", target.channel, target.hydrate, target.ts),
                functools.partial(
                    self._directory.thread_context, target.channel, target.hydrate, target.ts
                ),
            )
        chat_type, names = await self._directory.enrich(
            target.channel, self._known_type(target), people, () if history is None else (history,)
        )
        text, context = slack_to_text(raw, self._me.user_id, names), ""
        if history is not None:
            text, context = self._with_history(text, history, thread, noted=late is not None)
        person = (
            self._directory.people.get(target.user_id, Person())
            if not target.is_bot
            else Person(
                name=str(
                    event.get("username") or (event.get("bot_profile") or {}).get("name") or ""
                )
                or None
            )
        )
        return Inbound(
            chat=ChatRef(PLATFORM, chat_type, target.channel, target.thread_id),
            user_id=target.user_id,
            text=text,
            context=context,
            message_id=target.ts,
            received_at=received_at(target.ts),
            user_name=person.name,
            attachments=files,
            is_addressed=target.addressed,
            is_bot=target.is_bot,
            username=person.handle,
            space_id=str(body.get("team_id") or event.get("team") or self._me.team_id) or None,
        )

    def _with_history(
        self, text: str, history: asyncio.Task[str], thread: tuple[str, str] | None, *, noted: bool
    ) -> tuple[str, str]:
        """The text, and the thread's earlier messages as its context (other people's words: the
        core frames them as untrusted); while reading them is still under way, a note (once) now,
        and the transcript with the thread's next message."""
        if history.done():
            return text, task_result(history, "")
        if thread is not None:
            put(self._unread, thread, history)
        if noted:
            return text, ""
        log.info(
            "slack: thread %s in %s not read within %.1fs; answering without it for now",
            thread[1] if thread else "?",
            thread[0] if thread else "?",
            self.enrich_budget,
        )
        return f"{THREAD_UNREAD_NOTE}\n\n{text}", ""

    def _known_type(self, target: Target) -> ChatType | None:
        """The chat's type without asking Slack, if we can; a thread keeps the type it started with,
        so a guess on its first message does not split its session."""
        if target.is_dm:
            return "dm"
        if target.thread_id and (target.channel, target.thread_id) in self._threads:
            return self._threads[(target.channel, target.thread_id)]
        return self._directory.cached_type(target.channel, target.channel_type)

    # ------------------------------------------------------------------ inbound: the slash command
    async def _on_command(
        self, body: Mapping[str, Any], respond: Callable[..., Awaitable[Any]]
    ) -> None:
        with self._intake.tracked():
            # a failure raises: no ack, and Slack shows the user that the command failed
            await self._handle_command(body, respond)

    async def _handle_command(
        self, body: Mapping[str, Any], respond: Callable[..., Awaitable[Any]]
    ) -> None:
        """`/agent new|status|help|…` become the in-chat commands; any other text is a prompt; none
        is help."""
        channel, user = str(body.get("channel_id") or ""), str(body.get("user_id") or "")
        text = slash_text(str(body.get("text") or ""))
        message_id = f"cmd:{body.get('trigger_id') or time.time()}"
        self._outbound.slash_command(message_id, respond, user, channel)
        chat_type, _ = await self._directory.enrich(
            channel, self._directory.cached_type(channel, None), {user}
        )
        person = self._directory.people.get(user, Person())
        assert self._me is not None
        await self._intake.store(
            Inbound(
                chat=ChatRef(PLATFORM, chat_type, channel),
                user_id=user,
                text=text,
                message_id=message_id,
                received_at=datetime.now(UTC),
                user_name=person.name,
                username=str(body.get("user_name") or "") or person.handle,
                space_id=str(body.get("team_id") or self._me.team_id) or None,
            )
        )

    async def member_roles(self, space_id: str, user_id: str) -> tuple[str, ...] | None:
        """Asked before each run of a job made in a workspace: None once the creator's account is
        deactivated there (Slack has no roles the access rules read, so a member has none)."""
        if self._me is None:
            raise PlatformUnavailable(PLATFORM, "not connected")
        return () if await self._directory.still_member(user_id) else None

    # ------------------------------------------------------------------ outbound (in `outbound`)
    async def send(self, message: OutboundMessage) -> str:
        return await self._outbound.send(message)

    async def send_audio(self, audio: OutboundAudio) -> str:
        """A voice reply: an audio file in the thread (`voice`), once the message's ack is out."""
        await self._outbound.hold(audio.chat.chat_id, audio.reply_to_id or "")
        return await upload_voice(self._outbound.client, audio)

    async def send_file(self, file: OutboundFile) -> str:
        """A file for the chat, uploaded in the thread (`voice`), once the message's ack is out."""
        await self._outbound.hold(file.chat.chat_id, file.reply_to_id or "")
        return await upload_file(self._outbound.client, file)

    def typing(self, chat: ChatRef) -> AbstractAsyncContextManager[None]:
        """The thinking reaction on the message being answered, for the whole turn."""
        return self._outbound.typing(chat)

    def _display_name(self, user_id: str) -> str | None:
        """A person's display name as the Web API told it earlier (no lookup inside Slack's 3 s)."""
        return self._directory.people.get(user_id, Person()).name

    async def close_choices(self, message: OutboundMessage, platform_message_id: str) -> None:
        """A decided request: its buttons go, its text shows the outcome (buttons.py)."""
        await self._buttons.close(message, platform_message_id)

    # ----------------------------------------------------------------- live previews (in `preview`)
    def preview_style(self, chat: ChatRef, reply_to_id: str | None) -> PreviewStyle | None:
        return self._preview.style(chat, reply_to_id)

    async def show_preview(self, part: PreviewPart) -> str:
        return await self._preview.show(part)

    async def finish_preview(self, message: OutboundMessage, platform_message_id: str) -> str:
        return await self._preview.finish(message, platform_message_id)

    async def drop_preview(self, chat: ChatRef, platform_message_id: str) -> None:
        await self._preview.drop(chat, platform_message_id)
