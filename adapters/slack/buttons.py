"""Slack buttons (the `Interactive` ability): choices as Block Kit buttons under the message, a
`block_actions` click (over Socket Mode, or the signed HTTP interactivity endpoint, the same Request
URL as events) as a tap, a refusal shown to the clicker alone (an ephemeral message through the
action's response_url), and a decided request's buttons replaced by its outcome (chat.update with
`blocks: []`).

Block Kit's button: `text` plain_text of at most 75 characters, `action_id` at most 255, `value` at
most 2000; an actions block holds up to 25 elements. The core's `choice_data` (at most 64 bytes) is
both the action_id and the value. Slack waits 3 s for the ack of an interaction and does not send it
again: the listener only hands the click to the core (which stores nothing but a decision) and
answers the clicker after the ack.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.text import (
    API_ERRORS,
    NETWORK_ERRORS,
    PLATFORM,
    describe,
    guess_type,
    send_error,
)
from gateway.errors import PlatformUnavailable
from gateway.events import ChatRef, Choices, Inbound, OutboundMessage, Submit
from gateway.events.choices import choice_data, parse_choice

log = logging.getLogger("adapters.slack.adapter")

ACTION = re.compile(r"^ag:")  # the action_id of every button the gateway sends (its choice_data)
MAX_BUTTON_TEXT = 75
STYLES = {"primary": "primary", "danger": "danger"}
FAILED_TEXT = "Sorry, that did not work on my side; please try again."


def blocks(text: str, mrkdwn: bool, choices: Choices) -> list[dict[str, Any]]:
    """The message as a section with its text, and an actions block with one button a choice."""
    buttons: list[dict[str, Any]] = []
    for choice in choices.options:
        data = choice_data(choices.token, choice.value)
        button: dict[str, Any] = {
            "type": "button",
            "action_id": data,
            "value": data,
            "text": {"type": "plain_text", "text": choice.label[:MAX_BUTTON_TEXT]},
        }
        if choice.style in STYLES:
            button["style"] = STYLES[choice.style]
        buttons.append(button)
    section = {
        "type": "section",
        "text": {"type": "mrkdwn" if mrkdwn else "plain_text", "text": text},
    }
    return [section, {"type": "actions", "elements": buttons}]


def tap_inbound(body: Mapping[str, Any]) -> Inbound | None:
    """A block_actions payload as the core sees a tap; None when its button is not one of ours."""
    action: Mapping[str, Any] = next(iter(body.get("actions") or ()), {})
    picked = parse_choice(str(action.get("value") or ""))
    container = body.get("container") or {}
    channel = str((body.get("channel") or {}).get("id") or container.get("channel_id") or "")
    if picked is None or not channel:
        return None
    user = body.get("user") or {}
    message = body.get("message") or {}
    thread = message.get("thread_ts") or container.get("thread_ts")
    kind = "dm" if channel.startswith("D") else guess_type(channel)
    return Inbound(
        chat=ChatRef(PLATFORM, kind, channel, str(thread) if thread else None),
        user_id=str(user.get("id") or ""),
        text="",
        message_id=f"act:{action.get('action_ts') or ''}",
        received_at=datetime.now(UTC),
        user_name=user.get("name") or user.get("username"),
        username=user.get("username"),
        picked=picked,
        space_id=str((body.get("team") or {}).get("id") or "") or None,
    )


class Buttons:
    """The clicks' answers to the clickers, sent after the ack (kept here until they are out)."""

    def __init__(self) -> None:
        self.client: AsyncWebClient | None = None
        self._answers: set[asyncio.Task[None]] = set()

    async def click(
        self,
        body: Mapping[str, Any],
        respond: Callable[..., Awaitable[Any]],
        submit: Submit | None,
        name: Callable[[str], str | None],
    ) -> None:
        """Hand the click to the core (the clicker's display name, when known, for the outcome
        line); a refusal goes to the clicker alone once the ack is out."""
        inbound = tap_inbound(body)
        if inbound is None or submit is None:
            return
        inbound = dataclasses.replace(inbound, user_name=name(inbound.user_id) or inbound.user_name)
        try:
            result = await submit(inbound)
            notice = result.notice
        except Exception:  # a task root for one click: the clicker hears it failed
            log.exception("slack: a click in %s not handled", inbound.chat.chat_id)
            notice = FAILED_TEXT
        if notice:
            loop = asyncio.get_running_loop()
            task = loop.create_task(self._tell(respond, notice), name="slack-click-answer")
            self._answers.add(task)
            task.add_done_callback(self._answers.discard)

    @staticmethod
    async def _tell(respond: Callable[..., Awaitable[Any]], text: str) -> None:
        try:
            await respond(text=text, response_type="ephemeral", replace_original=False)
        except NETWORK_ERRORS as exc:
            log.info("slack: the answer to a click was not sent (%s)", describe(exc))

    async def close(self, message: OutboundMessage, ts: str) -> None:
        """The message becomes its outcome; `blocks: []` takes the buttons away."""
        if self.client is None:
            raise PlatformUnavailable(PLATFORM, "not started")
        text = message.plain if message.use_plain else message.text
        try:
            await self.client.chat_update(channel=message.chat.chat_id, ts=ts, text=text, blocks=[])
        except API_ERRORS as exc:
            raise send_error(exc) from None

    async def stop(self) -> None:
        for task in list(self._answers):
            task.cancel()
        await asyncio.gather(*self._answers, return_exceptions=True)
