"""People: a person is one or more platform identities
(`telegram:123`, `discord:456`, `slack:U02`, `web:owner`).

Linked identities share one profile (memories/people/<id>.md), one session_search scope and one
pairing approval. A person is made the first time one of their identities is seen; linking merges
two people into one, unlinking gives an identity a person (and an empty profile) of its own. The web
chat and the console are the local owner: every user there is the one identity `web:owner`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from gateway.errors import GatewayError
from gateway.events import PLATFORMS
from gateway.knowledge.memory import MemoryStore
from gateway.store.database import Store
from gateway.store.rows import iso

LOCAL_OWNER = "web:owner"
# loopback (or a token): whoever reaches them is the owner
OWNER_PLATFORMS = frozenset({"web", "cli"})


class OwnedSession(Protocol):
    """The parts of a session row (gateway/store/rows.py) that say whom it belongs to."""

    @property
    def key(self) -> str: ...
    @property
    def platform(self) -> str: ...
    @property
    def chat_type(self) -> str: ...
    @property
    def chat_id(self) -> str: ...
    @property
    def thread_id(self) -> str | None: ...
    @property
    def user_id(self) -> str | None: ...


def identity_of(platform: str, user_id: str) -> str:
    return LOCAL_OWNER if platform in OWNER_PLATFORMS else f"{platform}:{user_id}"


def parse_identity(text: str) -> tuple[str, str]:
    """`telegram:123` → ("telegram", "123"); a clear error for anything else."""
    platform, _, user_id = text.strip().partition(":")
    if platform not in PLATFORMS or not user_id:
        raise GatewayError(f"expected PLATFORM:ID (e.g. telegram:123, web:owner); got {text!r}")
    return platform, user_id


def personal_owner(session: OwnedSession) -> str | None:
    """The user a session belongs to: a DM's, or a group member's own session
    (sessions.group_per_user); None for a shared one (a thread, or a group with one session for
    everyone). Reads the key sessions/manager.py makes."""
    if session.user_id is None:
        return None
    if session.chat_type == "dm":
        return session.user_id
    own = f"{session.platform}:{session.chat_type}:{session.chat_id}:{session.user_id}"
    return session.user_id if session.thread_id is None and session.key == own else None


@dataclass(frozen=True, slots=True)
class Identity:
    identity: str
    platform: str
    user_id: str
    user_name: str | None
    username: str | None
    linked_by: str


@dataclass(frozen=True, slots=True)
class Person:
    id: int
    name: str | None
    created_at: str
    identities: tuple[Identity, ...]
    timezone: str | None = None  # IANA name; None: the gateway's zone

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(i.identity for i in self.identities)

    @property
    def accounts(self) -> tuple[tuple[str, str], ...]:
        """(platform, user id) of every identity, for searches over stored rows; the owner's web and
        cli ids are not known here (each browser has its own), so those rows are matched by platform
        alone."""
        return tuple((i.platform, i.user_id) for i in self.identities)

    def label(self) -> str:
        name = f" {self.name}" if self.name else ""
        return f"person {self.id}{name} ({', '.join(sorted(self.ids))})"


# identities and people kept (~0.9 KB a person); past it the cache starts over
CACHE_MAX = 2_000


class _Kept:
    """What the PeopleBooks on one store's connection have read: shared by all of them (the daemon
    has several: the roles', the scheduler's), so a write through any one is seen by every other."""

    def __init__(self, version: int) -> None:
        self.ids: dict[str, int | None] = {}  # identity → person id (None: not known)
        self.people: dict[int, Person] = {}
        self.version = version  # the store's data_version when last looked at
        self.generation = 0


_KEPT: weakref.WeakKeyDictionary[Store, _Kept] = weakref.WeakKeyDictionary()


def _kept(store: Store) -> _Kept:
    kept = _KEPT.get(store)
    if kept is None:
        kept = _KEPT[store] = _Kept(store.data_version())
    return kept


def people_changed(store: Store) -> None:
    """Who is who, or who is let in, changed through this store's connection (an approval, an
    erasure): every PeopleBook on it reads afresh, and what was worked out from people (the admin by
    elimination) is redone."""
    kept = _kept(store)
    kept.ids.clear()
    kept.people.clear()
    kept.generation += 1


class PeopleBook:
    """People and their identities, in the gateway's SQLite database.

    Every turn asks who its sender is, so what was read is kept (per store: see _Kept) until a write
    through this connection (`people_changed`), or until another connection commits (a `gateway
    users` or `pairing` command, another process), which SQLite's `data_version` tells. `stamp()`
    counts those, so what others work out from people and approvals can be kept until it moves."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._kept = _kept(store)

    def stamp(self) -> int:
        """The store's generation of people and approvals, after a look at whether another
        connection committed."""
        kept = self._kept
        version = self.store.data_version()
        if version != kept.version:
            kept.version = version
            people_changed(self.store)
        return kept.generation

    def invalidate(self) -> None:
        people_changed(self.store)

    # ------------------------------------------------------------------ reads
    def find(self, identity: str) -> Person | None:
        self.stamp()
        ids = self._kept.ids
        if identity not in ids:
            row = self.store.one("SELECT person_id FROM identities WHERE identity = ?", (identity,))
            self._remember(identity, None if row is None else int(row[0]))
        person_id = ids.get(identity)
        return None if person_id is None else self._get(person_id)

    def _remember(self, identity: str, person_id: int | None) -> None:
        ids = self._kept.ids
        if len(ids) >= CACHE_MAX:
            ids.clear()
        ids[identity] = person_id

    def get(self, person_id: int) -> Person | None:
        self.stamp()
        return self._get(person_id)

    def _get(self, person_id: int) -> Person | None:
        people = self._kept.people
        person = people.get(person_id)
        if person is None:
            person = self._load(person_id)
            if person is not None:
                if len(people) >= CACHE_MAX:
                    people.clear()
                people[person_id] = person
        return person

    def _load(self, person_id: int) -> Person | None:
        row = self.store.one("SELECT * FROM people WHERE id = ?", (person_id,))
        if row is None:
            return None
        ids = self.store.all(
            "SELECT * FROM identities WHERE person_id = ? ORDER BY created_at, identity",
            (person_id,),
        )
        return Person(
            int(row["id"]),
            row["name"],
            row["created_at"],
            tuple(
                Identity(
                    r["identity"],
                    r["platform"],
                    r["user_id"],
                    r["user_name"],
                    r["username"],
                    r["linked_by"],
                )
                for r in ids
            ),
            row["timezone"],
        )

    def lookup(self, text: str) -> Person | None:
        """A person by id (`3`) or by any of their identities (`telegram:123`)."""
        text = text.strip()
        if text.isdigit():
            return self.get(int(text))
        return self.find(identity_of(*parse_identity(text)))

    def all(self) -> list[Person]:
        rows = self.store.all("SELECT id FROM people ORDER BY id")
        return [p for p in (self.get(int(r[0])) for r in rows) if p is not None]

    # ------------------------------------------------------------------ writes
    def resolve(
        self,
        platform: str,
        user_id: str,
        *,
        now: datetime,
        user_name: str | None = None,
        username: str | None = None,
    ) -> Person:
        """The person behind this platform user, made (with an empty profile) the first time they
        are seen."""
        identity = identity_of(platform, user_id)
        person = self.find(identity)
        if person is None:
            return self._create(identity, platform, user_id, user_name, username, now)
        mine = next((i for i in person.identities if i.identity == identity), None)
        if mine is not None and (
            (user_name and user_name != mine.user_name) or (username and username != mine.username)
        ):
            self._rename(identity, person.id, user_name, username)
            person = self.get(person.id) or person
        return person

    def _rename(
        self, identity: str, person_id: int, user_name: str | None, username: str | None
    ) -> None:
        self.invalidate()
        with self.store.tx() as conn:
            conn.execute(
                "UPDATE identities SET user_name = COALESCE(?, "
                "user_name), username = COALESCE(?, username)"
                " WHERE identity = ?",
                (user_name, username, identity),
            )
            if user_name:
                conn.execute("UPDATE people SET name = ? WHERE id = ?", (user_name, person_id))
        self._remember(identity, person_id)

    def _create(
        self,
        identity: str,
        platform: str,
        user_id: str,
        user_name: str | None,
        username: str | None,
        now: datetime,
    ) -> Person:
        if identity == LOCAL_OWNER:
            platform, user_id, user_name = "web", "owner", user_name or "owner"
        self.invalidate()
        with self.store.tx() as conn:
            # BEGIN IMMEDIATE: a second process making the same person waits, then sees it
            found = conn.execute(
                "SELECT person_id FROM identities WHERE identity = ?", (identity,)
            ).fetchone()
            if found is None:
                person_id = conn.execute(
                    "INSERT INTO people (name, created_at) VALUES (?, ?)", (user_name, iso(now))
                ).lastrowid
                conn.execute(
                    "INSERT INTO identities (identity, person_id, "
                    "platform, user_id, user_name, username,"
                    " created_at, linked_by) VALUES (?, ?, ?, ?, ?, ?, ?, 'seen')",
                    (identity, person_id, platform, user_id, user_name, username, iso(now)),
                )
            else:
                person_id = found[0]
        self._remember(identity, int(person_id or 0))  # the sender's next turn reads nothing
        person = self.get(int(person_id or 0))
        if person is None:
            raise GatewayError(f"could not store the person for {identity}")
        return person

    def set_timezone(self, person_id: int, timezone: str | None) -> None:
        """The person's own time zone (an IANA name the
        caller checked), or None for the gateway's."""
        self.invalidate()
        with self.store.tx() as conn:
            conn.execute("UPDATE people SET timezone = ? WHERE id = ?", (timezone, person_id))

    def link(self, keep: Person, other: Person, memory: MemoryStore, *, by: str) -> Person:
        """`other`'s identities join `keep`, and its profile entries are added to `keep`'s
        (duplicates dropped); `keep`'s time zone stays, or `other`'s is taken when `keep` had
        none."""
        if keep.id == other.id:
            return keep
        self.invalidate()
        with self.store.tx() as conn:
            conn.execute(
                "UPDATE people SET timezone = COALESCE(timezone, ?) WHERE id = ?",
                (other.timezone, keep.id),
            )
            conn.execute(
                "UPDATE identities SET person_id = ?, linked_by = ? WHERE person_id = ?",
                (keep.id, by, other.id),
            )
            conn.execute("DELETE FROM people WHERE id = ?", (other.id,))
        kept, merged_in = memory.profiles_everywhere(keep.id), memory.profiles_everywhere(other.id)
        for mine, theirs in zip(kept, merged_in, strict=False):  # each agent's folder of profiles
            mine.absorb(theirs)
        merged = self.get(keep.id)
        assert merged is not None
        return merged

    def unlink(self, identity: str, *, now: datetime) -> Person:
        """The identity leaves its person and becomes a person of its own, with an empty profile
        (the profile stays with the identities that remain). An access event tells the daemon to end
        the identity's running conversations: their frozen prompts carry the profile it no longer
        shares (gateway/ops/access_watch.py)."""
        person = self.find(identity)
        if person is None:
            raise GatewayError(f"{identity} is not known")
        if len(person.identities) == 1:
            raise GatewayError(
                f"{identity} is the only identity of {person.label()}: nothing to unlink"
            )
        self.invalidate()
        with self.store.tx() as conn:
            new_id = conn.execute(
                "INSERT INTO people (name, created_at) VALUES ((SELECT user_name FROM identities"
                " WHERE identity = ?), ?)",
                (identity, iso(now)),
            ).lastrowid
            conn.execute(
                "UPDATE identities SET person_id = ?, linked_by = 'unlinked' WHERE identity = ?",
                (new_id, identity),
            )
            mine = next(i for i in person.identities if i.identity == identity)
            conn.execute(
                "INSERT INTO access_events (kind, platform, user_id, detail, created_at) VALUES"
                " ('unlinked', ?, ?, ?, ?)",
                (mine.platform, mine.user_id, f'{{"from": {person.id}, "to": {new_id}}}', iso(now)),
            )
        fresh = self.get(int(new_id or 0))
        assert fresh is not None
        return fresh
