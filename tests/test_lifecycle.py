"""Reset policies: resolution (platform > chat type > default), idle and daily deadlines, DST, and
the lazy expiry as a user sees it (the triggering message answered in the new session, one notice,
the parent link)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config.settings import ResetOverride, SessionResetConfig, load_config
from gateway.errors import ConfigError
from gateway.sessions.lifecycle import (
    Policies,
    ResetPolicy,
    daily_boundary_after,
    deadline_for,
    latest_daily_boundary,
    resolve_policy,
)
from tests.fakes.llm import FakeLLM, Reply
from tests.helpers import RecordingAdapter, inbound, llm_url, write_config
from tests.lifecycle_support import FakeClock, open_gateway, session_row, user_messages

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
MODES = ("idle", "daily", "both", "none")


# ------------------------------------------------------------------------------------ resolution
@pytest.mark.parametrize("mode", MODES)
def test_default_mode_applies_everywhere(mode: str) -> None:
    cfg = SessionResetConfig(mode=mode)  # type: ignore[arg-type]
    assert resolve_policy(cfg, "telegram", "group") == ResetPolicy(mode, 1440.0, 4, True)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
def test_by_platform_beats_by_chat_type_and_default(mode: str) -> None:
    cfg = SessionResetConfig(
        mode="both",
        by_platform={"telegram": ResetOverride(mode=mode)},  # type: ignore[arg-type]
        by_chat_type={"group": ResetOverride(mode="none" if mode != "none" else "idle")},
    )
    assert resolve_policy(cfg, "telegram", "group").mode == mode
    assert resolve_policy(cfg, "telegram", "dm").mode == mode
    assert resolve_policy(cfg, "discord", "dm").mode == "both"


@pytest.mark.parametrize("mode", MODES)
def test_by_chat_type_beats_default(mode: str) -> None:
    cfg = SessionResetConfig(mode="both", by_chat_type={"group": ResetOverride(mode=mode)})  # type: ignore[arg-type]
    assert resolve_policy(cfg, "slack", "group").mode == mode
    assert resolve_policy(cfg, "slack", "dm").mode == "both"


def test_resolution_is_field_by_field() -> None:
    cfg = SessionResetConfig(
        idle_minutes=600,
        at_hour=3,
        notify=True,
        by_platform={"telegram": ResetOverride(mode="idle")},
        by_chat_type={"group": ResetOverride(idle_minutes=30, notify=False, at_hour=5)},
    )
    assert resolve_policy(cfg, "telegram", "group") == ResetPolicy("idle", 30.0, 5, False)
    assert resolve_policy(cfg, "telegram", "dm") == ResetPolicy("idle", 600.0, 3, True)


def test_overrides_come_from_yaml_with_located_errors(home: Path) -> None:
    (home / "config.yaml").write_text(
        "session_reset:\n  mode: both\n  by_platform:\n "
        "   telegram: {mode: idle, idle_minutes: 0.1}\n"
        "  by_chat_type:\n    group: {mode: daily, at_hour: 6}\n"
    )
    cfg = load_config(home).session_reset
    assert resolve_policy(cfg, "telegram", "group") == ResetPolicy("idle", 0.1, 6, True)
    assert resolve_policy(cfg, "web", "group") == ResetPolicy("daily", 1440.0, 6, True)
    (home / "config.yaml").write_text(
        "session_reset:\n  by_chat_type:\n    group:\n      at_hour: 25\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(home)
    assert "config.yaml:4: session_reset.by_chat_type.group.at_hour" in str(err.value)
    (home / "config.yaml").write_text(
        "session_reset:\n  by_platform:\n    telegram: {mode: weekly}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(home)
    assert "config.yaml:3: session_reset.by_platform.telegram.mode" in str(err.value)


# ------------------------------------------------------------------------------------ deadlines
def test_idle_deadline_counts_from_the_last_user_message() -> None:
    last = datetime(2030, 5, 1, 10, 0, tzinfo=UTC)
    found = deadline_for(ResetPolicy("idle", 0.1, 4, True), last, UTC)
    assert found is not None and found.at == last + timedelta(seconds=6) and found.reason == "idle"
    assert deadline_for(ResetPolicy("none", 1, 4, True), last, UTC) is None


def test_both_takes_whichever_comes_first() -> None:
    policy = ResetPolicy("both", 60, 4, True)
    evening = datetime(2030, 5, 1, 20, 0, tzinfo=UTC)
    found = deadline_for(policy, evening, UTC)
    assert found is not None and found.reason == "idle"
    late = datetime(2030, 5, 2, 3, 30, tzinfo=UTC)
    found = deadline_for(policy, late, UTC)
    assert (
        found is not None
        and found.reason == "daily"
        and found.at == datetime(2030, 5, 2, 4, 0, tzinfo=UTC)
    )


def test_daily_boundary_before_and_after_at_hour() -> None:
    policy = ResetPolicy("daily", 1440, 4, True)
    before = datetime(2030, 5, 1, 1, 59, tzinfo=UTC)  # 03:59 in Berlin (CEST, +2)
    after = datetime(2030, 5, 1, 2, 1, tzinfo=UTC)  # 04:01 in Berlin
    assert deadline_for(policy, before, BERLIN).at == datetime(2030, 5, 1, 2, 0, tzinfo=UTC)  # type: ignore[union-attr]
    assert deadline_for(policy, after, BERLIN).at == datetime(2030, 5, 2, 2, 0, tzinfo=UTC)  # type: ignore[union-attr]
    exactly = datetime(2030, 5, 1, 2, 0, tzinfo=UTC)
    assert daily_boundary_after(exactly, 4, BERLIN) == datetime(2030, 5, 2, 2, 0, tzinfo=UTC)
    assert latest_daily_boundary(exactly, 4, BERLIN) == exactly


def test_daily_expiry_is_judged_at_the_most_recent_boundary() -> None:
    policies = Policies(SessionResetConfig(mode="daily", at_hour=4), "Europe/Berlin")
    row = session_row(last_user_at=datetime(2030, 5, 1, 1, 30, tzinfo=UTC))  # 03:30 local
    # 03:59: still alive
    assert policies.expired(row, datetime(2030, 5, 1, 1, 59, tzinfo=UTC)) is None
    # 04:00: boundary passed
    assert policies.expired(row, datetime(2030, 5, 1, 2, 0, tzinfo=UTC)) == "daily"
    # 04:30 local: after today's
    later = session_row(last_user_at=datetime(2030, 5, 1, 2, 30, tzinfo=UTC))
    # 23:00 same day
    assert policies.expired(later, datetime(2030, 5, 1, 21, 0, tzinfo=UTC)) is None


def test_daily_boundary_across_spring_forward() -> None:
    # Berlin 2030-03-31: 02:00 CET jumps to 03:00 CEST. A 04:00 boundary is 02:00 UTC that day,
    # 03:00 UTC before.
    saturday = datetime(2030, 3, 30, 12, 0, tzinfo=UTC)
    assert daily_boundary_after(saturday, 4, BERLIN) == datetime(2030, 3, 31, 2, 0, tzinfo=UTC)
    friday = datetime(2030, 3, 29, 12, 0, tzinfo=UTC)
    assert daily_boundary_after(friday, 4, BERLIN) == datetime(2030, 3, 30, 3, 0, tzinfo=UTC)
    # at_hour 2 does not exist that day: the boundary is
    # the instant the clock jumps past it (01:00 UTC).
    assert daily_boundary_after(saturday, 2, BERLIN) == datetime(2030, 3, 31, 1, 0, tzinfo=UTC)
    assert daily_boundary_after(datetime(2030, 3, 31, 1, 0, tzinfo=UTC), 2, BERLIN) == datetime(
        2030, 4, 1, 0, 0, tzinfo=UTC
    )


def test_daily_boundary_across_fall_back() -> None:
    # New York 2030-11-03: 02:00 EDT falls back to 01:00
    # EST; 01:00 happens twice, the first one counts.
    saturday = datetime(2030, 11, 2, 18, 0, tzinfo=UTC)
    assert daily_boundary_after(saturday, 1, NEW_YORK) == datetime(2030, 11, 3, 5, 0, tzinfo=UTC)
    # 01:30 EDT, still before the repeat of 01:00 EST
    second_one = datetime(2030, 11, 3, 5, 30, tzinfo=UTC)
    assert daily_boundary_after(second_one, 1, NEW_YORK) == datetime(2030, 11, 4, 6, 0, tzinfo=UTC)
    # 04:00 EST
    assert daily_boundary_after(saturday, 4, NEW_YORK) == datetime(2030, 11, 3, 9, 0, tzinfo=UTC)
    # the day after the shift is 25 hours long: the deadline moves with the wall clock, not by 24 h
    assert daily_boundary_after(datetime(2030, 11, 2, 9, 0, tzinfo=UTC), 4, NEW_YORK) - datetime(
        2030, 11, 2, 8, 0, tzinfo=UTC
    ) == timedelta(hours=25)


@settings(max_examples=300, deadline=None)
@given(
    moment=st.datetimes(
        min_value=datetime(2029, 1, 1), max_value=datetime(2032, 12, 31), timezones=st.just(UTC)
    ),
    zone=st.sampled_from(
        ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC", "Asia/Kolkata"]
    ),
    at_hour=st.integers(0, 23),
    idle=st.floats(0.1, 5000),
    mode=st.sampled_from(MODES),
)
def test_the_fast_deadline_path_agrees_with_the_definition(
    moment: datetime, zone: str, at_hour: int, idle: float, mode: str
) -> None:
    """The bisect table the boot rebuild uses gives exactly what the plain zone arithmetic gives."""
    cfg = SessionResetConfig(mode=mode, idle_minutes=idle, at_hour=at_hour)  # type: ignore[arg-type]
    policies = Policies(cfg, zone)
    expected = deadline_for(resolve_policy(cfg, "cli", "dm"), moment, ZoneInfo(zone))
    found = policies.deadline("cli", "dm", moment)
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.reason == expected.reason
        assert abs((found.at - expected.at).total_seconds()) < 1e-5


def test_describe_policy() -> None:
    policies = Policies(SessionResetConfig(), "Europe/Berlin")
    assert (
        policies.describe(policies.policy("cli", "dm"))
        == "idle 24 h or daily at 04:00 (Europe/Berlin)"
    )
    assert policies.describe(ResetPolicy("idle", 0.1, 4, True)) == "idle 6 s"
    assert policies.describe(ResetPolicy("none", 0.1, 4, True)) == "never (mode: none)"


# ----------------------------------------------------------------------------------- in the gateway
def _setup(home: Path, fake_llm: FakeLLM, extra: str = "") -> RecordingAdapter:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"), extra=extra)
    return RecordingAdapter("cli")


async def test_idle_is_not_extended_by_bot_sends(home: Path, fake_llm: FakeLLM) -> None:
    clock = FakeClock()
    adapter = _setup(home, fake_llm, "session_reset: {mode: idle, idle_minutes: 10}\n")
    t0 = clock()

    def slow_answer(body: dict[str, object]) -> Reply:
        # the model takes 4 minutes; the reply is sent after
        clock.advance(minutes=4)
        return Reply("done")

    fake_llm.script(slow_answer)
    async with open_gateway(home, [adapter], clock=clock) as gw:
        assert gw.lifecycle is not None
        await gw.sessions.submit(inbound("hi"))
        await gw.sessions.wait_idle()
        assert adapter.texts() == ["done"]
        # a command is not a conversation message either
        await gw.sessions.submit(inbound("/status"))
        session = gw.store.active_session("cli:dm:c1")
        assert session is not None and session.last_user_at == t0.isoformat(timespec="microseconds")
        assert gw.lifecycle.timers.deadline("cli:dm:c1") == t0 + timedelta(minutes=10)
        clock.advance(minutes=6)  # 10 minutes after the user's message, 6 after the bot's reply
        assert gw.lifecycle.expired(session, clock()) == "idle"


async def test_expired_session_answers_the_message_in_a_new_session(
    home: Path, fake_llm: FakeLLM
) -> None:
    clock = FakeClock()
    adapter = _setup(home, fake_llm, "session_reset: {mode: idle, idle_minutes: 30}\n")
    async with open_gateway(home, [adapter], clock=clock) as gw:
        for text in ("one", "two"):
            await gw.sessions.submit(inbound(text))
            await gw.sessions.wait_idle()
        old = gw.store.active_session("cli:dm:c1")
        assert old is not None
        clock.advance(minutes=31)
        await gw.sessions.submit(inbound("three"))
        await gw.sessions.wait_idle()
        new = gw.store.active_session("cli:dm:c1")
        ended = gw.store.session(old.id)
        assert new is not None and new.id != old.id and new.parent_id == old.id
        assert ended.end_reason == "idle" and ended.ended_at == clock().isoformat(
            timespec="microseconds"
        )
        assert ended.flush_state == "pending"  # the flush workers are not running in this test
        assert adapter.texts()[2:] == [
            (
                "Started a new conversation (it was idle for a "
                "while). I still remember what I saved to memory."
            ),
            (
                "echo: [Note: the previous conversation ended (it "
                "was idle for a while); this is a new session.]\n"
                "three [users=1]"
            ),
        ]
        # the note is one-shot: the next message carries none and no second notice comes
        await gw.sessions.submit(inbound("four"))
        await gw.sessions.wait_idle()
        assert adapter.texts()[4:] == ["echo: four [users=2]"]
        assert user_messages(fake_llm)[-1] == "four"


async def test_message_after_a_timer_reset_gets_the_notice_and_note(
    home: Path, fake_llm: FakeLLM
) -> None:
    clock = FakeClock()
    adapter = _setup(
        home, fake_llm, "session_reset: {mode: daily, at_hour: 4}\nsessions: {timezone: UTC}\n"
    )
    async with open_gateway(home, [adapter], clock=clock) as gw:
        assert gw.lifecycle is not None
        await gw.sessions.submit(inbound("evening"))
        await gw.sessions.wait_idle()
        old = gw.store.active_session("cli:dm:c1")
        assert old is not None
        # the next 04:00: the timer closes the session
        clock.now = datetime(2031, 1, 7, 4, 0, tzinfo=UTC)
        assert await gw.lifecycle.expire_due(gw.lifecycle.timers.pop_due(clock())) == 1
        assert (
            gw.store.session(old.id).end_reason == "daily"
            and gw.store.active_session("cli:dm:c1") is None
        )
        clock.advance(hours=5)
        await gw.sessions.submit(inbound("morning"))
        await gw.sessions.wait_idle()
        new = gw.store.active_session("cli:dm:c1")
        assert new is not None and new.parent_id == old.id
        assert adapter.texts()[1:] == [
            "Started a new conversation (daily reset). I still remember what I saved to memory.",
            (
                "echo: [Note: the previous conversation ended (daily "
                "reset); this is a new session.]\nmorning [users=1]"
            ),
        ]


async def test_notify_false_sends_no_notice_but_still_tells_the_model(
    home: Path, fake_llm: FakeLLM
) -> None:
    clock = FakeClock()
    adapter = _setup(
        home,
        fake_llm,
        "session_reset:\n  mode: idle\n  idle_minutes: 30\n  by_platform: {cli: {notify: false}}\n",
    )
    async with open_gateway(home, [adapter], clock=clock) as gw:
        await gw.sessions.submit(inbound("one"))
        await gw.sessions.wait_idle()
        clock.advance(hours=1)
        await gw.sessions.submit(inbound("two"))
        await gw.sessions.wait_idle()
        assert len(adapter.texts()) == 2 and adapter.texts()[1].startswith(
            "echo: [Note: the previous conversation"
        )
