"""Slack outbound: a chunk → chat.postMessage (in the thread it answers), or through a slash
command's response_url while that lasts; and the thinking reaction on the message being answered,
for the whole turn."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.ack import Intake
from adapters.slack.buttons import blocks
from adapters.slack.text import (
    API_ERRORS,
    NETWORK_ERRORS,
    PLATFORM,
    describe,
    error_code,
    put,
    retry_after,
    send_error,
)
from gateway.errors import PlatformUnavailable, RateLimited
from gateway.events import ChatRef, OutboundKind, OutboundMessage

# one logger for the Slack adapter, whichever module speaks
log = logging.getLogger("adapters.slack.adapter")

THINKING_REACTION = "eyes"
RESPONSE_URL_USES = 5  # a slash command's response_url takes 5 posts within 30 minutes
RESPONSE_URL_TTL_S = 30 * 60.0


@dataclass(slots=True)
class Responder:
    """A slash command's `respond` (its response_url), kept under our message id for the replies."""

    respond: Callable[..., Awaitable[Any]]
    user_id: str
    channel_id: str
    created: float
    uses: int = 0


class Outbound:
    """What goes to Slack. `client` is set once the adapter's `start` has made it. The inbound side
    tells it which message each chat's next turn answers (`answering`) and which slash command a
    message came from (`slash_command`); an answer to a message waits until Slack has that message's
    ack (`intake.hold`)."""

    def __init__(
        self,
        intake: Intake,
        monotonic: Callable[[], float],
        thinking_reaction: str = THINKING_REACTION,
    ) -> None:
        self.client: AsyncWebClient | None = None
        self.thinking_reaction = thinking_reaction
        self._intake = intake
        self._monotonic = monotonic
        self._latest: OrderedDict[tuple[str, str | None], str] = OrderedDict()
        self._responders: OrderedDict[str, Responder] = OrderedDict()

    def answering(self, chat_id: str, thread_id: str | None, ts: str) -> None:
        """The newest message a turn in this chat answers: the thinking reaction goes on it."""
        put(self._latest, (chat_id, thread_id), ts)

    def slash_command(
        self, message_id: str, respond: Callable[..., Awaitable[Any]], user_id: str, channel_id: str
    ) -> None:
        """A message that came as a slash command: its
        replies go through the command's `respond` first."""
        put(
            self._responders, message_id, Responder(respond, user_id, channel_id, self._monotonic())
        )
        # no message to mark: the thinking reaction must not land elsewhere
        self._latest.pop((channel_id, None), None)

    def from_slash_command(self, our_id: str | None) -> bool:
        return (our_id or "") in self._responders

    async def hold(self, chat_id: str, our_id: str) -> None:
        """Nothing goes to a chat before Slack has the ack of the message it answers."""
        await self._intake.hold(chat_id, our_id)

    # ------------------------------------------------------------------ messages
    async def send(self, message: OutboundMessage) -> str:
        client = self.client
        if client is None:
            raise PlatformUnavailable(PLATFORM, "not started")
        await self._intake.hold(message.chat.chat_id, message.reply_to_id or "")
        text = message.plain if message.use_plain else message.text
        # a message with buttons goes to the channel: a slash command's response_url takes none
        responder = None if message.choices else self._responders.get(message.reply_to_id or "")
        if responder is not None:
            sent = await self._respond(responder, message, text)
            if sent is not None:
                return sent
            if message.kind is not OutboundKind.REPLY:  # the response_url is used up: stay private
                return await self._call(
                    client.chat_postEphemeral(
                        channel=responder.channel_id, user=responder.user_id, text=text
                    ),
                    "message_ts",
                )
        kwargs: dict[str, Any] = {
            "channel": message.chat.chat_id,
            "text": text,
            "mrkdwn": not message.use_plain,
        }
        # buttons (the Interactive ability: adapters/slack/buttons.py)
        if message.choices is not None:
            kwargs["blocks"] = blocks(text, not message.use_plain, message.choices)
        if message.chat.thread_id:
            kwargs["thread_ts"] = message.chat.thread_id
        return await self._call(client.chat_postMessage(**kwargs), "ts")

    async def _call(self, call: Awaitable[Any], id_field: str) -> str:
        try:
            response = await call
        except API_ERRORS as exc:
            raise send_error(exc) from None
        return str(response.get(id_field) or "")

    async def _respond(
        self, responder: Responder, message: OutboundMessage, text: str
    ) -> str | None:
        """Post through the slash command's response_url: command answers privately, prompt answers
        for all."""
        if (
            responder.uses >= RESPONSE_URL_USES
            or self._monotonic() - responder.created >= RESPONSE_URL_TTL_S
        ):
            return None
        responder.uses += 1
        kind = "in_channel" if message.kind is OutboundKind.REPLY else "ephemeral"
        try:
            response = await responder.respond(
                text=text, response_type=kind, replace_original=False
            )
        except NETWORK_ERRORS as exc:
            responder.uses -= 1
            raise PlatformUnavailable(PLATFORM, f"response_url: {describe(exc)}") from None
        status = int(getattr(response, "status_code", 200))
        if status == 429 or status >= 500:
            responder.uses -= 1  # not posted: the retry may use it
            raise RateLimited(PLATFORM, retry_after(getattr(response, "headers", None)))
        if status >= 500:
            raise PlatformUnavailable(PLATFORM, f"response_url answered {status}")
        if status >= 400:  # expired or used up: the caller falls back to the Web API
            log.info("slack: response_url answered %s; falling back to the Web API", status)
            responder.uses = RESPONSE_URL_USES
            return None
        return f"{message.reply_to_id}:{responder.uses}"

    # ------------------------------------------------------------------ thinking indicator
    @asynccontextmanager
    async def typing(self, chat: ChatRef) -> AsyncIterator[None]:
        """A reaction on the message being answered, added when the turn starts and removed when it
        ends: one mark per turn, however long it takes (no repeated "typing" calls)."""
        ts = self._latest.get((chat.chat_id, chat.thread_id))
        client = self.client
        added = bool(ts and client and self.thinking_reaction) and await self._react(
            "add", chat.chat_id, ts or ""
        )
        try:
            yield
        finally:
            if added:
                await self._react("remove", chat.chat_id, ts or "")

    async def _react(self, action: str, channel: str, ts: str) -> bool:
        assert self.client is not None
        call = self.client.reactions_add if action == "add" else self.client.reactions_remove
        try:
            await call(channel=channel, timestamp=ts, name=self.thinking_reaction)
        except SlackApiError as exc:
            if error_code(exc) == "already_reacted":
                return False  # someone else's mark: leave it alone
            log.debug(
                "slack: reactions.%s on %s/%s failed (%s)", action, channel, ts, error_code(exc)
            )
            return False
        except NETWORK_ERRORS as exc:
            log.debug(
                "slack: reactions.%s on %s/%s failed (%s)", action, channel, ts, describe(exc)
            )
            return False
        return True
