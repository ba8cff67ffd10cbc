"""Forgetting a person (the right to be forgotten): their profile, their conversations, what the
search index holds of them, and the media files of their sessions.

Their own sessions (DMs, their sessions in groups) go whole: messages (the search index follows by
its triggers), usage rows, inbound and outbound rows, which one-time notices their DM got
(media_notices). What they said in a conversation shared with others stays as a turn, its text
replaced, so the others' transcripts keep their shape. Then their identities, approvals and link
codes, their profile file and `media/<session id>/`. One transaction for the database; the files
after it. The web chat is the owner's alone, so forgetting the owner also empties `media/uploads/`
(what the web chat took in, kept there until the retention; the prepared copies are in session
folders).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gateway.events import ChatRef, Inbound
from gateway.knowledge.memory import LEGACY_USER_FILE, MemoryStore
from gateway.knowledge.people import OWNER_PLATFORMS, PeopleBook, Person, personal_owner
from gateway.store.database import Store
from gateway.store.media_files import delete_session_media, media_root, session_dir
from gateway.store.rows import SessionRow, _row, iso, parse_iso
from gateway.store.transcript import encode_inbound

log = logging.getLogger(__name__)

REDACTED = "[deleted: this person asked to be forgotten]"
SUMMARY_REDACTED = "[summary deleted: someone in this conversation asked to be forgotten]"


@dataclass(frozen=True, slots=True)
class ForgetPlan:
    """What forgetting a person removes; shown before the confirmation, returned after the deed."""

    person: Person
    sessions: tuple[int, ...]
    keys: tuple[str, ...]
    messages: int
    shared_messages: int
    profile_chars: int
    media_dirs: tuple[Path, ...]
    jobs: tuple[int, ...] = ()
    uploads: tuple[Path, ...] = ()  # the web chat's files: the owner's

    def describe(self) -> str:
        return (
            f"{self.person.label()}: {len(self.sessions)} session(s) with {self.messages} "
            f"message(s), {self.shared_messages} message(s) of theirs in shared conversations "
            f"(text removed), a profile of {self.profile_chars} characters, {len(self.media_dirs)} "
            f"media folder(s), {len(self.uploads)} web chat upload(s), {len(self.jobs)} scheduled "
            "job(s)"
        )


class Forgetter:
    def __init__(self, people: PeopleBook, memory: MemoryStore, home: Path) -> None:
        self.people = people
        self.store = people.store
        self.memory = memory
        self.home = home

    def plan(self, person: Person) -> ForgetPlan:
        owned = self.owned_sessions(person)
        sessions = tuple(s.id for s in owned)
        ids = json.dumps(list(sessions))
        row = self.store.one(
            "SELECT COUNT(*) FROM messages WHERE session_id IN (SELECT value FROM json_each(?))",
            (ids,),
        )
        shared = sum(
            self._shared_count(platform, user_id, ids) for platform, user_id in accounts(person)
        )
        media = tuple(d for d in (session_dir(self.home, sid) for sid in sessions) if d.is_dir())
        profile = sum(len(f.read().strip()) for f in self.memory.profiles_everywhere(person.id))
        keys = tuple(sorted({s.key for s in owned}))
        return ForgetPlan(
            person,
            sessions,
            keys,
            int(row[0]) if row else 0,
            shared,
            profile,
            media,
            tuple(self._jobs(person)),
            self._uploads(person),
        )

    def _uploads(self, person: Person) -> tuple[Path, ...]:
        """Every file the web chat took in, when `person` is the owner (the only one to upload)."""
        if not any(user_id is None for _, user_id in accounts(person)):
            return ()
        folder = web_uploads(self.home)
        if not folder.is_dir():
            return ()
        return tuple(sorted(p for p in folder.iterdir() if p.is_file()))

    def _forget_legacy_profile(self, person: Person) -> None:
        """The old global USER.md, kept as USER.md.migrated, is this person's profile when it was
        moved to them."""
        row = self.store.one("SELECT text FROM people_notes WHERE name = 'user_md_migration'")
        if row is not None and re.search(
            rf"became the profile of person {person.id}[ (]", str(row[0])
        ):
            self.memory.legacy_user().with_name(LEGACY_USER_FILE + ".migrated").unlink(
                missing_ok=True
            )
            self.store.execute(
                "UPDATE people_notes SET text = ? WHERE name = 'user_md_migration'",
                (f"{row[0]} (deleted since: its person was forgotten)",),
            )

    def _jobs(self, person: Person) -> list[int]:
        found: list[int] = []
        for platform, user_id in accounts(person):
            where, args = (
                ("platform = ?", (platform,))
                if user_id is None
                else ("platform = ? AND user_id = ?", (platform, user_id))
            )
            found += [int(r[0]) for r in self.store.all(f"SELECT id FROM jobs WHERE {where}", args)]
        return sorted(set(found))

    def owned_sessions(self, person: Person) -> list[SessionRow]:
        found: dict[int, SessionRow] = {}
        for platform, user_id in accounts(person):
            where, args = (
                ("platform = ?", (platform,))
                if user_id is None
                else ("platform = ? AND user_id = ?", (platform, user_id))
            )
            for r in self.store.all(f"SELECT * FROM sessions WHERE {where}", args):
                session = _row(SessionRow, r)
                if personal_owner(session) is not None:
                    found[session.id] = session
        for job_id in self._jobs(person):  # the sessions their scheduled jobs ran in
            for r in self.store.all(
                "SELECT * FROM sessions WHERE platform = 'cron' AND chat_id = ?", (f"job{job_id}",)
            ):
                found[int(r["id"])] = _row(SessionRow, r)
        return [found[k] for k in sorted(found)]

    def _shared_count(self, platform: str, user_id: str | None, owned: str) -> int:
        if user_id is None:
            return 0
        row = self.store.one(
            "SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session_id WHERE"
            " m.user_id = ? AND s.platform = ? AND m.session_id NOT IN"
            " (SELECT value FROM json_each(?))",
            (user_id, platform, owned),
        )
        return int(row[0]) if row else 0

    def forget(self, plan: ForgetPlan, *, now: datetime) -> ForgetPlan:
        person = plan.person
        ids = json.dumps(list(plan.sessions))
        # what is deleted is overwritten, not left in free pages
        self.store.conn.execute("PRAGMA secure_delete = ON")
        with self.store.tx() as conn:
            for platform, user_id in accounts(person):
                # the live previews of their turns (chat and message ids)
                where, args = (
                    ("platform = ?", (platform,))
                    if user_id is None
                    else ("platform = ? AND user_id = ?", (platform, user_id))
                )
                conn.execute(
                    "DELETE FROM previews WHERE turn_id IN (SELECT "
                    f"'t' || id FROM inbound WHERE {where})",
                    args,
                )
            for sql in _OWNED_SQL:
                conn.execute(sql, (ids,))
            newest = conn.execute("SELECT MAX(id) FROM inbound").fetchone()[0]
            for platform, user_id in accounts(person):
                _forget_account(conn, platform, user_id, ids)
            files = _blank_shared_turns(conn)
            _keep_inbound_ids(conn, newest)
            jobs = json.dumps(list(plan.jobs))
            # What their jobs posted (a reminder in a group names them): turn ids of the runs, and
            # jm<job>@… notices.
            conn.execute(
                "DELETE FROM outbound WHERE turn_id IN "
                "(SELECT turn_id FROM job_runs WHERE job_id IN"
                " (SELECT value FROM json_each(?)))",
                (jobs,),
            )
            for job_id in plan.jobs:
                conn.execute("DELETE FROM outbound WHERE turn_id LIKE ?", (f"jm{job_id}@%",))
            conn.execute(
                "DELETE FROM job_runs WHERE job_id IN (SELECT value FROM json_each(?))", (jobs,)
            )
            conn.execute("DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))", (jobs,))
            conn.execute("DELETE FROM link_codes WHERE person_id = ?", (person.id,))
            conn.execute("DELETE FROM identities WHERE person_id = ?", (person.id,))
            conn.execute("DELETE FROM people WHERE id = ?", (person.id,))
            detail = json.dumps({"person": person.id, "keys": list(plan.keys)})
            for identity in person.identities:
                # what the daemon was still to do for them (a welcome) goes too
                conn.execute(
                    "DELETE FROM access_events WHERE platform = ? AND user_id = ?",
                    (identity.platform, identity.user_id),
                )
            for identity in person.identities:
                conn.execute(
                    "INSERT INTO access_events (kind, platform, user_id, detail, created_at)"
                    " VALUES ('forgotten', ?, ?, ?, ?)",
                    (identity.platform, identity.user_id, detail, iso(now)),
                )
        self.store.history_cache.clear()
        self.people.invalidate()
        _scrub(self.store)
        for profile in self.memory.profiles_everywhere(person.id):  # each agent's profile of them
            profile.delete()
        self._forget_legacy_profile(person)
        delete_session_media(self.home, plan.sessions)
        for upload in self._uploads(person):  # as found now: one uploaded since the plan goes too
            upload.unlink(missing_ok=True)
        for name in files:  # what they sent in shared conversations
            path = (media_root(self.home) / name).resolve()
            if path.is_relative_to(media_root(self.home).resolve()):
                path.unlink(missing_ok=True)
        return plan


# The person's own sessions, given as a JSON list of ids (?1). Outbound rows have no session: a DM's
# are found by its chat; in a group, by the turn ids made from the person's inbound rows (t<id>,
# c<id>, c<id>:paired …).
_IN_OWNED = "(SELECT value FROM json_each(?1))"
_OWNED_SQL: Sequence[str] = (
    (
        f"DELETE FROM outbound WHERE turn_id IN (SELECT 'wait' || id FROM approvals"
        f" WHERE session_id IN {_IN_OWNED})"
    ),
    f"DELETE FROM approvals WHERE session_id IN {_IN_OWNED}",
    f"DELETE FROM messages WHERE session_id IN {_IN_OWNED}",
    f"DELETE FROM llm_calls WHERE session_id IN {_IN_OWNED}",
    (
        "DELETE FROM outbound WHERE EXISTS (SELECT 1 FROM sessions "
        f"s WHERE s.id IN {_IN_OWNED} AND s.chat_type = 'dm'"
        " AND s.platform = outbound.platform AND s.chat_id = outbound.chat_id)"
    ),
    (
        "DELETE FROM outbound WHERE rtrim(substr(turn_id, 2), "
        "'0123456789:abcdefghijklmnopqrstuvwxyz') = '' AND"
        " CAST(substr(turn_id, 2) AS INTEGER) IN (SELECT "
        f"id FROM inbound WHERE session_id IN {_IN_OWNED})"
    ),
    (
        "DELETE FROM media_notices WHERE EXISTS (SELECT "
        f"1 FROM sessions s WHERE s.id IN {_IN_OWNED} AND"
        " s.chat_type = 'dm' AND s.platform = media_notices.platform "
        "AND s.chat_id = media_notices.chat_id)"
    ),
    (
        f"DELETE FROM chat_voice WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id IN {_IN_OWNED}"
        " AND s.chat_type = 'dm' AND s.platform = chat_voice.platform"
        " AND s.chat_id = chat_voice.chat_id)"
    ),
    f"DELETE FROM session_models WHERE key IN (SELECT key FROM sessions WHERE id IN {_IN_OWNED})",
    f"DELETE FROM inbound WHERE session_id IN {_IN_OWNED}",
    f"UPDATE sessions SET parent_id = NULL WHERE parent_id IN {_IN_OWNED}",
    f"DELETE FROM sessions WHERE id IN {_IN_OWNED}",
)


def _forget_account(
    conn: sqlite3.Connection, platform: str, user_id: str | None, owned: str
) -> None:
    # Requests a turn of theirs waited on (gateway/approvals/): the call's arguments, its message.
    who = "platform = ?" + ("" if user_id is None else " AND requester = ?")
    keys = (platform,) if user_id is None else (platform, user_id)
    conn.execute(
        f"DELETE FROM outbound WHERE turn_id IN (SELECT 'wait' || id FROM approvals WHERE {who})",
        keys,
    )
    conn.execute(f"DELETE FROM approvals WHERE {who}", keys)
    if user_id is None:  # the local owner: every web chat and console row is theirs
        conn.execute("DELETE FROM inbound WHERE platform = ?", (platform,))
        return
    # In a conversation shared with others, their turns stay (the others' transcript keeps its
    # shape) with every message of those turns, the agent's answers included, emptied of text.
    conn.execute(
        "UPDATE messages SET content = ?, user_name = NULL WHERE turn_id IN (SELECT m.turn_id FROM"
        " messages m JOIN sessions s ON s.id = m.session_id "
        "WHERE m.user_id = ? AND s.platform = ? AND"
        " m.turn_id IS NOT NULL AND m.session_id NOT IN (SELECT value FROM json_each(?)))",
        (REDACTED, user_id, platform, owned),
    )
    conn.execute(
        "UPDATE messages SET content = ?, user_name = NULL WHERE user_id = ? AND session_id IN"
        " (SELECT id FROM sessions WHERE platform = ?) AND session_id NOT IN (SELECT value FROM"
        " json_each(?))",
        (REDACTED, user_id, platform, owned),
    )
    # A summary of a shared conversation written after they spoke in it may retell what they said.
    conn.execute(
        "UPDATE messages SET content = ? WHERE kind = "
        "'summary' AND EXISTS (SELECT 1 FROM messages m JOIN"
        " sessions s ON s.id = m.session_id WHERE m.session_id "
        "= messages.session_id AND m.user_id = ? AND"
        " s.platform = ? AND m.id < messages.id)",
        (SUMMARY_REDACTED, user_id, platform),
    )
    # The answers recorded for their messages, wherever they were sent (turn ids t<inbound id>,
    # c<id>, m<id> …).
    conn.execute(
        "DELETE FROM outbound WHERE rtrim(substr(turn_id, "
        "2), '0123456789:abcdefghijklmnopqrstuvwxyz') = ''"
        " AND CAST(substr(turn_id, 2) AS INTEGER) IN (SELECT id FROM inbound WHERE platform = ? AND"
        " user_id = ?)",
        (platform, user_id),
    )
    # Their messages in groups and channels stay as empty rows: a platform delivering one again (a
    # retry, a restart's catch-up reading the channel's history) finds it taken, and ids are not
    # handed out twice.
    for row in conn.execute(
        "SELECT * FROM inbound WHERE platform = ? AND user_id = ? AND chat_type != 'dm'",
        (platform, user_id),
    ).fetchall():
        empty = Inbound(
            ChatRef(platform, row["chat_type"], row["chat_id"], row["thread_id"]),
            user_id="",
            text=REDACTED,
            message_id=row["platform_message_id"],
            received_at=parse_iso(row["received_at"]) or datetime.now(UTC),
        )
        conn.execute(
            "UPDATE inbound SET user_id = '', user_name = "
            "NULL, text = ?, payload = ?, status = 'forgotten'"
            " WHERE id = ?",
            (REDACTED, encode_inbound(empty), row["id"]),
        )
    conn.execute("DELETE FROM inbound WHERE platform = ? AND user_id = ?", (platform, user_id))
    conn.execute(
        "DELETE FROM approved_users WHERE platform = ? AND user_id = ?", (platform, user_id)
    )
    conn.execute("DELETE FROM pairing WHERE platform = ? AND user_id = ?", (platform, user_id))


def _scrub(store: Store) -> None:
    """The search index keeps a deleted message's words in its older segments until they are merged:
    merge them (one rewrite of the index: seconds on a large store), then hand the write-ahead log's
    old pages back."""
    with store.tx() as conn:
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
        conn.execute("INSERT INTO messages_fts_tri(messages_fts_tri) VALUES ('optimize')")
    busy = store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    if busy:  # a reader (the daemon) holds old frames: the next checkpoint overwrites them
        log.info(
            "forget: the write-ahead log is still in use; its old pages go at the next checkpoint"
        )


def _blank_shared_turns(conn: sqlite3.Connection) -> list[str]:
    """The redacted turns' tool calls keep their ids and names, not their arguments, and the
    pictures they sent go; returns the media files to delete (named under GATEWAY_HOME/media)."""
    files: list[str] = []
    for row in conn.execute(
        "SELECT id, tool_calls, media FROM messages WHERE content = ? AND (tool_calls IS NOT NULL"
        " OR media IS NOT NULL)",
        (REDACTED,),
    ).fetchall():
        calls = [{**call, "arguments": "{}"} for call in json.loads(row["tool_calls"] or "[]")]
        files += [
            str(image.get("file"))
            for image in json.loads(row["media"] or "[]")
            if image.get("file")
        ]
        conn.execute(
            "UPDATE messages SET tool_calls = ?, media = NULL WHERE id = ?",
            (json.dumps(calls) if calls else None, row["id"]),
        )
    return files


def _keep_inbound_ids(conn: sqlite3.Connection, newest: int | None) -> None:
    """SQLite gives the next row the highest id in use plus one: had the erasure removed the newest
    inbound row, the next message would get its id again, and with it the turn id (t<id>) of an
    answer already recorded."""
    if (
        newest is None
        or conn.execute("SELECT 1 FROM inbound WHERE id = ?", (newest,)).fetchone() is not None
    ):
        return
    conn.execute(
        "INSERT INTO inbound (id, platform, chat_type, "
        "chat_id, platform_message_id, user_id, text, payload,"
        " received_at, status) VALUES (?, '', 'dm', '', ?, '', '', '{}', '', 'forgotten')",
        (newest, f"forgotten:{newest}"),
    )


def web_uploads(home: Path) -> Path:
    """Where the web chat keeps what it took in (GATEWAY_HOME/media/uploads: the wiring's path)."""
    return media_root(home) / "uploads"


def accounts(person: Person) -> list[tuple[str, str | None]]:
    """(platform, user id) per identity; None for the local owner's platforms, where every user id
    is theirs."""
    out: list[tuple[str, str | None]] = []
    for i in person.identities:
        if i.platform in OWNER_PLATFORMS:
            out.extend((p, None) for p in sorted(OWNER_PLATFORMS))
        else:
            out.append((i.platform, i.user_id))
    return out
