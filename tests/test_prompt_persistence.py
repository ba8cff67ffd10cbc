"""The stored prompt: built once per session, sent byte for byte on every turn and after a restart.

Everything runs the real gateway graph against the fake LLM on the Anthropic wire; the assertions
compare the `system` bytes the fake received with the `sessions.system_prompt` column.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.ops.wiring import Gateway
from gateway.store.rows import SessionRow
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config

LATE = datetime(2026, 3, 14, 23, 30, tzinfo=UTC)  # a Saturday
# Access control denies by default: the test users (u1 is inbound()'s default id) are on the
# telegram allowlist. Sessions expire after 2 idle hours (the real lifecycle policy); no pre-reset
# flush calls in the record.
ALLOWLIST = textwrap.dedent("""\
    telegram:
      token: test-token
      allowed_users: [u1, u7]
    session_reset:
      mode: idle
      idle_minutes: 120
    memory:
      flush_enabled: false
    """)
IDLE = timedelta(hours=3)


@dataclass
class Clock:
    now: datetime = LATE

    def __call__(self) -> datetime:
        return self.now


class Pipeline:
    """One gateway graph on a home; `restart()` closes
    it and builds a new one on the same home and db."""

    def __init__(self, home: Path, clock: Clock) -> None:
        self.home = home
        self.clock = clock
        self.adapter = RecordingAdapter("telegram")
        self.gw: Gateway = self._build()

    def _build(self) -> Gateway:
        gw = gateway_for(self.home, [self.adapter], clock=self.clock)
        self.adapter.submit = gw.sessions.submit
        return gw

    async def say(self, text: str, **kw: Any) -> None:
        await self.gw.sessions.submit(
            inbound(text, platform="telegram", received_at=self.clock(), **kw)
        )
        await self.gw.sessions.wait_idle()

    async def restart(self) -> None:
        await self.close()
        self.gw = self._build()

    async def close(self) -> None:
        await self.gw.llm.close()
        self.gw.store.close()

    def session(self, key: str = "telegram:dm:c1") -> SessionRow:
        row = self.gw.store.active_session(key)
        assert row is not None
        return row


def systems(fake: FakeLLM) -> list[str]:
    out = []
    for body in fake.anthropic_requests():
        [block] = body["system"]
        out.append(block["text"])
    return out


def last_user_text(body: dict[str, Any]) -> str:
    return "\n".join(b["text"] for b in body["messages"][-1]["content"] if b["type"] == "text")


@pytest.fixture
async def pipe(home: Path, fake_llm: FakeLLM) -> AsyncIterator[Pipeline]:
    write_config(home, base_url=fake_llm.base_url, extra=ALLOWLIST)
    p = Pipeline(home, Clock())
    yield p
    await p.close()


async def test_stored_prompt_is_sent_byte_for_byte_across_turns_and_a_restart(
    pipe: Pipeline, fake_llm: FakeLLM
) -> None:
    await pipe.say("hello")
    await pipe.say("second")
    stored = pipe.session().system_prompt
    built_at = pipe.session().prompt_built_at
    assert stored and "Conversation started: Saturday, March 14, 2026" in stored
    # Things that would change a freshly built prompt: a memory entry, a SOUL.md, another day.
    (pipe.home / "memories").mkdir(exist_ok=True)
    (pipe.home / "memories" / "MEMORY.md").write_text(
        "Written while the daemon was down.", encoding="utf-8"
    )
    (pipe.home / "SOUL.md").write_text("You are a pirate.", encoding="utf-8")
    pipe.clock.now = LATE + timedelta(minutes=50)  # Sunday now, and the session is still alive
    await pipe.restart()
    await pipe.say("after the restart")
    await pipe.say("and once more")

    sent = systems(fake_llm)
    assert len(sent) == 4
    assert all(s.encode() == stored.encode() for s in sent)
    row = pipe.session()
    assert row.system_prompt == stored and row.prompt_built_at == built_at
    assert row.prompt_rebuild_reason is None and row.prompt_rebuilds == 0
    assert pipe.adapter.texts()[-1] == "echo: and once more [users=4]"


async def test_model_change_rebuilds_the_prompt_and_records_why(
    pipe: Pipeline, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    await pipe.say("hello")
    old = pipe.session().system_prompt
    assert old and "Model: claude-test (provider: anthropic)" in old
    config = pipe.home / "config.yaml"
    config.write_text(config.read_text().replace("name: claude-test", "name: claude-bigger"))
    # past midnight: the rebuilt prompt keeps the start date
    pipe.clock.now += timedelta(minutes=50)
    await pipe.restart()
    with caplog.at_level(logging.INFO, logger="gateway.sessions.manager"):
        await pipe.say("on the new model")
        await pipe.say("still the new model")

    row = pipe.session()
    assert row.model == "claude-bigger"
    assert row.prompt_rebuild_reason == "model_change" and row.prompt_rebuilds == 1
    assert row.system_prompt == old.replace("Model: claude-test", "Model: claude-bigger")
    assert systems(fake_llm) == [old, row.system_prompt, row.system_prompt]
    assert [b["model"] for b in fake_llm.anthropic_requests()] == [
        "claude-test",
        "claude-bigger",
        "claude-bigger",
    ]
    rebuilt = [r.getMessage() for r in caplog.records if "prompt rebuilt" in r.getMessage()]
    assert rebuilt == [
        f"prompt rebuilt session={row.id} reason=model_change (was claude-test, now claude-bigger)"
    ]


async def test_group_sender_name_goes_to_the_user_message_not_the_prompt(
    pipe: Pipeline, fake_llm: FakeLLM
) -> None:
    await pipe.say(
        "hi all", chat_type="group", chat_id="g1", user_id="u7", user_name="Alice Liddell"
    )
    await pipe.say(
        "me too", chat_type="group", chat_id="g1", user_id="u7", user_name="Alice Liddell"
    )

    [first, second] = fake_llm.anthropic_requests()
    assert last_user_text(first) == "[Alice Liddell] hi all"
    assert last_user_text(second) == "[Alice Liddell] me too"
    row = pipe.session("telegram:group:g1:u7")
    assert row.system_prompt is not None
    assert "Alice" not in row.system_prompt and "u7" not in row.system_prompt
    assert systems(fake_llm) == [row.system_prompt, row.system_prompt]
    # the chat type is a session fact, so it may be in the prompt
    assert "shared group" in row.system_prompt


async def test_reset_note_goes_to_the_user_message_once_and_never_into_the_prompt(
    pipe: Pipeline, fake_llm: FakeLLM
) -> None:
    await pipe.say("first session")
    pipe.clock.now += IDLE
    await pipe.say("hello again")
    await pipe.say("and again")

    bodies = fake_llm.anthropic_requests()
    assert last_user_text(bodies[1]) == (
        "[Note: the previous conversation ended (it was idle for a while); "
        "this is a new session.]\nhello again"
    )
    assert last_user_text(bodies[2]) == "and again"
    new = pipe.session()
    assert new.parent_id is not None and new.system_prompt is not None
    assert "Note:" not in new.system_prompt and "idle" not in new.system_prompt
    assert systems(fake_llm)[1:] == [new.system_prompt, new.system_prompt]
    # The reset notice the user sees is separate from the reply.
    assert pipe.adapter.texts()[1].startswith(
        "Started a new conversation (it was idle for a while)."
    )


async def test_memory_written_during_a_session_shows_up_only_in_the_next_session(
    pipe: Pipeline, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        ToolCall(
            "memory",
            {"action": "add", "target": "user", "content": "Drinks green tea."},
            id="toolu_1",
        ),
        Reply("Noted."),
    )
    await pipe.say("remember that I drink green tea")
    await pipe.say("what do I drink?")

    memory_file = pipe.home / "memories" / "people" / "1.md"
    assert "Drinks green tea." in memory_file.read_text(encoding="utf-8")
    first = pipe.session()
    assert first.system_prompt is not None
    sent = systems(fake_llm)
    assert len(sent) == 3 and set(sent) == {first.system_prompt}  # tool round trip + the next turn
    assert "green tea" not in first.system_prompt

    pipe.clock.now += IDLE
    await pipe.say("new day")
    second = pipe.session()
    assert second.id != first.id and second.system_prompt is not None
    assert "USER PROFILE (who the user is) [" in second.system_prompt
    assert "Drinks green tea." in second.system_prompt
    assert systems(fake_llm)[-1] == second.system_prompt


async def test_two_clock_times_on_the_same_day_give_identical_prompts(
    pipe: Pipeline, fake_llm: FakeLLM
) -> None:
    pipe.clock.now = datetime(2026, 3, 14, 0, 0, 1, tzinfo=UTC)
    await pipe.say("early", chat_id="early")
    pipe.clock.now = datetime(2026, 3, 14, 23, 59, 59, tzinfo=UTC)
    await pipe.say("late", chat_id="late")
    early = pipe.session("telegram:dm:early")
    late = pipe.session("telegram:dm:late")
    assert early.system_prompt is not None and late.system_prompt is not None
    assert early.prompt_built_at != late.prompt_built_at
    assert early.system_prompt.encode() == late.system_prompt.encode()
    for hhmm in ("00:00", "23:59", "0:00", "11:59"):
        assert hhmm not in early.system_prompt


async def test_prompt_stored_before_the_first_call_survives_a_failed_turn(
    home: Path, fake_llm: FakeLLM
) -> None:
    from tests.fakes.base import Fault

    write_config(
        home,
        base_url=fake_llm.base_url,
        extra=ALLOWLIST
        + textwrap.dedent("""\
        agent:
          system_message: Be brief.
        """),
    )
    pipe = Pipeline(home, Clock())
    try:
        fake_llm.fail("/v1/messages", Fault(500))
        await pipe.say("this one fails")
        stored = pipe.session().system_prompt
        assert stored and "Be brief." in stored
        assert pipe.adapter.texts() == [
            (
                "Sorry, I couldn't get an answer from the model just now (the model "
                "service is unavailable). Please try again in a moment."
            )
        ]
        pipe.clock.now += timedelta(minutes=50)  # another day, same session
        await pipe.restart()
        await pipe.say("this one works")
        assert systems(fake_llm) == [stored, stored]
    finally:
        await pipe.close()


async def test_a_failed_tool_result_reads_the_same_on_later_turns(
    home: Path, fake_llm: FakeLLM
) -> None:
    """Anthropic's tool_result carries is_error; a later turn built from the store must send the
    same block, or the cached prefix breaks there (it did: the flag was not stored)."""
    write_config(home, base_url=fake_llm.base_url)
    fake_llm.script(
        ToolCall("skill_view", {"name": "no-such-skill"}),
        Reply("There is no such skill."),
        Reply("ok"),
    )
    gw = gateway_for(home, [RecordingAdapter("cli")])
    try:
        await gw.sessions.submit(inbound("show me the deploy skill"))
        await gw.sessions.wait_idle()
        gw.store.history_cache.clear()  # as after a restart: the next turn reads the rows back
        await gw.sessions.submit(inbound("thanks"))
        await gw.sessions.wait_idle()
    finally:
        await gw.llm.close()
        gw.store.close()
    requests = fake_llm.anthropic_requests()

    def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            b
            for m in body["messages"]
            for b in (m["content"] if isinstance(m["content"], list) else [])
            if b.get("type") == "tool_result"
        ]

    [in_turn] = tool_results(requests[1])
    [later] = tool_results(requests[2])
    assert in_turn.get("is_error") is True
    assert {k: v for k, v in later.items() if k != "cache_control"} == {
        k: v for k, v in in_turn.items() if k != "cache_control"
    }
