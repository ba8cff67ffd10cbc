"""Access control: who gets a turn. One gate, run by
SessionManager.submit before anything is stored.

Deny by default per platform, DM pairing codes for strangers, `/approve` for admins, a per-chat
budget for bot-authored messages. It never logs message text, and a clear pairing code never reaches
the database. Answers to requests a waiting turn made (gateway/approvals/) come through here too: a
tap on a button, and `/approve CODE` / `/deny CODE`; a request's code has 6 characters, a pairing
code 8, and a code is looked up as a request of this chat first.
"""

from __future__ import annotations

import copy
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from gateway.access.pairing import CODE_TTL, PairingBook
from gateway.approvals.answers import Answers
from gateway.approvals.menus import is_menu
from gateway.config.platforms import platform_accounts
from gateway.config.settings import AccessConfig, Config, DiscordConfig, SlackConfig, TelegramConfig
from gateway.delivery.outbox import Outbox
from gateway.events import ChatRef, Inbound, SubmitOutcome, SubmitResult, command_word
from gateway.knowledge.people import LOCAL_OWNER, Identity, PeopleBook, identity_of
from gateway.store.database import Store
from gateway.store.transcript import encode_inbound

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
BudgetVerdict = Literal["ok", "tripped", "cooling"]

# bound to loopback (or a token): whoever reaches them is the owner
LOCAL_PLATFORMS = frozenset({"web", "cli", "cron"})
BOT_WINDOW = timedelta(minutes=1)

PAIRING_TEXT = (
    "I don't know you yet, so I can't answer. To get access, send this pairing code to the owner "
    "of this bot: `{code}` (valid for {minutes} minutes). They approve it with "
    "`gateway pairing approve {code}`."
)
APPROVED_TEXT = "You're approved: I can talk with you now. Send me a message to start."
ADMIN_ONLY_TEXT = "Only an admin can approve pairing codes."
APPROVE_USAGE = "Usage: /approve CODE"
DENY_USAGE = "Usage: /deny CODE (the code of a request waiting in this chat)"
NO_REQUEST_TEXT = "No request in this chat is waiting with the code {code}."
NOT_ALLOWED_TEXT = "Only people this bot talks with can use its buttons."
_STRANGER_REASONS = {
    "pending": "unknown user; pairing code already sent",
    "full": "unknown user; too many pairing codes pending on this platform",
    "locked": "unknown user; pairing is locked after wrong approvals",
    "cooling": "unknown user; their pairing request expired lately",
}


def is_admin(access: AccessConfig, platform: str, user_id: str) -> bool:
    """Admins are listed as `platform:user_id` in
    `access.admins`; for admin-only commands anywhere."""
    return f"{platform}:{user_id}" in access.admins


@dataclass(frozen=True, slots=True)
class Rules:
    """One platform's allowlist. A user passes by id, by handle (Telegram) or by role (Discord); in
    a group the place must pass too when place lists are set (every list that is set). DMs have no
    place."""

    user_ids: frozenset[str] = frozenset()
    usernames: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    chats: frozenset[str] = frozenset()
    spaces: frozenset[str] = frozenset()

    @property
    def is_empty(self) -> bool:
        return not (self.user_ids or self.usernames or self.roles)

    def lists_user(self, inbound: Inbound) -> bool:
        if inbound.user_id in self.user_ids:
            return True
        if inbound.username and _handle(inbound.username) in self.usernames:
            return True
        return bool(self.roles.intersection(inbound.roles))

    def allows_place(self, inbound: Inbound) -> bool:
        chat = inbound.chat
        if not chat.is_group:
            return True
        if self.chats and chat.chat_id not in self.chats and chat.thread_id not in self.chats:
            return False
        return not self.spaces or inbound.space_id in self.spaces


def platform_rules(config: Config) -> dict[tuple[str, str], Rules]:
    """Each bot account's allowlist, by (platform, account): one bot's list lets nobody talk to
    another."""
    rules: dict[tuple[str, str], Rules] = {}
    for name, t in platform_accounts(config.telegram).items():
        assert isinstance(t, TelegramConfig)
        rules[("telegram", name)] = Rules(
            user_ids=frozenset(u for u in t.allowed_users if not u.startswith("@")),
            usernames=frozenset(_handle(u) for u in t.allowed_users if u.startswith("@")),
            chats=frozenset(t.allowed_chats),
        )
    for name, d in platform_accounts(config.discord).items():
        assert isinstance(d, DiscordConfig)
        rules[("discord", name)] = Rules(
            user_ids=frozenset(d.allowed_users),
            roles=frozenset(d.allowed_roles),
            chats=frozenset(d.allowed_channels),
            spaces=frozenset(d.allowed_guilds),
        )
    for name, s in platform_accounts(config.slack).items():
        assert isinstance(s, SlackConfig)
        rules[("slack", name)] = Rules(
            user_ids=frozenset(s.allowed_users), chats=frozenset(s.allowed_channels)
        )
    return rules


class BotBudget:
    """At most `budget` bot-authored messages answered
    per chat per minute; then the chat cools down."""

    def __init__(self, budget: int, cooldown: timedelta) -> None:
        self.budget = budget
        self.cooldown = cooldown
        self._answered: dict[tuple[str, str], deque[datetime]] = {}
        self._cooling: dict[tuple[str, str], datetime] = {}

    def check(self, chat: ChatRef, now: datetime) -> BudgetVerdict:
        key = (chat.platform, chat.chat_id)
        until = self._cooling.get(key)
        if until is not None:
            if now < until:
                return "cooling"
            del self._cooling[key]
        times = self._answered.setdefault(key, deque())
        while times and now - times[0] >= BOT_WINDOW:
            times.popleft()
        if len(times) >= self.budget:
            times.clear()
            self._cooling[key] = now + self.cooldown
            return "tripped"
        times.append(now)
        self._forget_quiet(now)
        return "ok"

    def _forget_quiet(self, now: datetime) -> None:
        if len(self._answered) > 1024:
            for key in [k for k, t in self._answered.items() if not t or now - t[-1] >= BOT_WINDOW]:
                del self._answered[key]


def ephemeral_outbox(outbox: Outbox) -> Outbox:
    """The same delivery (render, chunk, rate limits, retry) over an in-memory table: for a text
    that must not be stored, such as a clear pairing code. A copy, so it keeps whatever the daemon
    configured its outbox with."""
    notices = copy.copy(outbox)
    notices.store = Store(Path(":memory:"))
    return notices


class AccessGate:
    """SessionManager's `gate`: None lets a message through;
    a SubmitResult stops it before it is stored."""

    def __init__(
        self,
        config: Config,
        pairing: PairingBook,
        outbox: Outbox,
        *,
        clock: Clock,
        notices: Outbox | None = None,
        people: PeopleBook | None = None,
    ) -> None:
        self.people = people
        # set by linking.Linker
        self.link: Callable[[Inbound], Awaitable[SubmitResult | None]] | None = None
        # answers to waiting turns' requests, and taps on a command's menu (set by the wiring)
        self.answers: Answers | None = None
        self.menus: Callable[[Inbound], Awaitable[SubmitResult]] | None = None
        self.config = config
        self.access = config.access
        self.rules = platform_rules(config)
        self.pairing = pairing
        self.outbox = outbox
        self._notices = notices
        self.clock = clock
        self.bots = BotBudget(
            config.access.bot_loop_budget, timedelta(seconds=config.access.bot_loop_cooldown_s)
        )
        self._hinted: set[str] = set()

    def is_allowed(self, inbound: Inbound) -> bool:
        """Does this sender pass here: place lists, then
        admins, config allowlists or an approved code."""
        platform, account = inbound.chat.platform, inbound.chat.account
        if platform in LOCAL_PLATFORMS:
            return True
        rules = self.rules.get((platform, account), Rules())
        if not rules.allows_place(inbound):
            return False
        return (
            is_admin(self.access, platform, inbound.user_id)
            or rules.lists_user(inbound)
            or self.pairing.is_approved(platform, inbound.user_id, account)
            or self._linked_allowed(platform, inbound)
        )

    def _linked_allowed(self, platform: str, inbound: Inbound) -> bool:
        """One approval per person: an identity linked to this one that is let in by id (an admin,
        listed, approved by code, the local owner) lets this one in too; the place lists above still
        apply to this message."""
        person = (
            self.people.find(identity_of(platform, inbound.user_id))
            if self.people is not None
            else None
        )
        if person is None or len(person.identities) < 2:
            return False
        for other in person.identities:
            # on this platform, this bot's list alone counts; on another, any of its bots' lists
            account = inbound.chat.account if other.platform == platform else None
            if (
                other.identity == LOCAL_OWNER
                or is_admin(self.access, other.platform, other.user_id)
                or self._listed(other, account)
                or self.pairing.is_approved(other.platform, other.user_id, account)
            ):
                return True
        return False

    def _listed(self, who: Identity, account: str | None) -> bool:
        """Is this identity on an allowlist of its platform (`account`'s alone, unless None)?"""
        handle = _handle(who.username) if who.username else None
        return any(
            who.user_id in rules.user_ids or handle in rules.usernames
            for (platform, name), rules in self.rules.items()
            if platform == who.platform and account in (None, name)
        )

    async def __call__(self, inbound: Inbound) -> SubmitResult | None:
        if inbound.picked is not None:
            return await self._tap(inbound, inbound.picked.token)
        if self.link is not None and command_word(inbound.text) == "link" and not inbound.is_bot:
            # gateway/access/linking.py: even a stranger's DM may link
            linked = await self.link(inbound)
            if linked is not None:
                return linked
        if inbound.chat.platform not in LOCAL_PLATFORMS:
            if not self.is_allowed(inbound):
                return await self._stranger(inbound)
            if inbound.is_bot:
                verdict = self.bots.check(inbound.chat, self.clock())
                if verdict != "ok":
                    return self._drop(
                        inbound,
                        f"bot loop budget spent ({self.bots.budget}/min); cooling down"
                        if verdict == "tripped"
                        else "bot loop cool-down",
                    )
        if command_word(inbound.text) in ("approve", "deny"):
            return await self._approve_command(inbound)
        return None

    async def _tap(self, inbound: Inbound, token: str) -> SubmitResult:
        """A tap on a button. On a request: who may answer is the request's rule, not the list's;
        on a command's menu (/model): the sender must be let in, as for the command."""
        if is_menu(token) and self.menus is not None:
            if not self.is_allowed(inbound):
                self._drop(inbound, "a tap from someone not allowed here")
                return SubmitResult(SubmitOutcome.REFUSED, "choice", notice=NOT_ALLOWED_TEXT)
            return await self.menus(inbound)
        if self.answers is None or is_menu(token):
            return SubmitResult(
                SubmitOutcome.IGNORED, "choice", notice="Nothing is waiting for this."
            )
        return self.answers.tap(inbound)

    # ------------------------------------------------------------------ strangers
    async def _stranger(self, inbound: Inbound) -> SubmitResult:
        if inbound.chat.is_group or inbound.is_bot:
            return self._drop(inbound, "user not allowed here")
        if self.access.unknown_dm == "ignore":
            return self._drop(inbound, "unknown user (access.unknown_dm is ignore)")
        chat = inbound.chat
        issued = self.pairing.issue(
            platform=chat.platform,
            user_id=inbound.user_id,
            user_name=inbound.user_name,
            chat_id=chat.chat_id or inbound.user_id,
            now=self.clock(),
            account=chat.account,
        )
        if issued.code is None:
            return self._drop(inbound, _STRANGER_REASONS[issued.status])
        log.info(
            "access: unknown user, pairing code sent platform=%s user=%s chat=%s",
            chat.platform,
            inbound.user_id,
            chat.chat_id,
        )
        self._hint(chat)
        left = (issued.expires_at - self.clock()) if issued.expires_at is not None else CODE_TTL
        text = PAIRING_TEXT.format(
            code=issued.code, minutes=max(1, int(left.total_seconds() // 60))
        )
        # Sent in the background: the platform's ack must not wait behind a 429 pause.
        self.notices.post_soon(
            f"pair:{chat.platform}:{chat.chat_id}:{inbound.message_id}",
            chat,
            text,
            reply_to_id=inbound.message_id,
        )
        return SubmitResult(SubmitOutcome.REFUSED, "pairing code sent")

    @property
    def notices(self) -> Outbox:
        """Where pairing codes go out, made at the first one: its in-memory table costs a whole
        schema's creation, which most daemons never need."""
        if self._notices is None:
            self._notices = ephemeral_outbox(self.outbox)
        return self._notices

    def _drop(self, inbound: Inbound, reason: str) -> SubmitResult:
        """One log line per refused message: platform and user id, never the text."""
        level = logging.INFO if inbound.is_addressed else logging.DEBUG
        log.log(
            level,
            "access: refused (%s) platform=%s user=%s chat=%s",
            reason,
            inbound.chat.platform,
            inbound.user_id,
            inbound.chat.chat_id,
        )
        self._hint(inbound.chat)
        return SubmitResult(SubmitOutcome.IGNORED, reason)

    def _hint(self, chat: ChatRef) -> None:
        where = chat.adapter_key
        rules = self.rules.get((chat.platform, chat.account), Rules())
        if where in self._hinted or not rules.is_empty:
            return
        self._hinted.add(where)
        log.warning(
            "access: %s has no allowed_users, so only admins and approved pairing codes get a turn "
            "there (see `gateway pairing list`)",
            where,
        )

    # ------------------------------------------------------------------ /approve
    async def _approve_command(self, inbound: Inbound) -> SubmitResult:
        platform, user_id = inbound.chat.platform, inbound.user_id
        inbound_id = self.store_answered(inbound)
        if inbound_id is None:
            return SubmitResult(SubmitOutcome.DUPLICATE)
        args = inbound.text.split()[1:]
        approval = None
        admin = is_admin(self.access, platform, user_id)
        word = command_word(inbound.text) or ""
        answered = self.answers.command(inbound, word) if self.answers is not None else None
        # a waiting turn's request (never a pairing code)
        if answered is not None or word == "deny":
            missing = NO_REQUEST_TEXT.format(code=args[0].upper()) if args else DENY_USAGE
            reply = answered or missing
            self.outbox.post_soon(
                f"c{inbound_id}", inbound.chat, reply, reply_to_id=inbound.message_id
            )
            return SubmitResult(SubmitOutcome.ACCEPTED, "command")
        if not admin:
            log.info(
                "access: refused (/approve by a non-admin) platform=%s user=%s", platform, user_id
            )
            reply = ADMIN_ONLY_TEXT
        elif len(args) != 1:
            reply = APPROVE_USAGE
        else:
            approval = self.pairing.approve(
                args[0], by=f"{platform}:{user_id}", now=self.clock(), announce=False
            )
            log.info(
                "access: /approve by platform=%s user=%s: %s", platform, user_id, approval.status
            )
            reply = approval.describe()
        self.outbox.post_soon(f"c{inbound_id}", inbound.chat, reply, reply_to_id=inbound.message_id)
        if (
            approval is not None
            and approval.status == "approved"
            and approval.platform
            and approval.chat_id
        ):
            paired = ChatRef(approval.platform, "dm", approval.chat_id, account=approval.account)
            self.outbox.post_soon(f"c{inbound_id}:paired", paired, APPROVED_TEXT)
        return SubmitResult(SubmitOutcome.ACCEPTED if admin else SubmitOutcome.REFUSED, "command")

    def store_answered(self, inbound: Inbound) -> int | None:
        """Record the command (code redacted) so a redelivery
        is a duplicate, not a second, failed approval."""
        redacted = replace(inbound, text=inbound.text.split(maxsplit=1)[0] + " [code]")
        chat = inbound.chat
        return self.pairing.store.insert_inbound(
            platform=chat.platform,
            chat_type=chat.chat_type,
            chat_id=chat.chat_id,
            thread_id=chat.thread_id,
            platform_message_id=inbound.message_id,
            user_id=inbound.user_id,
            user_name=inbound.user_name,
            text=redacted.text,
            payload=encode_inbound(redacted),
            received_at=inbound.received_at,
            status="answered",
            account=chat.account,
        )


def _handle(name: str) -> str:
    return name.strip().lstrip("@").lower()
