"""Buttons that stand for a command: `/model` without a name shows the models as buttons, and a tap
does what `/model NAME` does (gateway/sessions/commands.py).

A menu's token is an HMAC of its kind, the chat and its options under the install's key: nobody
can forge one, it is bound to its chat (a tap carried into another chat matches nothing), and it
still works after a restart as long as the options are the same. A button's value is its
option's number. The buttons ride on the command's answer: the outbox asks `choices_for` for each
row it sends (the answer is matched by the message it replies to).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Sequence

from gateway.events import ChatRef, Choice, Choices, Inbound
from gateway.store.rows import OutboundRow

MENU_TOKEN = "m."  # approvals' tokens are URL-safe base64: never a "."
MAX_OFFERED = 256  # answers waiting to be sent with their buttons (bounded: a flood forgets)


def is_menu(token: str) -> bool:
    return token.startswith(MENU_TOKEN)


class Menus:
    def __init__(self, key: bytes) -> None:
        self.key = key
        self._offered: OrderedDict[tuple[str, str, str], Choices] = OrderedDict()

    def token(self, kind: str, chat: ChatRef, values: Sequence[str]) -> str:
        text = "\n".join([kind, chat.platform, chat.chat_id, *values])
        mac = hmac.new(self.key, text.encode(), hashlib.sha256).digest()[:12]
        return MENU_TOKEN + base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def offer(self, kind: str, inbound: Inbound, options: Sequence[tuple[str, str]]) -> None:
        """Buttons (label, value) for the answer to `inbound` (a command): the n-th brings back
        n."""
        token = self.token(kind, inbound.chat, [value for _, value in options])
        buttons = tuple(Choice(label, str(n)) for n, (label, _) in enumerate(options, 1))
        where = (inbound.chat.platform, inbound.chat.chat_id, inbound.message_id)
        self._offered[where] = Choices(token, buttons)
        while len(self._offered) > MAX_OFFERED:
            self._offered.popitem(last=False)

    def choices_for(self, row: OutboundRow) -> Choices | None:
        """The outbox's hook: the buttons of a command's answer."""
        if row.reply_to_id is None or row.kind != "notice":
            return None
        return self._offered.get((row.platform, row.chat_id, row.reply_to_id))

    def picked(self, kind: str, inbound: Inbound, values: Sequence[str]) -> str | None:
        """The value a tap on a `kind` menu chose, if its token is this chat's menu of exactly
        these values; None for a forged, stale or carried-over tap."""
        picked = inbound.picked
        if picked is None or not picked.value.isdigit():
            return None
        expected = self.token(kind, inbound.chat, values)
        if not hmac.compare_digest(picked.token, expected):
            return None
        number = int(picked.value)
        return values[number - 1] if 1 <= number <= len(values) else None
