"""Pairing codes: an unknown DM user gets a short code,
the owner approves it, the user joins the allowlist.

A code is never stored: only its HMAC under a per-install key kept beside the database
(`pairing.key`, 0600), so a copy of state.db alone reveals nothing usable. Every limit lives here
and every call takes `now`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from gateway.errors import StoreError
from gateway.events import DEFAULT_ACCOUNT
from gateway.knowledge.people import people_changed
from gateway.store.database import Store
from gateway.store.rows import iso, parse_iso

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read aloud or retyped without doubt
CODE_LENGTH = 8
# a request's life, from the first ask: asking again does not extend it
CODE_TTL = timedelta(hours=1)
# a lost code can be replaced this often, within the same request
NEW_CODE_EVERY = timedelta(minutes=10)
MAX_PENDING_PER_PLATFORM = 3
# Once a request expired (or was made room for), its requester waits this long before asking again,
# so the same few strangers cannot hold the queue by re-asking; and a full queue expires its oldest
# request for a newcomer once that one has waited NEW_CODE_EVERY. An owner trying an expired code
# lifts the wait.
REQUEST_COOLDOWN = timedelta(hours=1)
MAX_FAILED_APPROVALS = 5
LOCKOUT = timedelta(hours=1)
KEY_FILE = "pairing.key"

IssueStatus = Literal["issued", "pending", "full", "locked", "cooling"]
ApprovalStatus = Literal["approved", "expired", "wrong", "locked"]


@dataclass(frozen=True, slots=True)
class Issued:
    """The answer to "may this user get a code now?": the clear code only when one was just made."""

    status: IssueStatus
    code: str | None = None
    # with a code: when its request ends (a replaced code keeps the end)
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PendingCode:
    platform: str
    user_id: str
    user_name: str | None
    chat_id: str
    created_at: datetime
    expires_at: datetime
    account: str = DEFAULT_ACCOUNT  # the bot they asked (an approval lets them talk to that bot)


@dataclass(frozen=True, slots=True)
class ApprovedUser:
    platform: str
    user_id: str
    user_name: str | None
    approved_at: datetime
    approved_by: str
    account: str = DEFAULT_ACCOUNT


@dataclass(frozen=True, slots=True)
class Lockout:
    platform: str
    failures: int
    locked_until: datetime | None


@dataclass(frozen=True, slots=True)
class Approval:
    status: ApprovalStatus
    platform: str | None = None
    user_id: str | None = None
    user_name: str | None = None
    chat_id: str | None = None
    locked_until: datetime | None = None
    locked_now: tuple[str, ...] = ()  # platforms this wrong code just locked
    account: str = DEFAULT_ACCOUNT

    @property
    def who(self) -> str:
        name = f" ({self.user_name})" if self.user_name else ""
        return f"{self.platform} user {self.user_id}{name}"

    def describe(self) -> str:
        if self.status == "approved":
            return f"Approved {self.who}; they can talk to the agent now."
        if self.status == "expired":
            return (
                f"The code for {self.who} has expired (codes last {_minutes(CODE_TTL)} minutes); "
                "they get a new one when they write again."
            )
        if self.status == "locked":
            return (
                f"Pairing on {self.platform} is locked until {_hhmm(self.locked_until)} after "
                f"{MAX_FAILED_APPROVALS} wrong codes."
            )
        text = "No pending pairing request has that code."
        if self.locked_now:
            text += (
                f" Too many wrong codes: pairing on {', '.join(self.locked_now)} is locked until "
                f"{_hhmm(self.locked_until)}."
            )
        return text


def normalize(code: str) -> str:
    """What the owner typed, as issued: case and separators do not matter."""
    return "".join(ch for ch in code.upper() if ch not in " -_")


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def load_key(home: Path) -> bytes:
    """The install's HMAC key; created once (atomically, mode 0600) so the daemon and the CLI agree
    on it."""
    path = home / KEY_FILE
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except FileNotFoundError:
        pass
    except ValueError as exc:
        raise StoreError(
            f"{path} is not a hex key ({exc}); delete it to start pairing afresh"
        ) from None
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    try:
        os.link(tmp, path)  # fails if another process won the race; then its key is the key
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return bytes.fromhex(path.read_text(encoding="ascii").strip())


class PairingBook:
    """Pending codes, approved users and lockouts, in the gateway's SQLite database."""

    def __init__(self, store: Store, key: bytes) -> None:
        self.store = store
        self._key = key

    def code_hash(self, code: str) -> str:
        return hmac.new(
            self._key, normalize(code).encode("ascii", "replace"), hashlib.sha256
        ).hexdigest()

    # ------------------------------------------------------------------ reads
    def is_approved(
        self, platform: str, user_id: str, account: str | None = DEFAULT_ACCOUNT
    ) -> bool:
        """Approved to talk to that bot account (None: to any of the platform's)."""
        any_account = account is None
        row = self.store.one(
            "SELECT 1 FROM approved_users WHERE platform = ? AND user_id = ?"
            " AND (? OR account = ?)",
            (platform, user_id, any_account, account),
        )
        return row is not None

    def locked_until(self, platform: str, now: datetime) -> datetime | None:
        row = self.store.one(
            "SELECT locked_until FROM pairing_lockouts WHERE platform = ?", (platform,)
        )
        until = parse_iso(row[0]) if row else None
        return until if until is not None and until > now else None

    def pending(self, now: datetime) -> list[PendingCode]:
        rows = self.store.all(
            "SELECT * FROM pairing WHERE expires_at > ? ORDER BY created_at", (iso(now),)
        )
        return [
            PendingCode(
                r["platform"],
                r["user_id"],
                r["user_name"],
                r["chat_id"],
                _dt(r["created_at"]),
                _dt(r["expires_at"]),
                r["account"],
            )
            for r in rows
        ]

    def approved(self) -> list[ApprovedUser]:
        rows = self.store.all("SELECT * FROM approved_users ORDER BY platform, approved_at")
        return [
            ApprovedUser(
                r["platform"],
                r["user_id"],
                r["user_name"],
                _dt(r["approved_at"]),
                r["approved_by"],
                r["account"],
            )
            for r in rows
        ]

    def lockouts(self, now: datetime) -> list[Lockout]:
        rows = self.store.all(
            "SELECT * FROM pairing_lockouts WHERE failures > 0 OR locked_until > ?"
            " ORDER BY platform",
            (iso(now),),
        )
        out = []
        for r in rows:
            until = parse_iso(r["locked_until"])
            out.append(
                Lockout(r["platform"], r["failures"], until if until and until > now else None)
            )
        return out

    # ------------------------------------------------------------------ issuing
    def issue(
        self,
        *,
        platform: str,
        user_id: str,
        user_name: str | None,
        chat_id: str,
        now: datetime,
        account: str = DEFAULT_ACCOUNT,
    ) -> Issued:
        """A code for this user, unless pairing is locked, they got one lately, their last request
        is cooling down, or the platform is full (its oldest request expires for a newcomer once it
        waited ten minutes)."""
        if self.locked_until(platform, now) is not None:
            return Issued("locked")
        self.store.execute(
            "DELETE FROM pairing WHERE expires_at <= ?", (iso(now - REQUEST_COOLDOWN),)
        )
        mine = self.store.one(
            "SELECT created_at, expires_at FROM pairing WHERE platform = ?"
            " AND account = ? AND user_id = ?",
            (platform, account, user_id),
        )
        who = (platform, account, user_id)
        if mine is not None:
            expires = _dt(mine["expires_at"])
            if expires <= now:
                return Issued("cooling")
            if now - _dt(mine["created_at"]) < NEW_CODE_EVERY:
                return Issued("pending")
            return self._store_code(who, user_name, chat_id, now=now, expires=expires)
        if not self._room(platform, now):
            return Issued("full")
        return self._store_code(who, user_name, chat_id, now=now, expires=now + CODE_TTL)

    def _room(self, platform: str, now: datetime) -> bool:
        """Is there a free place in the platform's queue, or
        one to free: its oldest request, if old enough?"""
        rows = self.store.all(
            "SELECT id, expires_at FROM pairing WHERE platform = ? AND expires_at > ?"
            " ORDER BY expires_at",
            (platform, iso(now)),
        )
        if len(rows) < MAX_PENDING_PER_PLATFORM:
            return True
        oldest = rows[0]
        if _dt(oldest["expires_at"]) - CODE_TTL > now - NEW_CODE_EVERY:
            return False
        self.store.execute(
            "UPDATE pairing SET expires_at = ? WHERE id = ?", (iso(now), oldest["id"])
        )
        return True

    def _store_code(
        self,
        who: tuple[str, str, str],
        user_name: str | None,
        chat_id: str,
        *,
        now: datetime,
        expires: datetime,
    ) -> Issued:
        """`who`: (platform, account, user id)."""
        for _ in range(5):
            # a hash collision with another pending code is astronomically rare; retry anyway
            code = new_code()
            try:
                self.store.execute(
                    "INSERT INTO pairing (platform, account, user_id, user_name, chat_id,"
                    " code_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (platform, account, user_id) DO UPDATE SET"
                    " user_name = excluded.user_name, chat_id = excluded.chat_id,"
                    " code_hash = excluded.code_hash, created_at = excluded.created_at,"
                    " expires_at = excluded.expires_at",
                    (*who, user_name, chat_id, self.code_hash(code), iso(now), iso(expires)),
                )
            except StoreError as exc:
                if isinstance(exc.__cause__, sqlite3.IntegrityError):
                    continue
                raise
            return Issued("issued", code, expires)
        raise StoreError("could not store a unique pairing code")

    # ------------------------------------------------------------------ approving
    def approve(self, code: str, *, by: str, now: datetime, announce: bool = True) -> Approval:
        """Approve the user holding `code`. A wrong code counts against every platform with codes
        waiting (those are what a guess could hit); the fifth in a row locks pairing there for an
        hour. `announce` records the approval for the daemon, which welcomes the person where they
        asked (gateway/ops/access_watch.py); the in-chat /approve welcomes them itself."""
        row = self.store.one("SELECT * FROM pairing WHERE code_hash = ?", (self.code_hash(code),))
        if row is None:
            return self._wrong(now)
        found = Approval(
            "approved",
            row["platform"],
            row["user_id"],
            row["user_name"],
            row["chat_id"],
            account=row["account"],
        )
        until = self.locked_until(found.platform or "", now)
        if until is not None:
            return Approval(
                "locked", found.platform, found.user_id, found.user_name, found.chat_id, until
            )
        if _dt(row["expires_at"]) <= now:
            self.store.execute("DELETE FROM pairing WHERE id = ?", (row["id"],))
            return Approval(
                "expired", found.platform, found.user_id, found.user_name, found.chat_id
            )
        people_changed(self.store)  # who is let in changes (gateway/knowledge/people.py keeps it)
        with self.store.tx() as conn:
            conn.execute("DELETE FROM pairing WHERE id = ?", (row["id"],))
            conn.execute(
                "INSERT INTO approved_users (platform, account, user_id, user_name, approved_at,"
                " approved_by) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (platform, account, user_id) DO UPDATE SET"
                " approved_at = excluded.approved_at, approved_by = excluded.approved_by",
                (row["platform"], row["account"], row["user_id"], row["user_name"], iso(now), by),
            )
            conn.execute(
                "UPDATE pairing_lockouts SET failures = 0 WHERE platform = ?", (row["platform"],)
            )
            if announce:
                conn.execute(
                    "INSERT INTO access_events (kind, platform, user_id, chat_id, detail,"
                    " created_at, account) VALUES ('approved', ?, ?, ?, ?, ?, ?)",
                    (row["platform"], row["user_id"], row["chat_id"], by, iso(now), row["account"]),
                )
        return found

    def _wrong(self, now: datetime) -> Approval:
        rows = self.store.all(
            "SELECT DISTINCT platform FROM pairing WHERE expires_at > ?", (iso(now),)
        )
        targets = [r[0] for r in rows if self.locked_until(r[0], now) is None]
        locked: list[str] = []
        until = now + LOCKOUT
        with self.store.tx() as conn:
            for platform in targets:
                conn.execute(
                    "INSERT INTO pairing_lockouts (platform, "
                    "failures) VALUES (?, 1) ON CONFLICT (platform)"
                    " DO UPDATE SET failures = failures + 1",
                    (platform,),
                )
                failures = conn.execute(
                    "SELECT failures FROM pairing_lockouts WHERE platform = ?", (platform,)
                ).fetchone()[0]
                if failures >= MAX_FAILED_APPROVALS:
                    conn.execute(
                        "UPDATE pairing_lockouts SET failures = "
                        "0, locked_until = ? WHERE platform = ?",
                        (iso(until), platform),
                    )
                    locked.append(platform)
        return Approval("wrong", locked_until=until if locked else None, locked_now=tuple(locked))

    def revoke(self, platform: str, user_id: str, *, now: datetime | None = None) -> bool:
        """Forget an approved user (and any code they hold); True if there was anything to forget.
        The revocation is recorded for the daemon, which ends the user's running sessions
        (gateway/ops/access_watch.py)."""
        people_changed(self.store)
        with self.store.tx() as conn:
            a = conn.execute(
                "DELETE FROM approved_users WHERE platform = ? AND user_id = ?", (platform, user_id)
            )
            b = conn.execute(
                "DELETE FROM pairing WHERE platform = ? AND user_id = ?", (platform, user_id)
            )
            conn.execute(
                "INSERT INTO access_events (kind, platform, "
                "user_id, created_at) VALUES ('revoked', ?, ?, ?)",
                (platform, user_id, iso(now or datetime.now(UTC))),
            )
            return a.rowcount + b.rowcount > 0

    def deny(self, platform: str, user_id: str, *, now: datetime) -> bool:
        """End a pending request (the dashboard's Deny); True if there was one. Its code stops
        working (the stored hash is replaced by one no code has) and the requester cools down as
        after an expired request: asking again within REQUEST_COOLDOWN gets no new code, so a denied
        stranger does not reappear at once. Revoking the user lifts the wait."""
        with self.store.tx() as conn:
            return (
                conn.execute(
                    "UPDATE pairing SET expires_at = ?, code_hash "
                    "= ? WHERE platform = ? AND user_id = ?"
                    " AND expires_at > ?",
                    (iso(now), f"denied:{secrets.token_hex(16)}", platform, user_id, iso(now)),
                ).rowcount
                > 0
            )


def _dt(text: str) -> datetime:
    value = parse_iso(text)
    if value is None:
        raise StoreError("pairing row without a time")
    return value


def _minutes(delta: timedelta) -> int:
    return int(delta.total_seconds() // 60)


def _hhmm(when: datetime | None) -> str:
    return "later" if when is None else when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _bot(account: str) -> str:
    return "" if account == DEFAULT_ACCOUNT else f" [bot account {account}]"


def render_listing(book: PairingBook, now: datetime) -> str:
    """`gateway pairing list`: who is waiting, who was approved, which platforms are locked."""
    lines = ["Pending pairing requests (the code itself is not stored: ask the user for it):"]
    pending = book.pending(now)
    for p in pending:
        name = f" ({p.user_name})" if p.user_name else ""
        left = max(0, _minutes(p.expires_at - now))
        lines.append(
            f"  {p.platform}:{p.user_id}{name}{_bot(p.account)}  asked "
            f"{_hhmm(p.created_at)}, expires in {left} min"
        )
    if not pending:
        lines.append("  none")
    lines.append("Approved users:")
    approved = book.approved()
    for a in approved:
        name = f" ({a.user_name})" if a.user_name else ""
        lines.append(
            f"  {a.platform}:{a.user_id}{name}{_bot(a.account)}  approved "
            f"{_hhmm(a.approved_at)} by {a.approved_by}"
        )
    if not approved:
        lines.append("  none")
    for lock in book.lockouts(now):
        if lock.locked_until is not None:
            lines.append(
                f"Pairing on {lock.platform} is locked until {_hhmm(lock.locked_until)} "
                "(too many wrong codes)."
            )
        else:
            lines.append(
                f"{lock.platform}: {lock.failures} wrong code(s) "
                f"of {MAX_FAILED_APPROVALS} before a lockout."
            )
    return "\n".join(lines)
