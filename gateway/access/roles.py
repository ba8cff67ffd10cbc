"""Roles: who is an admin, who may write which memory,
and so what a turn's or a flush's tools act as.

Admins are the people holding an identity listed in `access.admins` (linked identities count: they
are one person), and the local owner (web chat, console). With no admins configured and exactly one
person allowed on the platforms, that person is the admin: a single-user install needs no admin
list. `memory.shared_writers` says whether only admins (the default) or everyone may write the
shared notes; `memory.chat_writers` the same for a chat's notes.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime

from gateway.access.gate import Rules, platform_rules
from gateway.access.pairing import PairingBook
from gateway.agent.tools.registry import ToolContext
from gateway.config.settings import Config
from gateway.events import Inbound
from gateway.knowledge.files import FileLock
from gateway.knowledge.memory import MemoryFile, MemoryRights, MemoryStore, MemoryView, chat_key
from gateway.knowledge.people import (
    LOCAL_OWNER,
    OwnedSession,
    PeopleBook,
    Person,
    identity_of,
    personal_owner,
)
from gateway.store.rows import SessionRow, iso

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


class Roles:
    """The `callers` seam of the session manager, the prompt
    and the flush (gateway/agent/tools/registry.py)."""

    def __init__(
        self, config: Config, people: PeopleBook, pairing: PairingBook, *, clock: Clock
    ) -> None:
        self.config = config
        self.people = people
        self.pairing = pairing
        self.clock = clock
        self._sole: tuple[int, frozenset[str] | None] | None = None  # (people's stamp, answer)

    # ------------------------------------------------------------------ admins
    def is_admin(self, person: Person | None) -> bool:
        if person is None:
            return False
        ids = person.ids
        if LOCAL_OWNER in ids:
            return True
        if self.config.access.admins:
            return bool(ids.intersection(self.config.access.admins))
        sole = self.sole_person()
        return sole is not None and bool(ids & sole)

    def sender_is_admin(self, inbound: Inbound) -> bool:
        """Whether a message's sender is an admin (access.admins, linked identities, the one
        allowed person)."""
        person = self.people.resolve(
            inbound.chat.platform,
            inbound.user_id,
            now=self.clock(),
            user_name=inbound.user_name,
            username=inbound.username,
        )
        return self.is_admin(person)

    def admits(self, ctx: ToolContext) -> bool:
        """Whether a tool call acts for an admin (the shell: for admins' turns only)."""
        return self.is_admin(ctx.person)

    def admin_owned(self, session: SessionRow) -> bool:
        """Whether the session is an admin's own (a DM, or their own session in a group): the
        only sessions admin-only tools are listed in."""
        return self.is_admin(self.owner_person(self.speaks_for(session)))

    def sole_person(self) -> frozenset[str] | None:
        """The identities of the one person allowed on the platforms (by config or pairing), or None
        when that is not exactly one person (none, several, or a role-based allowlist whose members
        are not known).

        Asked on every turn when no admins are configured, and it reads every allowed person: kept
        until people or approvals change (here, by another command, by another process; see
        PeopleBook.stamp)."""
        stamp = self.people.stamp()
        if self._sole is None or self._sole[0] != stamp:
            self._sole = (stamp, self._sole_person())
        return self._sole[1]

    def _sole_person(self) -> frozenset[str] | None:
        """Stops at the second person found: a bot with thousands of allowed users must not look
        each of them up whenever someone new writes."""
        rules = platform_rules(self.config)
        if any(r.roles for r in rules.values()):
            return None
        found: set[frozenset[str]] = set()
        for ids in self._allowed_ids(rules):
            found.add(ids)
            if len(found) > 1:
                return None
        return next(iter(found), None)

    def _allowed_ids(self, rules: dict[tuple[str, str], Rules]) -> Iterator[frozenset[str]]:
        """Each allowed user's identities, one user at a time: config's, then the approved."""
        for (platform, _), rule in rules.items():
            for uid in rule.user_ids:
                yield self._person_ids(identity_of(platform, uid))
            for handle in rule.usernames:
                yield self._handle_ids(platform, handle)
        for approved in self.pairing.approved():
            yield self._person_ids(identity_of(approved.platform, approved.user_id))

    def profile_owner(self) -> Person | None:
        """Whose profile the old global USER.md was: the first admin, else the one allowed person,
        else the local owner when no platform lets anyone in; None when it cannot be told (several
        people, no admin)."""
        for admin in self.config.access.admins:
            platform, _, user_id = admin.partition(":")
            return self.people.resolve(platform, user_id, now=self.clock())
        sole = self.sole_person()
        known = sorted(i for i in sole or () if ":@" not in i)
        if known:
            platform, _, user_id = known[0].partition(":")
            return self.people.resolve(platform, user_id, now=self.clock())
        if sole is None and not self._anyone_allowed():
            return self.people.resolve("web", "owner", now=self.clock())
        return None

    def _anyone_allowed(self) -> bool:
        return any(not rules.is_empty for rules in platform_rules(self.config).values()) or bool(
            self.pairing.approved()
        )

    def _person_ids(self, identity: str) -> frozenset[str]:
        person = self.people.find(identity)
        return person.ids if person is not None else frozenset({identity})

    def _handle_ids(self, platform: str, handle: str) -> frozenset[str]:
        row = self.people.store.one(
            "SELECT identity FROM identities WHERE platform = ? AND lower(username) = ?",
            (platform, handle),
        )
        return self._person_ids(row[0]) if row is not None else frozenset({f"{platform}:@{handle}"})

    # ------------------------------------------------------------------ memory
    def rights(self, person: Person | None, view: MemoryView, *, own: bool = False) -> MemoryRights:
        """`own`: the conversation is the person's own (see MemoryRights.own_conversation)."""
        memory = self.config.memory
        admin = self.is_admin(person)
        return MemoryRights(
            person_id=person.id if person is not None else None,
            own_conversation=own and person is not None,
            shared=memory.shared_writers == "everyone" or admin,
            chat=view.chat,
            chat_writable=view.chat is not None and (memory.chat_writers == "everyone" or admin),
            shared_policy=memory.shared_writers,
            chat_policy=memory.chat_writers,
        )

    def view(self, session: SessionRow) -> MemoryView:
        """What a session's prompt shows besides the shared notes: its owner's profile (none in a
        shared conversation) and, in a group or channel, the chat's notes."""
        return self.view_at(self.speaks_for(session))

    def view_at(self, place: OwnedSession) -> MemoryView:
        """`view` for a session at `place`, also one not made yet (`gateway prompt --person`)."""
        owner = self.owner_person(place)
        return MemoryView(owner.id if owner is not None else None, self._chat(place))

    def _chat(self, session: OwnedSession) -> str | None:
        if session.chat_type == "dm" or not self.config.memory.chat_notes:
            return None
        return chat_key(session.platform, session.chat_id)

    def speaks_for(self, session: SessionRow) -> SessionRow:
        """A scheduled job's run (its own `cron` session, gateway/scheduling/turn.py) speaks for the
        chat and the person that made the job: their profile when it was made in a DM, none when its
        answer goes to a group."""
        if (
            session.platform != "cron"
            or not session.chat_id.startswith("job")
            or not session.chat_id[3:].isdigit()
        ):
            return session
        job = self.people.store.one(
            "SELECT platform, chat_type, chat_id FROM jobs WHERE id = ?",
            (int(session.chat_id[3:]),),
        )
        if job is None:
            return session
        key = f"{job['platform']}:{job['chat_type']}:{job['chat_id']}" + (
            ":job" if job["chat_type"] != "dm" else ""
        )
        return replace(
            session,
            platform=job["platform"],
            chat_type=job["chat_type"],
            chat_id=job["chat_id"],
            key=key,
        )

    def owner_person(self, session: OwnedSession) -> Person | None:
        owner = personal_owner(session)
        return (
            None
            if owner is None
            else self.people.resolve(session.platform, owner, now=self.clock())
        )

    # ------------------------------------------------------------------ tool contexts
    def asker(
        self,
        session: SessionRow,
        user_id: str | None,
        user_name: str | None = None,
        username: str | None = None,
    ) -> ToolContext:
        """The tools of a turn act for the person who sent its message."""
        with self.people.store.one_look():
            session = self.speaks_for(session)
            person = (
                self.people.resolve(
                    session.platform,
                    user_id,
                    now=self.clock(),
                    user_name=user_name,
                    username=username,
                )
                if user_id
                else None
            )
            return self._context(session, user_id, person)

    def owner(self, session: SessionRow) -> ToolContext:
        """A flush acts for the session's owner; a shared session's flush for nobody's profile."""
        with self.people.store.one_look():
            session = self.speaks_for(session)
            person = self.owner_person(session)
            return self._context(session, personal_owner(session), person)

    def _context(
        self, session: SessionRow, user_id: str | None, person: Person | None
    ) -> ToolContext:
        return ToolContext(
            session_id=session.id,
            platform=session.platform,
            chat_type=session.chat_type,
            user_id=user_id,
            home=self.config.home,
            db_path=self.config.db_path,
            chat_id=session.chat_id,
            person=person,
            agent=session.agent,
            memory=self.rights(
                person,
                MemoryView(None, self._chat(session)),
                own=user_id is not None and personal_owner(session) == user_id,
            ),
        )


MIGRATION_NOTE = "user_md_migration"


def migrate_global_profile(roles: Roles, memory: MemoryStore) -> str | None:
    """Once: the single global USER.md of earlier versions becomes the profile of the owner (the
    first admin, the one allowed person, or the local owner when no platform lets anyone in), or
    joins the shared notes when there is no such person. A copy stays as USER.md.migrated; what
    happened is logged and kept for `gateway doctor`."""
    legacy = memory.legacy_user()
    if not legacy.is_file():
        return None
    owner = roles.profile_owner()
    target = memory.profile(owner.id) if owner is not None else memory.shared()
    where = (
        f"the profile of {owner.label()}" if owner is not None else "the shared notes (MEMORY.md)"
    )
    shutil.copy2(legacy, legacy.with_name(legacy.name + ".migrated"))
    added = target.absorb(MemoryFile(legacy, 0, "USER.md", FileLock(memory.directory / ".lock")))
    note = (
        f"memories/USER.md (one profile for everyone, from an earlier version) became {where}: "
        f"{added} entr{'y' if added == 1 else 'ies'} moved; the old file is kept as "
        "USER.md.migrated"
    )
    roles.people.store.execute(
        "INSERT OR REPLACE INTO people_notes (name, text, created_at) VALUES (?, ?, ?)",
        (MIGRATION_NOTE, note, iso(roles.clock())),
    )
    log.warning("%s", note)
    return note
