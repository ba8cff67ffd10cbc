"""Buttons: what a message offers (`Choices`), what a tap brings back (`Picked`), the callback data
that carries it and the adapter ability that shows them (`Interactive`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from gateway.events import OutboundMessage


@dataclass(frozen=True, slots=True)
class Picked:
    """A tap on a button of a message with `Choices`: the request it belongs to (`token`) and what
    was chosen."""

    token: str
    value: str


@dataclass(frozen=True, slots=True)
class Choice:
    """One button: the `label` a person reads, and the short `value` a tap on it brings back."""

    label: str
    value: str
    # a hint: the safe default, or the choice that refuses
    style: Literal["primary", "danger", ""] = ""


@dataclass(frozen=True, slots=True)
class Choices:
    """The buttons under a message. `token` is opaque and unguessable, bound to one request: the
    core checks it, and the chat it came from, when a tap comes back."""

    token: str
    options: tuple[Choice, ...]


# What an adapter puts in a button's callback (and parses back): "ag:<token>:<value>". The core
# keeps it within the smallest platform limit, Telegram's callback_data of 1-64 bytes (Discord
# custom_id: 100 characters, Slack action value: 2000).
CHOICE_PREFIX = "ag:"
CHOICE_DATA_MAX = 64


def choice_data(token: str, value: str) -> str:
    data = f"{CHOICE_PREFIX}{token}:{value}"
    if len(data.encode()) > CHOICE_DATA_MAX:
        raise ValueError(f"choice data over {CHOICE_DATA_MAX} bytes: {data!r}")
    return data


def parse_choice(data: str | None) -> Picked | None:
    """The tap a button's callback data names, or None for data that is not ours (another bot's, a
    stale format)."""
    if not data or not data.startswith(CHOICE_PREFIX) or len(data.encode()) > CHOICE_DATA_MAX:
        return None
    token, _, value = data[len(CHOICE_PREFIX) :].partition(":")
    return Picked(token, value) if token and value else None


@runtime_checkable
class Interactive(Protocol):
    """Optional ability: buttons. `send` renders `OutboundMessage.choices` natively (an inline
    keyboard, Discord buttons, Block Kit, web buttons) with `choice_data` as each button's callback;
    a tap becomes an `Inbound` with `picked` (and empty text), submitted like any message, and the
    `SubmitResult.notice` it gets is shown to the tapper alone (Telegram answerCallbackQuery, a
    Discord ephemeral reply, a Slack ephemeral message, a web notice). `close_choices` replaces the
    buttons of a sent message by its final text once the choice is made. Without the ability the
    core sends the choices as text with the /approve, /deny fallback."""

    async def close_choices(self, message: OutboundMessage, platform_message_id: str) -> None: ...
