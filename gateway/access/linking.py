"""The in-chat `/link` flow: one person proves two identities, and they become one person.

`/link` in a direct message gives a one-time code (shown only there, never stored in clear: its HMAC
under the pairing key, like pairing codes); `/link CODE` sent from the other account, on any
platform, in a direct message, says what linking shares and with whom, and `/link CODE yes` then
links the two (a code typed in a group is void). Both accounts must already be allowed, unless the
code came from an admin: then the new account is let in by the link (it shares the admin's
approval). Wrong codes count per account and in all; too many lock the flow for an hour (for
strangers and for the accounts let in apart, so strangers cannot pause it for the others).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gateway.access.gate import AccessGate
from gateway.access.pairing import new_code
from gateway.access.roles import Roles
from gateway.events import ChatRef, Inbound, SubmitOutcome, SubmitResult
from gateway.knowledge.memory import MemoryStore
from gateway.knowledge.people import Person, identity_of, parse_identity
from gateway.store.rows import iso, parse_iso

log = logging.getLogger("gateway.access.gate")

LINK_TTL = timedelta(minutes=10)
MAX_WRONG_PER_ACCOUNT = 5
MAX_WRONG_IN_ALL = 30
LOCKOUT = timedelta(hours=1)

CODE_TEXT = (
    "To link another account of yours to this one, send `/link {code}` to me from that account "
    "(any platform) within {minutes} minutes. Linked accounts are one person to me: one profile, "
    "one memory, one approval."
)
GROUP_TEXT = "Send /link to me in a direct message: the code it gives must stay private."
LINKED_TEXT = "Linked: this account and {other} are one person to me now (one profile, one memory)."
ALREADY_TEXT = "This account is already linked to {other}."
WRONG_TEXT = "No link request has that code (codes last {minutes} minutes and work once)."
LOCKED_TEXT = "Too many wrong link codes: linking is paused for a while. Try again later."
NOT_ALLOWED_TEXT = (
    "This account is not allowed here yet, and the code was not given to an admin. Ask the owner "
    "to approve it (write to me from it to get a pairing code), then send /link again."
)
USAGE_TEXT = "Usage: /link (gives a code), then /link CODE from your other account."
CONFIRM_TEXT = (
    "This would make this account and {other} one person to me: one profile, one memory, and each "
    "account's past conversations with me searchable from the other. Only do it if both accounts "
    "are yours. To go ahead, send the same command again with yes at the end: /link CODE yes"
)
ISSUER_GONE_TEXT = (
    "The account that asked for this code no longer has access here, so it "
    "cannot be linked. The code is void."
)
BURNT_TEXT = (
    "Link codes work only in a direct message to me: that one was shown here, so it no longer "
    "works. Send /link to me in a direct message from your first account for a new one."
)


@dataclass(frozen=True, slots=True)
class LinkCode:
    person_id: int
    identity: str
    expires_at: datetime


class Linker:
    """Issues and redeems link codes; AccessGate hands it every `/link` first (it reaches it even
    from a stranger's DM, so a new account can be linked to an admin's)."""

    def __init__(
        self, gate: AccessGate, roles: Roles, memory: MemoryStore, *, clock: Callable[[], datetime]
    ) -> None:
        self.gate = gate
        self.roles = roles
        self.people = roles.people
        self.store = roles.people.store
        self.memory = memory
        self.clock = clock
        # Wrong codes per account, kept apart for strangers: their guesses must not pause linking
        # for the people already let in (a few throwaway accounts would otherwise lock everyone out
        # for an hour).
        self._wrong: dict[bool, dict[str, deque[datetime]]] = {True: {}, False: {}}
        # account → the code it was told the consequences of (see redeem)
        self._warned: dict[str, str] = {}
        gate.link = self.handle

    async def handle(self, inbound: Inbound) -> SubmitResult | None:
        """Answer a `/link`; None leaves the message to the gate (a stranger's: dropped in a group,
        a pairing code in a DM, unless it carries a code)."""
        allowed = self.gate.is_allowed(inbound)
        args = inbound.text.split()[1:]
        if not allowed and (inbound.chat.is_group or not args):
            return None
        inbound_id = self.gate.store_answered(inbound)
        if inbound_id is None:
            return SubmitResult(SubmitOutcome.DUPLICATE)
        confirmed = len(args) == 2 and args[1].lower() == "yes"
        if len(args) > 1 and not confirmed:
            reply = USAGE_TEXT
        elif args and inbound.chat.is_group:
            reply = self.burn(args[0])
        elif args:
            reply = self.redeem(inbound, args[0], allowed=allowed, confirmed=confirmed)
        elif inbound.chat.is_group:
            reply = GROUP_TEXT
        else:
            code = self.issue(inbound)
            # The code goes through the in-memory outbox: a clear code never reaches the database.
            self.gate.notices.post_soon(
                f"link:{inbound_id}",
                inbound.chat,
                CODE_TEXT.format(code=code, minutes=int(LINK_TTL.total_seconds() // 60)),
                reply_to_id=inbound.message_id,
            )
            return SubmitResult(SubmitOutcome.ACCEPTED, "command")
        self.gate.outbox.post_soon(
            f"c{inbound_id}", inbound.chat, reply, reply_to_id=inbound.message_id
        )
        return SubmitResult(SubmitOutcome.ACCEPTED if allowed else SubmitOutcome.REFUSED, "command")

    # ------------------------------------------------------------------ codes
    def issue(self, inbound: Inbound) -> str:
        now = self.clock()
        person = self._person(inbound)
        identity = identity_of(inbound.chat.platform, inbound.user_id)
        code = new_code()
        with self.store.tx() as conn:
            conn.execute(
                "DELETE FROM link_codes WHERE identity = ? OR expires_at <= ?", (identity, iso(now))
            )
            conn.execute(
                "INSERT INTO link_codes (code_hash, identity, person_id, chat_platform, chat_id,"
                " created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    self.gate.pairing.code_hash(code),
                    identity,
                    person.id,
                    inbound.chat.platform,
                    inbound.chat.chat_id,
                    iso(now),
                    iso(now + LINK_TTL),
                ),
            )
        log.info(
            "access: link code issued platform=%s user=%s", inbound.chat.platform, inbound.user_id
        )
        return code

    def burn(self, code: str) -> str:
        """A code typed where others read it is void: whoever sent it first from their own account
        would get the issuer's profile and past conversations."""
        self.store.execute(
            "DELETE FROM link_codes WHERE code_hash = ?", (self.gate.pairing.code_hash(code),)
        )
        return BURNT_TEXT

    def redeem(self, inbound: Inbound, code: str, *, allowed: bool, confirmed: bool = False) -> str:
        """A right code links only once its sender confirmed (`/link CODE yes`) after being told
        what linking shares and with whom: nobody should be talked into handing their profile to
        someone else's account."""
        now = self.clock()
        me = identity_of(inbound.chat.platform, inbound.user_id)
        if self._locked(me, now, allowed):
            return LOCKED_TEXT
        row = self.store.one(
            "SELECT * FROM link_codes WHERE code_hash = ?", (self.gate.pairing.code_hash(code),)
        )
        expires = parse_iso(row["expires_at"]) if row is not None else None
        if row is None or expires is None or expires <= now or row["identity"] == me:
            self._count_wrong(me, now, allowed)
            return WRONG_TEXT.format(minutes=int(LINK_TTL.total_seconds() // 60))
        issuer = self.people.get(int(row["person_id"]))
        if issuer is None:
            return WRONG_TEXT.format(minutes=int(LINK_TTL.total_seconds() // 60))
        if not self.roles.is_admin(issuer) and not self._still_allowed(issuer, row, now):
            self.store.execute("DELETE FROM link_codes WHERE code_hash = ?", (row["code_hash"],))
            log.info(
                "access: refused (/link code of an account that lost access since) identity=%s",
                row["identity"],
            )
            return ISSUER_GONE_TEXT
        if not allowed and not self.roles.is_admin(issuer):
            log.info(
                "access: refused (/link of a stranger to a non-admin) platform=%s user=%s",
                inbound.chat.platform,
                inbound.user_id,
            )
            return NOT_ALLOWED_TEXT
        if not confirmed or self._warned.pop(me, None) != row["code_hash"]:
            self._warned[me] = row["code_hash"]
            return CONFIRM_TEXT.format(other=_who(issuer, row["identity"]))
        self.store.execute("DELETE FROM link_codes WHERE code_hash = ?", (row["code_hash"],))
        return self._link(
            issuer, inbound, row["identity"], ChatRef(row["chat_platform"], "dm", row["chat_id"])
        )

    def _link(
        self, issuer: Person, inbound: Inbound, issuer_identity: str, issuer_chat: ChatRef
    ) -> str:
        mine = self._person(inbound)
        me = identity_of(inbound.chat.platform, inbound.user_id)
        if mine.id == issuer.id:
            return ALREADY_TEXT.format(other=issuer_identity)
        merged = self.people.link(issuer, mine, self.memory, by=f"link:{issuer_identity}")
        log.info("access: linked %s to person %s by a link code", me, merged.id)
        self.gate.outbox.post_soon(
            f"linked:{merged.id}:{inbound.message_id}", issuer_chat, LINKED_TEXT.format(other=me)
        )
        return LINKED_TEXT.format(other=issuer_identity)

    def _still_allowed(self, issuer: Person, row: Any, now: datetime) -> bool:
        """Whether the account that asked for the code would still be let in (a code must not
        outlive the revocation of its issuer: linking it would let the revoked account in again)."""
        _, user_id = parse_identity(row["identity"])
        known = next((i for i in issuer.identities if i.identity == row["identity"]), None)
        chat = ChatRef(row["chat_platform"], "dm", row["chat_id"])
        asker = Inbound(
            chat,
            user_id=user_id,
            text="",
            message_id="link-check",
            received_at=now,
            username=known.username if known is not None else None,
        )
        return self.gate.is_allowed(asker)

    def _person(self, inbound: Inbound) -> Person:
        return self.people.resolve(
            inbound.chat.platform,
            inbound.user_id,
            now=self.clock(),
            user_name=inbound.user_name,
            username=inbound.username,
        )

    def _locked(self, identity: str, now: datetime, allowed: bool) -> bool:
        wrong = self._wrong[allowed]
        for times in wrong.values():
            while times and now - times[0] >= LOCKOUT:
                times.popleft()
        mine = wrong.get(identity, deque())
        return (
            len(mine) >= MAX_WRONG_PER_ACCOUNT or sum(map(len, wrong.values())) >= MAX_WRONG_IN_ALL
        )

    def _count_wrong(self, identity: str, now: datetime, allowed: bool) -> None:
        wrong = self._wrong[allowed]
        wrong.setdefault(identity, deque()).append(now)
        for key in [k for k, v in wrong.items() if not v]:
            del wrong[key]


def _who(person: Person, identity: str) -> str:
    return f"{identity} ({person.name})" if person.name else identity
