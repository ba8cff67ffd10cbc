"""People and memory scopes through the real gateway graph (recording adapters, the fake LLM): who
is an admin, which profile a session's prompt carries, what the memory tool may write, linked
identities, the USER.md move."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.agent.tools.memory import writable
from gateway.errors import ToolError
from gateway.knowledge.memory import MemoryRights, MemoryStore
from gateway.knowledge.people import personal_owner
from gateway.ops.doctor import Doctor
from gateway.ops.wiring import Gateway
from gateway.store.database import Store
from gateway.store.rows import utcnow
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config

PLATFORMS = ("telegram", "discord", "slack", "web")


def _config(home: Path, llm: FakeLLM, extra: str = "") -> None:
    write_config(
        home,
        base_url=llm.base_url,
        extra="web:\n  enabled: false\n"
        "telegram:\n  token: t\n  allowed_users: ['1', '2']\n"
        "discord:\n  token: d\n  allowed_users: ['9']\n" + extra,
    )


@asynccontextmanager
async def gateway(
    home: Path, llm: FakeLLM, extra: str = ""
) -> AsyncIterator[tuple[Gateway, dict[str, Any]]]:
    _config(home, llm, extra)
    adapters = {p: RecordingAdapter(p) for p in PLATFORMS}
    gw = gateway_for(home, list(adapters.values()))
    try:
        yield gw, adapters
    finally:
        await gw.outbox.wait_background()
        await gw.sessions.cancel_all()
        await gw.llm.close()
        gw.store.close()


async def _say(gw: Gateway, adapter: RecordingAdapter, text: str, **kw: Any) -> None:
    before = len(adapter.sent)
    await gw.sessions.submit(inbound(text, platform=adapter.platform, **kw))
    await adapter.wait_for(before + 1)
    await gw.sessions.wait_idle()


def _system(body: dict[str, Any]) -> str:
    system = body.get("system")
    return system if isinstance(system, str) else "".join(b["text"] for b in system or [])


# --------------------------------------------------------------- admins and the shared-notes policy
async def test_with_no_admins_the_one_allowed_person_is_the_admin(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(
        home, base_url=fake_llm.base_url, extra="telegram:\n  token: t\n  allowed_users: ['1']\n"
    )
    gw = gateway_for(home, [])
    try:
        roles = gw.roles
        assert roles is not None
        one = gw.people.resolve("telegram", "1", now=utcnow())
        stranger = gw.people.resolve("telegram", "7", now=utcnow())
        owner = gw.people.resolve("web", "any-browser", now=utcnow())
        assert roles.is_admin(one) and not roles.is_admin(stranger) and roles.is_admin(owner)
        # A second allowed person (approved from the terminal, on its own connection): nobody is the
        # admin by elimination any more (the local owner still is).
        cli = Store(gw.config.db_path)
        cli.execute(
            "INSERT INTO approved_users (platform, user_id, user_name, approved_at,"
            " approved_by) VALUES ('discord', '5', NULL, '2026-01-01', 'cli')"
        )
        cli.close()
        assert not roles.is_admin(one) and roles.is_admin(owner)
        # Linking the second into the first makes them one person again.
        gw.people.link(one, gw.people.resolve("discord", "5", now=utcnow()), gw.memory, by="test")
        assert roles.is_admin(gw.people.find("telegram:1"))
    finally:
        gw.store.close()


def test_the_memory_tool_refuses_with_the_place_it_may_write(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    member = MemoryRights(person_id=3, shared=False, chat="telegram:-100", chat_writable=True)
    with pytest.raises(
        ToolError,
        match=r"only admins may change them \(memory.shared_writers: admins\)\. Save "
        r"facts about the person you are talking to in their own profile",
    ):
        writable(store, member, "memory")
    assert writable(store, member, "user").path == tmp_path / "people" / "3.md"
    assert writable(store, member, "chat").path.parent == tmp_path / "chats"
    with pytest.raises(ToolError, match="this conversation has no chat notes"):
        writable(store, MemoryRights(person_id=3), "chat")
    with pytest.raises(
        ToolError, match=r"only admins may change this chat's notes \(memory.chat_writers: admins"
    ):
        writable(store, MemoryRights(person_id=3, chat="x:1", chat_policy="admins"), "chat")
    with pytest.raises(ToolError, match="no personal profile here"):
        writable(store, MemoryRights(), "user")


# ------------------------------------------------------------------ what a session's prompt carries
async def test_a_shared_thread_carries_no_profile_and_chat_notes_stay_in_their_chat(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with gateway(home, fake_llm) as (gw, adapters):
        tg = adapters["telegram"]
        one = gw.people.resolve("telegram", "1", now=utcnow())
        gw.memory.profile(one.id).add("Name: Uno")
        gw.memory.chat("telegram:-100").add("This group plans the spring trip")
        mark = len(fake_llm.anthropic_requests())
        await _say(
            gw, tg, "hi in a topic", chat_type="group", chat_id="-100", thread_id="77", user_id="1"
        )
        await _say(gw, tg, "hi in the group", chat_type="group", chat_id="-100", user_id="1")
        await _say(gw, tg, "hi elsewhere", chat_type="group", chat_id="-200", user_id="1")
        thread, own, elsewhere = (_system(b) for b in fake_llm.anthropic_requests()[mark:])
        assert "Name: Uno" not in thread and "spring trip" in thread  # shared: no personal profile
        assert (
            "Name: Uno" in own and "CHAT NOTES (this group only; written by its members) [" in own
        )
        assert "spring trip" not in elsewhere and "Name: Uno" in elsewhere


async def test_a_profile_written_today_is_in_the_next_session_only(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with gateway(home, fake_llm) as (gw, adapters):
        tg = adapters["telegram"]
        fake_llm.script(
            ToolCall("memory", {"action": "add", "target": "user", "content": "Prefers tea"}),
            Reply("ok"),
        )
        await _say(gw, tg, "I prefer tea", chat_id="1", user_id="1")
        await _say(gw, tg, "and?", chat_id="1", user_id="1")
        first, tool_round, second = (_system(b) for b in fake_llm.anthropic_requests())
        # frozen for the session's life
        assert first == tool_round == second and "Prefers tea" not in second
        await _say(gw, tg, "/new", chat_id="1", user_id="1")
        await _say(gw, tg, "hello again", chat_id="1", user_id="1")
        assert "Prefers tea" in _system(fake_llm.anthropic_requests()[-1])


async def test_a_shared_sessions_flush_writes_no_profile(home: Path, fake_llm: FakeLLM) -> None:
    async with gateway(home, fake_llm, "memory:\n  flush_min_messages: 0\n") as (gw, adapters):
        assert gw.lifecycle is not None
        await gw.lifecycle.start()
        tg = adapters["telegram"]
        await _say(
            gw,
            tg,
            "we meet on Fridays",
            chat_type="group",
            chat_id="-100",
            thread_id="5",
            user_id="1",
        )
        session = gw.store.active_session("telegram:group:-100:5")
        assert session is not None and personal_owner(session) is None
        fake_llm.script(
            ToolCall("memory", {"action": "add", "target": "user", "content": "Meets on Fridays"}),
            ToolCall("memory", {"action": "add", "target": "chat", "content": "Meets on Fridays"}),
            Reply("done"),
        )
        gw.sessions.end_session(session, "command")
        await gw.lifecycle.flusher.wait_idle()
        instruction = fake_llm.anthropic_requests()[1]["messages"][-1]["content"][0]["text"]
        assert 'target "user"' not in instruction and 'target "chat"' in instruction
        results = [
            b
            for m in fake_llm.anthropic_requests()[2]["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
        assert (
            results[0]["is_error"] is True and "no personal profile here" in results[0]["content"]
        )
        assert gw.memory.chat("telegram:-100").entries() == ("Meets on Fridays",)
        assert not (home / "memories" / "people").exists()
        await gw.lifecycle.stop(0)


# ------------------------------------------------------------------ linked identities
async def test_linked_identities_share_approval_profile_and_search(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with gateway(home, fake_llm) as (gw, adapters):
        tg, sl = adapters["telegram"], adapters["slack"]
        await _say(gw, tg, "my locker code story: it is 4711", chat_id="1", user_id="1")
        refused = await gw.sessions.submit(
            inbound("hi", platform="slack", chat_id="D1", user_id="U1", chat_type="group")
        )
        assert refused.outcome.value == "ignored"  # a stranger on Slack
        one = gw.people.resolve("telegram", "1", now=utcnow())
        gw.memory.profile(one.id).add("Has a locker")
        gw.memory.profile(gw.people.resolve("slack", "U1", now=utcnow()).id).add("Works nights")
        merged = gw.people.link(
            one, gw.people.resolve("slack", "U1", now=utcnow()), gw.memory, by="test"
        )
        assert merged.ids == {"telegram:1", "slack:U1"}
        assert gw.memory.profile(merged.id).entries() == ("Has a locker", "Works nights")
        fake_llm.script(ToolCall("session_search", {"query": "locker"}), Reply("found it"))
        # now let in by the link
        await _say(gw, sl, "what was my locker code?", chat_id="D1", user_id="U1")
        first = fake_llm.anthropic_requests()[-2]
        assert "Has a locker" in _system(first) and "Works nights" in _system(first)
        results = json.dumps(fake_llm.anthropic_requests()[-1]["messages"][-1])
        assert "4711" in results  # the Telegram DM is in the Slack identity's search scope
        fresh = gw.people.unlink("slack:U1", now=utcnow())
        assert fresh.id != merged.id and gw.memory.profile(fresh.id).entries() == ()


async def test_link_by_a_non_admin_cannot_let_a_stranger_in(home: Path, fake_llm: FakeLLM) -> None:
    async with gateway(home, fake_llm) as (gw, adapters):
        tg, sl = adapters["telegram"], adapters["slack"]
        await _say(gw, tg, "/link", chat_id="2", user_id="2")
        code = re.findall(r"/link ([A-Z0-9]{8})", tg.texts("2")[-1])[0]
        await _say(gw, sl, f"/link {code}", chat_id="D9", user_id="U9")
        assert sl.texts()[-1].startswith("This account is not allowed here yet")
        assert gw.people.find("slack:U9") is None or len(gw.people.find("slack:U9").identities) == 1  # type: ignore[union-attr]
        # A wrong code from an allowed account is refused, and the code is single-use per request.
        await _say(gw, tg, "/link ABCDEFGH", chat_id="1", user_id="1")
        assert tg.texts("1")[-1].startswith("No link request has that code")
        # A right code first says what linking shares and with whom; only `/link CODE yes` links.
        await _say(gw, tg, f"/link {code} yes", chat_id="1", user_id="1")  # not told yet: told now
        assert tg.texts("1")[-1].startswith(
            "This would make this account and telegram:2 one person to me"
        )
        assert len(gw.people.resolve("telegram", "1", now=utcnow()).identities) == 1
        await _say(gw, tg, f"/link {code} yes", chat_id="1", user_id="1")
        assert (
            tg.texts("1")[-1] == "Linked: this account and telegram:2 are one "
            "person to me now (one profile, one memory)."
        )
        # A code typed in a group is void at once: another member could send it first.
        await _say(gw, tg, "/link", chat_id="2", user_id="2")
        code = re.findall(r"/link ([A-Z0-9]{8})", tg.texts("2")[-1])[0]
        await _say(gw, tg, f"/link {code}", chat_id="-100", user_id="1", chat_type="group")
        assert tg.texts("-100")[-1].startswith("Link codes work only in a direct message to me")
        await _say(gw, sl, f"/link {code}", chat_id="D1", user_id="U1")
        assert sl.texts()[-1].startswith("No link request has that code")
        stored = [r[0] for r in gw.store.all("SELECT text FROM inbound WHERE text LIKE '/link%'")]
        assert stored and all(t == "/link [code]" for t in stored)  # codes never stored in clear


# ------------------------------------------------------------------ the old global USER.md
@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ("access:\n  admins: ['discord:9']\n", "the profile of person 1"),
        ("", "the shared notes (MEMORY.md)"),
    ],
)
async def test_the_global_user_md_moves_once(
    home: Path, fake_llm: FakeLLM, extra: str, where: str
) -> None:
    (home / "memories").mkdir()
    (home / "memories" / "USER.md").write_text("Name: Dana\n§\nLikes tea\n", encoding="utf-8")
    async with gateway(home, fake_llm, extra) as (gw, _):
        assert not (home / "memories" / "USER.md").exists()
        assert (
            (home / "memories" / "USER.md.migrated")
            .read_text(encoding="utf-8")
            .startswith("Name: Dana")
        )
        if "admins" in extra:
            admin = gw.people.find("discord:9")
            assert admin is not None and gw.memory.profile(admin.id).entries() == (
                "Name: Dana",
                "Likes tea",
            )
        else:
            assert gw.memory.shared().entries() == ("Name: Dana", "Likes tea")
    checks = await Doctor(home, {}).run()
    [memory] = [c for c in checks if c.name == "memory"]
    assert (
        f"memories/USER.md (one profile for everyone, from an earlier version) became {where}"
        in memory.detail
    )
    async with gateway(home, fake_llm, extra) as (gw, _):  # a second start moves nothing again
        assert gw.store.one("SELECT COUNT(*) FROM people_notes")[0] == 1  # type: ignore[index]
