"""Restart replay and dedupe: stored messages are answered after a restart, oldest first and in chat
order; stale ones get the offline note; a redelivered message is never answered twice."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from gateway.events import Inbound, OutboundKind, Submit, SubmitOutcome
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway
from gateway.store.transcript import encode_inbound
from tests.delivery import TELEGRAM_CONFIG, ReplyLLM, ScriptedAdapter, gateway_on, write_home
from tests.fakeclock import FakeClock
from tests.helpers import inbound

OFFLINE = "Sorry, I was offline when you sent this. Please send it again if it still matters."


def store_unanswered(gw: Gateway, message: Inbound) -> None:
    """What an adapter's submit wrote before the process died: the inbound row, no answer."""
    chat = message.chat
    assert (
        gw.store.insert_inbound(
            platform=chat.platform,
            chat_type=chat.chat_type,
            chat_id=chat.chat_id,
            thread_id=chat.thread_id,
            platform_message_id=message.message_id,
            user_id=message.user_id,
            user_name=message.user_name,
            text=message.text,
            payload=encode_inbound(message),
            received_at=message.received_at,
        )
        is not None
    )


def tg(text: str, chat_id: str, received_at: datetime, message_id: str | None = None) -> Inbound:
    return inbound(
        text, platform="telegram", chat_id=chat_id, received_at=received_at, message_id=message_id
    )


def crashed_home(
    home: Path, clock: FakeClock, messages: list[Inbound], config: str = TELEGRAM_CONFIG
) -> None:
    write_home(home, config)
    gw = gateway_on(clock, home, [ScriptedAdapter("telegram", clock)], ReplyLLM())
    for message in messages:
        store_unanswered(gw, message)
    gw.store.close()


async def test_replay_answers_oldest_first_and_keeps_each_chats_order(home: Path) -> None:
    clock = FakeClock()

    def ago(minutes: int) -> datetime:
        return clock.now() - timedelta(minutes=minutes)

    crashed_home(
        home,
        clock,
        [
            tg("a1", "A", ago(50)),
            tg("b1", "B", ago(40)),
            tg("a2", "A", ago(30)),
            tg("b2", "B", ago(20)),
            tg("a3", "A", ago(10)),
        ],
    )
    adapter = ScriptedAdapter("telegram", clock)
    llm = ReplyLLM()
    gw = gateway_on(clock, home, [adapter], llm)
    assert await clock.run(gw.sessions.replay()) == (5, 0)
    await clock.run(gw.sessions.wait_idle())
    assert llm.seen[0] == "a1"
    assert [t for t in llm.seen if t.startswith("a")] == ["a1", "a2", "a3"]
    assert [t for t in llm.seen if t.startswith("b")] == ["b1", "b2"]
    assert adapter.seen("A") == ["re: a1", "re: a2", "re: a3"] and adapter.seen("B") == [
        "re: b1",
        "re: b2",
    ]
    history = gw.store.all(
        "SELECT m.content FROM messages m JOIN sessions s ON s.id = m.session_id "
        "WHERE s.chat_id = 'A' ORDER BY m.id"
    )
    assert [r[0] for r in history] == ["a1", "re: a1", "a2", "re: a2", "a3", "re: a3"]
    assert {r[0] for r in gw.store.all("SELECT status FROM inbound")} == {"answered"}
    gw.store.close()


async def test_messages_older_than_the_limit_get_the_offline_note_instead(home: Path) -> None:
    clock = FakeClock()
    old = tg("what is the weather", "A", clock.now() - timedelta(hours=3), message_id="old")
    fresh = tg("are you back?", "A", clock.now() - timedelta(minutes=59), message_id="fresh")
    crashed_home(home, clock, [old, fresh])
    adapter = ScriptedAdapter("telegram", clock)
    llm = ReplyLLM()
    gw = gateway_on(clock, home, [adapter], llm)
    assert await clock.run(gw.sessions.replay()) == (1, 1)
    await clock.run(gw.sessions.wait_idle())
    assert llm.seen == ["are you back?"]  # no stale answer to the three-hour-old question
    assert adapter.seen("A") == [OFFLINE, "re: are you back?"]
    note = adapter.sent[0]
    assert (note.kind, note.reply_to_id) == (OutboundKind.NOTICE, "old")
    statuses = {r[0]: r[1] for r in gw.store.all("SELECT platform_message_id, status FROM inbound")}
    assert statuses == {"old": "expired", "fresh": "answered"}
    gw.store.close()


async def test_the_age_limit_and_the_note_are_configurable(home: Path) -> None:
    clock = FakeClock()
    config = (
        TELEGRAM_CONFIG
        + "delivery:\n  replay_max_age_minutes: 240\n  offline_notice: Back now, ask again?\n"
    )
    crashed_home(
        home,
        clock,
        [
            tg("three hours ago", "A", clock.now() - timedelta(hours=3)),
            tg("five hours ago", "B", clock.now() - timedelta(hours=5)),
        ],
        config,
    )
    adapter = ScriptedAdapter("telegram", clock)
    gw = gateway_on(clock, home, [adapter], ReplyLLM())
    assert await clock.run(gw.sessions.replay()) == (1, 1)
    await clock.run(gw.sessions.wait_idle())
    assert adapter.seen("A") == ["re: three hours ago"] and adapter.seen("B") == [
        "Back now, ask again?"
    ]
    gw.store.close()


async def test_a_redelivered_update_is_not_answered_again_even_after_a_restart(home: Path) -> None:
    write_home(home)
    clock = FakeClock()
    adapter = ScriptedAdapter("telegram", clock)
    llm = ReplyLLM()
    gw = gateway_on(clock, home, [adapter], llm)
    first = tg("hello", "A", clock.now(), message_id="update-1")
    assert (await clock.run(gw.sessions.submit(first))).outcome is SubmitOutcome.ACCEPTED
    await clock.run(gw.sessions.wait_idle())
    gw.store.close()

    adapter2 = ScriptedAdapter("telegram", clock)
    llm2 = ReplyLLM()
    gw2 = gateway_on(clock, home, [adapter2], llm2)
    # polling offset was not committed: Telegram resends
    again = await clock.run(gw2.sessions.submit(first))
    elsewhere = await clock.run(
        gw2.sessions.submit(tg("hello", "B", clock.now(), message_id="update-1"))
    )
    await clock.run(gw2.sessions.wait_idle())
    assert again.outcome is SubmitOutcome.DUPLICATE
    # ids are per chat: same id elsewhere is a new message
    assert elsewhere.outcome is SubmitOutcome.ACCEPTED
    assert adapter.seen() == ["re: hello"] and adapter2.seen() == ["re: hello"]
    assert [m.chat.chat_id for m in adapter2.sent] == ["B"] and llm2.seen == ["hello"]
    gw2.store.close()


class EagerAdapter(ScriptedAdapter):
    """Hands in a newer message the moment it connects,
    as Telegram does with updates waiting at startup."""

    def __init__(self, platform: str, clock: FakeClock, waiting: Inbound) -> None:
        super().__init__(platform, clock)
        self.waiting = waiting

    async def start(self, submit: Submit) -> None:
        await super().start(submit)
        await submit(self.waiting)


async def test_daemon_replays_before_adapters_hand_in_newer_messages(home: Path) -> None:
    clock = FakeClock()
    crashed_home(home, clock, [tg("older", "A", clock.now() - timedelta(minutes=2))])
    adapter = EagerAdapter("telegram", clock, tg("newer", "A", clock.now()))
    llm = ReplyLLM()
    gw = gateway_on(clock, home, [adapter], llm)
    daemon = Daemon(gw, install_signals=False)
    await clock.run(daemon.start())
    try:
        await clock.run(gw.sessions.wait_idle())
        await clock.advance(2)
        assert llm.seen == ["older", "newer"]
        assert [m.text for m in adapter.sent if m.kind is OutboundKind.REPLY] == [
            "re: older",
            "re: newer",
        ]
    finally:
        await clock.run(daemon.stop())


async def test_replies_recorded_before_a_crash_go_out_once_the_adapter_is_up(home: Path) -> None:
    clock = FakeClock()
    write_home(home)
    gw = gateway_on(clock, home, [ScriptedAdapter("telegram", clock)], ReplyLLM())
    chat = tg("x", "A", clock.now()).chat
    gw.store.insert_outbound(
        gw.outbox.rows_for("t9", chat, "recorded, never sent"), now=clock.now()
    )
    gw.store.close()
    adapter = ScriptedAdapter("telegram", clock)
    llm = ReplyLLM()
    gw2 = gateway_on(clock, home, [adapter], llm)
    daemon = Daemon(gw2, install_signals=False)
    await clock.run(daemon.start())
    try:
        await clock.settle()
        assert adapter.seen("A") == ["recorded, never sent"] and llm.seen == []
    finally:
        await clock.run(daemon.stop())


async def test_dedupe_remembers_message_ids_for_the_retention_window(home: Path) -> None:
    clock = FakeClock()
    config = TELEGRAM_CONFIG + "delivery:\n  dedupe_retention_hours: 72\n"
    seen_long_ago = tg("hello", "A", clock.now() - timedelta(hours=73), message_id="u-old")
    seen_recently = tg("hello", "A", clock.now() - timedelta(hours=71), message_id="u-recent")
    crashed_home(home, clock, [seen_long_ago, seen_recently], config)
    adapter = ScriptedAdapter("telegram", clock)
    gw = gateway_on(clock, home, [adapter], ReplyLLM())
    gw.store.execute("UPDATE inbound SET status = 'answered'")
    daemon = Daemon(gw, install_signals=False)
    await clock.run(daemon.start())
    try:
        await clock.settle()
        assert [r[0] for r in gw.store.all("SELECT platform_message_id FROM inbound")] == [
            "u-recent"
        ]
        assert (await gw.sessions.submit(seen_recently)).outcome is SubmitOutcome.DUPLICATE
    finally:
        await clock.run(daemon.stop())
