"""Catch-up after a (re)connect: hand adapters that can fetch history (`CatchUp`) the newest stored
message id per recently active chat, so what was said while they were away (or told to a daemon
killed before it stored it) is answered once they are back. The store's dedupe makes an overlap with
live events harmless. And after a restart, `replay`: what was stored but not answered yet is
answered (a turn that stopped for a person goes on)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from gateway.events import (
    DEFAULT_ACCOUNT,
    AdapterHealth,
    CatchUp,
    ChatRef,
    Inbound,
    Submit,
    SubmitResult,
    account_of,
)
from gateway.store.database import Store
from gateway.store.rows import iso, parse_iso
from gateway.store.transcript import decode_inbound

if TYPE_CHECKING:
    from gateway.sessions.manager import SessionManager

log = logging.getLogger(__name__)

# a chat quiet for longer is not fetched (inbound rows live 72 h by default anyway)
WINDOW = timedelta(days=7)
MAX_CHATS = 500  # the most recently active chats only: one history request each

# The newest stored message per place: a message that started a thread (its id is the thread's) was
# posted in the chat itself, so it counts there. Ids compare as right-aligned text: numeric ids
# order as numbers.
_LAST_SEEN_SQL = """
SELECT chat_type, chat_id,
       CASE WHEN thread_id = platform_message_id THEN NULL ELSE thread_id END AS place,
       MAX(printf('%40s', platform_message_id)) AS last, MAX(received_at) AS latest
FROM inbound
WHERE platform = ? AND account = ? AND received_at >= ? AND id <= ?
GROUP BY chat_id, place
ORDER BY latest DESC
LIMIT ?
"""


def last_seen(
    store: Store,
    platform: str,
    *,
    since: datetime,
    upto_row: int | None = None,
    max_chats: int = MAX_CHATS,
    account: str = DEFAULT_ACCOUNT,
) -> dict[ChatRef, str]:
    """Newest stored inbound message id per chat (and thread) of `platform` (as bot `account` saw
    it) active since `since`, counting only rows up to `upto_row`: what arrived live after the
    adapter reconnected must not hide the gap before it."""
    upto = upto_row if upto_row is not None else _max_row(store)
    rows = store.all(_LAST_SEEN_SQL, (platform, account, iso(since), upto, max_chats))
    return {
        ChatRef(platform, r["chat_type"], r["chat_id"], r["place"], account): str(r["last"]).strip()
        for r in rows
    }


# The threads the bot took part in: a session of the thread, or a message from it that was taken
# (the adapter only hands in what addresses the bot, and a thread's first taken message is where the
# bot joins it).
_THREADS_SQL = """
SELECT chat_type, chat_id, thread_id, MAX(at) AS latest FROM (
  SELECT chat_type, chat_id, thread_id, created_at AS at FROM sessions
  WHERE platform = ?1 AND account = ?3 AND thread_id IS NOT NULL
  UNION ALL
  SELECT chat_type, chat_id, thread_id, received_at AS at FROM inbound
  WHERE platform = ?1 AND account = ?3 AND thread_id IS NOT NULL)
GROUP BY chat_id, thread_id ORDER BY latest DESC LIMIT ?2
"""


def joined_threads(
    store: Store, platform: str, *, most: int = 4096, account: str = DEFAULT_ACCOUNT
) -> list[ChatRef]:
    """The `most` most recently active threads of `platform` the bot (`account`) took part in,
    oldest first."""
    rows = store.all(_THREADS_SQL, (platform, most, account))
    return [
        ChatRef(platform, r["chat_type"], r["chat_id"], r["thread_id"], account)
        for r in reversed(rows)
    ]


def _max_row(store: Store) -> int:
    row = store.one("SELECT MAX(id) FROM inbound")
    return int(row[0]) if row is not None and row[0] is not None else 0


class CatchUps:
    """Runs each `CatchUp` adapter's catch-up once per connection, after it came up.

    The watermark: the first message an adapter hands in while (re)connecting, before its catch-up
    ran, marks the last inbound row that predates the connection; the catch-up only counts rows up
    to it.
    """

    def __init__(
        self,
        store: Store,
        adapters: Mapping[str, object],
        *,
        health: Callable[[str], AdapterHealth | None],
        clock: Callable[[], datetime],
        window: timedelta = WINDOW,
        max_chats: int = MAX_CHATS,
    ) -> None:
        self.store = store
        self.health = health
        self.clock = clock
        self.window = window
        self.max_chats = max_chats
        self._adapters = {name: a for name, a in adapters.items() if isinstance(a, CatchUp)}
        self._marks: dict[str, int] = {}
        # connected_since of the connection caught up
        self._caught_up_at: dict[str, datetime | None] = {}

    def watch(self, submit: Submit) -> Submit:
        """The submit adapters get: notes the watermark while a catch-up is owed."""
        watched = self._adapters

        async def submit_watched(inbound: Inbound) -> SubmitResult:
            platform = inbound.chat.adapter_key  # the adapter's name (its platform and bot account)
            if platform in watched and platform not in self._marks and self._owed(platform):
                self._marks[platform] = _max_row(self.store)
            return await submit(inbound)

        return submit_watched

    def _owed(self, platform: str) -> bool:
        health = self.health(platform)
        if health is None or health.state != "running":
            return True
        return (
            platform not in self._caught_up_at
            or health.connected_since != self._caught_up_at[platform]
        )

    async def after_up(self, platform: str) -> int:
        """Called when `platform`'s adapter came up
        (again); returns how many messages it submitted."""
        adapter = self._adapters.get(platform)
        if adapter is None:
            return 0
        health = self.health(platform)
        self._caught_up_at[platform] = health.connected_since if health is not None else None
        mark = self._marks.pop(platform, None)
        try:
            seen = last_seen(
                self.store,
                getattr(adapter, "platform", platform),
                since=self.clock() - self.window,
                upto_row=mark,
                max_chats=self.max_chats,
                account=account_of(adapter),
            )
            return await adapter.catch_up(seen)
        except Exception:
            log.exception("%s: catching up on missed messages failed", platform)
            return 0


async def replay(manager: SessionManager) -> tuple[int, int]:
    """Answer stored-but-unanswered messages (oldest first); too old ones get the offline note as
    their answer. A turn that stopped for a person goes on whatever its age (its request re-armed
    with its remaining time)."""
    waiting = manager.waiting
    if waiting is not None:
        waiting.load()
    max_age = timedelta(minutes=manager.config.delivery.replay_max_age_minutes)
    now = manager.clock()
    resumed = expired = 0
    for row in manager.store.unfinished_inbound():
        inbound = decode_inbound(row.payload)
        received = parse_iso(row.received_at) or now
        if now - received > max_age and (waiting is None or not waiting.resumes(row.id)):
            await manager._settle(
                row.id, "expired", f"t{row.id}", inbound, manager.config.delivery.offline_notice
            )
            expired += 1
            continue
        key = manager.key_for(inbound)
        resumed += 1
        # stored, then the process died before answering it
        if await manager._command(row.id, inbound, key):
            continue
        manager.store.set_inbound_status(row.id, "pending", now=now)
        await manager._enqueue(key, row.id, inbound)
    return resumed, expired
