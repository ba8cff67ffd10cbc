"""Slack live previews: Slack's own streaming (`chat.startStream` / `appendStream` / `stopStream`)
in a thread, else a message posted and updated with `chat.update`; either way the message ends as
the answer itself.

Slack's rate tiers count per method per workspace: `chat.update` 50+ a minute (Tier 3),
`appendStream` 100+ (Tier 4), `startStream` and `stopStream` 20+ (Tier 2). The core paces every
preview in the workspace 1.2 s apart (one pacing scope for all channels), and at most 18 streams
start a minute; past that, or where Slack has no streaming (an older workspace, a chat without a
thread), the preview is a message updated in place. A streamed message's id is stored as `s:<ts>`,
so after a restart the answer still stops the stream before it updates it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.outbound import Outbound
from adapters.slack.text import API_ERRORS, NETWORK_ERRORS, PLATFORM, error_code, send_error
from gateway.errors import PlatformUnavailable, PreviewGone
from gateway.events import ChatRef, OutboundMessage, PreviewPart, PreviewStyle

log = logging.getLogger("adapters.slack.adapter")

# chat.update's Tier 3 (50 a minute) for the whole workspace, and appendStream far under
INTERVAL_S = 1.2
SCOPE = "workspace"
# chat.startStream is Tier 2 (20 a minute): the rest of a minute's previews are updates
STARTS_PER_MINUTE = 18
STREAMED = "s:"  # the id of a part Slack streams: "s:<ts>"
_UNSUPPORTED = frozenset(
    {
        "unknown_method",
        "not_allowed_token_type",
        "missing_scope",
        "method_deprecated",
        "feature_not_enabled",
        "team_not_allowed",
        "not_allowed",
    }
)
_NOT_STREAMING = frozenset({"message_not_in_streaming_state"})
_GONE = frozenset({"message_not_found", "cant_update_message", "cant_delete_message"})
_DROP_ERRORS: tuple[type[BaseException], ...] = (
    SlackApiError,
    PlatformUnavailable,
    PreviewGone,
    *NETWORK_ERRORS,
)


class SlackPreview:
    """Streams and updates for the adapter's LivePreview ability, through its `Outbound` (client,
    the ack hold, slash commands). `native` is False once the workspace showed it has no streaming
    methods."""

    def __init__(self, outbound: Outbound, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.out = outbound
        self.monotonic = monotonic
        self.native = True
        # ts of a stream this process started → the Markdown sent so far
        self._streamed: dict[str, str] = {}
        self._starts: deque[float] = deque()

    def style(self, chat: ChatRef, reply_to_id: str | None) -> PreviewStyle | None:
        if self.out.from_slash_command(reply_to_id):
            # its answers go through the response_url: no preview
            return None
        return PreviewStyle(INTERVAL_S, scope=SCOPE, raw=self._can_stream(chat))

    async def show(self, part: PreviewPart) -> str:
        client = self._client()
        await self.out.hold(part.chat.chat_id, part.reply_to_id or "")
        mid = part.platform_message_id
        if mid is None:
            if (
                not part.is_progress
                and self._can_stream(part.chat)
                and (streamed := await self._start(part))
            ):
                return streamed
            return await self._call(
                client.chat_postMessage(**_post(part.chat, closed(part.text))), "ts"
            )
        if mid.startswith(STREAMED):
            return await self._grow(part.chat, mid, part.text)
        await self._update(part.chat, mid, closed(part.text), mrkdwn=True)
        return mid

    async def finish(self, message: OutboundMessage, platform_message_id: str) -> str:
        ts = platform_message_id.removeprefix(STREAMED)
        if platform_message_id.startswith(STREAMED):
            await self._stop(message.chat, ts)
        text = message.plain if message.use_plain else message.text
        await self._update(message.chat, ts, text, mrkdwn=not message.use_plain)
        return ts

    async def drop(self, chat: ChatRef, platform_message_id: str) -> None:
        ts = platform_message_id.removeprefix(STREAMED)
        try:
            if platform_message_id.startswith(STREAMED):
                await self._stop(chat, ts)
            await self._client().chat_delete(channel=chat.chat_id, ts=ts)
        except _DROP_ERRORS as exc:
            log.info("slack: preview %s in %s not deleted: %s", ts, chat.chat_id, exc)

    # ------------------------------------------------------------------ Slack's own streaming
    def _can_stream(self, chat: ChatRef) -> bool:
        """Slack streams only replies in a thread (a DM
        answered in place has none), at Tier 2's pace."""
        now = self.monotonic()
        while self._starts and now - self._starts[0] >= 60.0:
            self._starts.popleft()
        return self.native and bool(chat.thread_id) and len(self._starts) < STARTS_PER_MINUTE

    async def _start(self, part: PreviewPart) -> str | None:
        """chat.startStream with the text so far; None when
        this workspace cannot (the caller posts instead)."""
        args: dict[str, Any] = {
            "channel": part.chat.chat_id,
            "thread_ts": part.chat.thread_id,
            "markdown_text": part.text,
        }
        if part.chat.chat_type != "dm":  # outside a DM Slack wants to know whom the stream is for
            args.update(recipient_team_id=part.space_id, recipient_user_id=part.user_id)
        self._starts.append(self.monotonic())
        try:
            response = await self._client().chat_startStream(**args)
        except SlackApiError as exc:
            code = error_code(exc)
            if code in _UNSUPPORTED:
                log.warning(
                    "slack: chat.startStream refused (%s); "
                    "previews are updated messages from now on",
                    code,
                )
                self.native = False
                return None
            if code.startswith("missing_recipient"):
                log.info(
                    "slack: chat.startStream wants %s; this preview is an updated message", code
                )
                return None
            raise send_error(exc) from None
        except API_ERRORS as exc:
            raise send_error(exc) from None
        ts = str(response.get("ts") or "")
        self._streamed[ts] = part.text
        return STREAMED + ts

    async def _grow(self, chat: ChatRef, mid: str, text: str) -> str:
        """Append what is new; text that changed further back
        (a retry) ends the stream and updates instead."""
        ts = mid.removeprefix(STREAMED)
        sent = self._streamed.get(ts)
        if sent is not None and text.startswith(sent):
            if len(text) > len(sent):
                try:
                    await self._client().chat_appendStream(
                        channel=chat.chat_id, ts=ts, markdown_text=text[len(sent) :]
                    )
                except SlackApiError as exc:
                    if error_code(exc) not in _NOT_STREAMING:
                        raise _translated(exc) from None
                    self._streamed.pop(ts, None)  # Slack ended it (it expired): update from now on
                    await self._update(chat, ts, closed(text), mrkdwn=True)
                    return mid
                self._streamed[ts] = text
            return mid
        await self._stop(chat, ts)
        await self._update(chat, ts, closed(text), mrkdwn=True)
        return mid

    async def _stop(self, chat: ChatRef, ts: str) -> None:
        """chat.stopStream; a stream already over (expired, or stopped before a restart) is fine."""
        self._streamed.pop(ts, None)
        try:
            await self._client().chat_stopStream(channel=chat.chat_id, ts=ts)
        except SlackApiError as exc:
            if error_code(exc) not in _NOT_STREAMING:
                raise _translated(exc) from None
        except API_ERRORS as exc:
            raise send_error(exc) from None

    # ------------------------------------------------------------------ plain messages
    async def _update(self, chat: ChatRef, ts: str, text: str, *, mrkdwn: bool) -> None:
        try:
            await self._client().chat_update(channel=chat.chat_id, ts=ts, text=text, mrkdwn=mrkdwn)
        except SlackApiError as exc:
            raise _translated(exc) from None
        except API_ERRORS as exc:
            raise send_error(exc) from None

    async def _call(self, call: Awaitable[Any], id_field: str) -> str:
        try:
            response = await call
        except API_ERRORS as exc:
            raise send_error(exc) from None
        return str(response.get(id_field) or "")

    def _client(self) -> AsyncWebClient:
        if self.out.client is None:
            raise PlatformUnavailable(PLATFORM, "not started")
        return self.out.client


def _post(chat: ChatRef, text: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"channel": chat.chat_id, "text": text, "mrkdwn": True}
    if chat.thread_id:
        kwargs["thread_ts"] = chat.thread_id
    return kwargs


def closed(text: str) -> str:
    """Text meant for Slack's own streaming (Markdown as written so far) shown as a plain message
    instead: an open code fence is closed, so the rest of the message does not turn into code.
    Rendered text is left as it is."""
    fences = sum(1 for line in text.splitlines() if line.lstrip().startswith("```"))
    return text + ("\n```" if fences % 2 else "")


def _translated(exc: SlackApiError) -> Exception:
    return PreviewGone(PLATFORM, error_code(exc)) if error_code(exc) in _GONE else send_error(exc)
