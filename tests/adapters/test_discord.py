"""The Discord adapter end to end: real discord.py (REST + gateway websocket) against the fake
Discord, the whole gateway behind it and the fake LLM as the model; assertions are what a Discord
user would see."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.discord.adapter import (
    ASK_DESCRIPTION,
    COMMANDS,
    INTENT_HINT,
    TOKEN_HINT,
    Addressing,
    DiscordAdapter,
    addressing,
    thread_name,
)
from gateway.config.settings import load_config
from gateway.errors import AdapterFatal
from gateway.events import AdapterHealth, Inbound, SubmitResult
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway, platform_adapters
from tests.fakes.discord import (
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    OTHER_USER_ID,
    TOKEN,
    USER_ID,
    FakeDiscord,
    discord_error,
    now_iso,
    patch_discord_urls,
    rate_limited,
)
from tests.fakes.llm import FakeLLM, Reply
from tests.helpers import RecordingAdapter, inbound, write_config

DM = "600000000000000001"  # a channel the fake does not know: it becomes Alice's DM channel
MENTION = f"<@{BOT_ID}>"


def discord_yaml(
    fake: FakeDiscord,
    extra: str = "",
    token: str = TOKEN,
    users: tuple[str, ...] = (USER_ID, OTHER_USER_ID),
) -> str:
    return (
        f"web:\n  enabled: false\n"
        f"discord:\n  token: '{token}'\n  api_base: "
        f"{fake.base_url}/api/v10\n  gateway_url: {fake.ws_url}\n"
        f"  allowed_users: {list(users)}\n{extra}"
    )


async def _no_wait(seconds: float) -> None:
    # restart and retry delays pass at once; the order of events is unchanged
    await asyncio.sleep(0)


@dataclass
class Running:
    daemon: Daemon
    adapter: DiscordAdapter

    @property
    def gw(self) -> Gateway:
        return self.daemon.gw

    @property
    def health(self) -> AdapterHealth:
        assert self.gw.supervisor is not None
        return self.gw.supervisor.health()["discord"]

    def inbound_texts(self) -> list[str]:
        return [r["text"] for r in self.gw.store.all("SELECT text FROM inbound ORDER BY id")]

    def session_keys(self) -> set[str]:
        return {r["key"] for r in self.gw.store.all("SELECT key FROM sessions")}


@asynccontextmanager
async def running(
    home: Path,
    llm: FakeLLM,
    fake: FakeDiscord,
    extra: str = "",
    *,
    token: str = TOKEN,
    users: tuple[str, ...] = (USER_ID, OTHER_USER_ID),
    others: tuple[Any, ...] = (),
) -> AsyncIterator[Running]:
    write_config(
        home,
        provider="anthropic",
        base_url=llm.base_url,
        extra=discord_yaml(fake, extra, token, users),
    )
    config = load_config(home, env={})
    assert config.discord is not None
    adapter = DiscordAdapter(config.discord, guild_ready_timeout=0.1)
    gateway = build_gateway(
        config, env={}, adapters=[adapter, *others], probe_ollama=False, sleep=_no_wait
    )
    daemon = Daemon(gateway, install_signals=False)
    await daemon.start()
    try:
        yield Running(daemon, adapter)
    finally:
        await daemon.stop()


async def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    async def loop() -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(loop(), timeout)


def ref_id(message: Any) -> str | None:
    """discord.py sends ids as JSON ints."""
    ref = message.message_reference
    return str(ref["message_id"]) if ref else None


async def add_thread(
    fake: FakeDiscord, thread_id: str, name: str, owner: str = USER_ID, *, dispatch: bool = True
) -> None:
    """A thread a user opened in #general (THREAD_CREATE, as Discord sends it)."""
    stamp = now_iso()
    thread = {
        "id": thread_id,
        "guild_id": GUILD_ID,
        "parent_id": CHANNEL_ID,
        "owner_id": owner,
        "name": name,
        "type": 11,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "message_count": 0,
        "member_count": 1,
        "total_message_sent": 0,
        "flags": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": stamp,
            "locked": False,
            "create_timestamp": stamp,
        },
    }
    fake.channels[thread_id] = thread
    if dispatch:
        await fake.dispatch("THREAD_CREATE", {**thread, "newly_created": True})


# ---------------------------------------------------------------------------------------------- DMs
async def test_dm_round_trip_through_the_gateway(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        first = await fake_discord.push_message(DM, "hello **there**")
        reply = await fake_discord.wait_for_sent(DM)
        # Discord markdown goes through as is
        assert reply.content == "echo: hello **there** [users=1]"
        assert ref_id(reply) == first and reply.message_reference["fail_if_not_exists"] is False  # type: ignore[index]
        await run.gw.sessions.wait_idle()
        await fake_discord.push_message(DM, "again")
        assert (await fake_discord.wait_for_sent(DM, count=2)).content == "echo: again [users=2]"
        # "is typing…" while the turn ran
        assert fake_discord.calls_to(f"POST /channels/{DM}/typing")
        assert run.adapter.typing_active == 0
        rows = run.gw.store.all(
            "SELECT user_id, user_name, chat_type, chat_id, status FROM inbound ORDER BY id"
        )
        assert [tuple(r) for r in rows] == [(USER_ID, "Alice", "dm", DM, "answered")] * 2
        assert run.session_keys() == {f"discord:dm:{DM}"}
        assert len(fake_llm.anthropic_requests()) == 2  # our own echoed replies never became turns


async def test_stranger_in_a_dm_gets_a_pairing_code(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(
            "600000000000000009", "hi", author_id="400000000000000077", author_name="mallory"
        )
        notice = await fake_discord.wait_for_sent("600000000000000009")
        assert "pairing code" in notice.content and fake_llm.anthropic_requests() == []
        assert run.inbound_texts() == []


# ------------------------------------------------------------------------------------------- guilds
async def test_guild_mention_gating_and_reply_reference(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(CHANNEL_ID, "just chatting among humans")
        mid = await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION}, what's up?", mentions=[BOT_ID]
        )
        reply = await fake_discord.wait_for_sent(CHANNEL_ID)
        # events are handled in order, so the unmentioned one was already dropped: one turn, one
        # stored row
        assert run.inbound_texts() == ["what's up?"]
        assert reply.content == "echo: [Alice] what's up? [users=1]"
        assert ref_id(reply) == mid
        await run.gw.sessions.wait_idle()
        # a reply to the bot counts as a mention
        await fake_discord.push_message(CHANNEL_ID, "tell me more", referenced_message=reply.id)
        second = await fake_discord.wait_for_sent(CHANNEL_ID, count=2)
        assert second.content == "echo: [Alice] tell me more [users=2]"
        last = json.loads(
            run.gw.store.all("SELECT payload FROM inbound ORDER BY id DESC")[0]["payload"]
        )
        assert (last["chat"]["chat_type"], last["chat"]["chat_id"], last["reply_to_id"]) == (
            "group",
            CHANNEL_ID,
            reply.id,
        )
        # sessions.group_per_user
        assert run.session_keys() == {f"discord:group:{CHANNEL_ID}:{USER_ID}"}


async def test_mentions_are_readable_and_never_ping_everyone(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(
            CHANNEL_ID,
            f"hey {MENTION} say hi to <@{OTHER_USER_ID}> and @everyone",
            mentions=[BOT_ID, OTHER_USER_ID],
        )
        reply = await fake_discord.wait_for_sent(CHANNEL_ID)
        assert run.inbound_texts() == ["hey say hi to @bob and @everyone"]
        assert "@everyone" in reply.content
        # model output may ping only the person it answers:
        # no @everyone/@here, no roles, no quote ping
        assert reply.allowed_mentions == {"parse": [], "users": [int(USER_ID)]}
        assert reply.body["message_reference"]["message_id"]


async def test_other_bots_are_ignored_unless_answer_bots(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(
            CHANNEL_ID,
            f"{MENTION} beep",
            author_id="700000000000000001",
            author_bot=True,
            mentions=[BOT_ID],
        )
        await fake_discord.push_message(CHANNEL_ID, f"{MENTION} hi", mentions=[BOT_ID])
        await fake_discord.wait_for_sent(CHANNEL_ID)
        assert run.inbound_texts() == ["hi"]


async def test_answer_bots_marks_bot_authors(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(
        home, fake_llm, fake_discord, "  answer_bots: true\n", users=(USER_ID, "700000000000000001")
    ) as run:
        await fake_discord.push_message(
            CHANNEL_ID,
            f"{MENTION} beep",
            author_id="700000000000000001",
            author_bot=True,
            author_name="otherbot",
            mentions=[BOT_ID],
        )
        await fake_discord.wait_for_sent(CHANNEL_ID)
        payload = json.loads(run.gw.store.all("SELECT payload FROM inbound")[0]["payload"])
        assert payload["is_bot"] is True and payload["username"] == "otherbot"


async def test_without_require_mention_every_message_is_answered(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord, "  require_mention: false\n"):
        await fake_discord.push_message(CHANNEL_ID, "anyone there?")
        assert (
            await fake_discord.wait_for_sent(CHANNEL_ID)
        ).content == "echo: [Alice] anyone there? [users=1]"


# ------------------------------------------------------------------------------------------ threads
async def test_threads_are_separate_sessions(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    thread_a, thread_b = "310000000000000001", "310000000000000002"
    async with running(home, fake_llm, fake_discord) as run:
        await add_thread(fake_discord, thread_a, "plans")
        await add_thread(fake_discord, thread_b, "jokes")
        for channel, text in (
            (thread_a, "one"),
            (thread_b, "two"),
            (CHANNEL_ID, "three"),
            (thread_a, "four"),
        ):
            await fake_discord.push_message(channel, f"{MENTION} {text}", mentions=[BOT_ID])
        await wait_for(lambda: len(fake_discord.sent) == 4)
        seen = {(m.channel_id, m.content) for m in fake_discord.sent_messages()}
        assert seen == {
            (thread_a, "echo: [Alice] one [users=1]"),
            (thread_b, "echo: [Alice] two [users=1]"),
            (CHANNEL_ID, "echo: [Alice] three [users=1]"),
            (thread_a, "echo: [Alice] four [users=2]"),
        }
        # threads are shared by their members; the channel
        # itself is per user (sessions.group_per_user)
        assert run.session_keys() == {
            f"discord:group:{CHANNEL_ID}:{thread_a}",
            f"discord:group:{CHANNEL_ID}:{thread_b}",
            f"discord:group:{CHANNEL_ID}:{USER_ID}",
        }
        rows = run.gw.store.all("SELECT chat_id, thread_id FROM inbound ORDER BY id")
        # the parent channel is the chat; the thread is the thread
        assert tuple(rows[0]) == (CHANNEL_ID, thread_a)


async def test_a_thread_missing_from_the_cache_is_looked_up(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    thread = "310000000000000003"
    async with running(home, fake_llm, fake_discord) as run:
        # opened before the bot connected
        await add_thread(fake_discord, thread, "old", dispatch=False)
        await fake_discord.push_message(thread, f"{MENTION} still there?", mentions=[BOT_ID])
        reply = await fake_discord.wait_for_sent(thread)
        assert reply.content == "echo: [Alice] still there? [users=1]"
        assert len(fake_discord.calls_to(f"GET /channels/{thread}")) == 1
        assert run.session_keys() == {f"discord:group:{CHANNEL_ID}:{thread}"}


async def test_thread_replies_auto_opens_a_thread_and_continues_there(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord, "  thread_replies: auto\n") as run:
        mid = await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION} plan my week please", mentions=[BOT_ID]
        )
        created = await fake_discord.wait_for_call(
            f"POST /channels/{CHANNEL_ID}/messages/{mid}/threads"
        )
        assert created.body["name"] == "plan my week please"
        # a thread started from a message has the message's id
        reply = await fake_discord.wait_for_sent(mid)
        assert reply.content == "echo: [Alice] plan my week please [users=1]"
        assert reply.message_reference is None  # the thread already shows the message it grew from
        assert fake_discord.sent_messages(CHANNEL_ID) == []
        await run.gw.sessions.wait_idle()
        # inside the bot's own thread no mention is needed; the conversation goes on in one session
        await fake_discord.push_message(mid, "and next week?", author_id=OTHER_USER_ID)
        second = await fake_discord.wait_for_sent(mid, count=2)
        assert second.content == "echo: [bob] and next week? [users=2]"
        assert run.session_keys() == {f"discord:group:{CHANNEL_ID}:{mid}"}


async def test_thread_replies_auto_opens_nothing_for_a_stranger(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord, "  thread_replies: auto\n") as run:
        await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION} spam", author_id="400000000000000077", mentions=[BOT_ID]
        )
        await fake_discord.push_message(CHANNEL_ID, f"{MENTION} hello", mentions=[BOT_ID])
        await fake_discord.wait_until(lambda: bool(fake_discord.sent))
        created = fake_discord.calls_to(lambda c: c.path.endswith("/threads"))
        assert len(created) == 1 and created[0].body["name"] == "hello"
        assert run.inbound_texts() == ["hello"]


async def test_thread_replies_auto_answers_in_the_channel_when_threads_are_refused(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    fake_discord.fail(
        "POST /channels/{cid}/messages/{mid}/threads",
        discord_error(403, "Missing Permissions", 50013),
    )
    async with running(home, fake_llm, fake_discord, "  thread_replies: auto\n"):
        mid = await fake_discord.push_message(CHANNEL_ID, f"{MENTION} hello", mentions=[BOT_ID])
        reply = await fake_discord.wait_for_sent(CHANNEL_ID)
        assert reply.content == "echo: [Alice] hello [users=1]" and ref_id(reply) == mid


# ---------------------------------------------------------------------------------------- outbound
async def test_long_reply_is_two_messages_with_the_fence_reopened(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    code = "\n".join(f"print('line {i:03d} of a long listing')" for i in range(70))
    answer = f"Here you go:\n\n```python\n{code}\n```\n\nThat's all."
    assert 2400 < len(answer) < 2700
    fake_llm.script(Reply(answer))
    async with running(home, fake_llm, fake_discord):
        mid = await fake_discord.push_message(
            CHANNEL_ID, f"{MENTION} code please", mentions=[BOT_ID]
        )
        await fake_discord.wait_for_sent(CHANNEL_ID, count=2)
        first, second = fake_discord.sent_messages(CHANNEL_ID)
        assert all(0 < len(m.content) <= 2000 for m in (first, second))
        assert first.content.startswith("Here you go:") and first.content.rstrip().endswith("```")
        assert second.content.startswith("```python\n") and second.content.endswith("That's all.")
        # each one valid on its own
        assert first.content.count("```") == 2 and second.content.count("```") == 2
        lines = [
            ln for m in (first, second) for ln in m.content.splitlines() if ln.startswith("print(")
        ]
        assert lines == code.splitlines()
        # only the first chunk quotes
        assert ref_id(first) == mid and second.message_reference is None


async def test_missing_permissions_fail_the_reply_without_retries(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    fake_discord.fail(
        "POST /channels/{cid}/messages", discord_error(403, "Missing Permissions", 50013)
    )
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(CHANNEL_ID, f"{MENTION} hi", mentions=[BOT_ID])
        await fake_discord.wait_for_call(f"POST /channels/{CHANNEL_ID}/messages")
        await wait_for(
            lambda: run.gw.store.all("SELECT status FROM outbound")[0]["status"] == "failed"
        )
        row = run.gw.store.all("SELECT last_error FROM outbound")[0]
        assert "50013" in row["last_error"]
        assert len(fake_discord.calls_to(f"POST /channels/{CHANNEL_ID}/messages")) == 1


async def test_a_rate_limit_is_waited_out_by_discord_py(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    fake_discord.fail("POST /channels/{cid}/messages", rate_limited(0.05))
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(CHANNEL_ID, f"{MENTION} hi", mentions=[BOT_ID])
        assert (
            await fake_discord.wait_for_sent(CHANNEL_ID)
        ).content == "echo: [Alice] hi [users=1]"
        assert len(fake_discord.calls_to(f"POST /channels/{CHANNEL_ID}/messages")) == 2
        await run.gw.sessions.wait_idle()
        statuses = [r["status"] for r in run.gw.store.all("SELECT status FROM outbound")]
        assert statuses == ["sent"]


async def test_server_error_is_retried(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    fake_discord.fail("POST /channels/{cid}/messages", discord_error(503, "Service Unavailable"))
    async with running(home, fake_llm, fake_discord):
        await fake_discord.push_message(CHANNEL_ID, f"{MENTION} hi", mentions=[BOT_ID])
        assert (
            await fake_discord.wait_for_sent(CHANNEL_ID)
        ).content == "echo: [Alice] hi [users=1]"
        assert len(fake_discord.calls_to(f"POST /channels/{CHANNEL_ID}/messages")) == 2


# ------------------------------------------------------------------------------------- reconnects
async def test_replayed_message_create_is_answered_once(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        before = fake_discord.seq
        await fake_discord.push_message(CHANNEL_ID, f"{MENTION} once", mentions=[BOT_ID])
        await fake_discord.wait_for_sent(CHANNEL_ID)
        await run.gw.sessions.wait_idle()
        # the RESUME replays the message and our echoed reply
        fake_discord.resume_replay_from = before
        await fake_discord.force_reconnect()
        await fake_discord.push_message(CHANNEL_ID, f"{MENTION} twice", mentions=[BOT_ID])
        await fake_discord.wait_for_sent(CHANNEL_ID, count=2)
        await run.gw.sessions.wait_idle()
        assert [m.content for m in fake_discord.sent_messages(CHANNEL_ID)] == [
            "echo: [Alice] once [users=1]",
            "echo: [Alice] twice [users=2]",
        ]
        assert run.inbound_texts() == ["once", "twice"] and len(fake_llm.anthropic_requests()) == 2
        assert fake_discord.identify_count == 1 and fake_discord.resume_count == 1


async def test_disallowed_intents_stay_down_with_one_clear_line(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    fake_discord.enabled_privileged_intents = 0  # MESSAGE CONTENT INTENT switched off in the portal
    other = RecordingAdapter("cli")
    async with running(home, fake_llm, fake_discord, others=(other,)) as run:
        assert run.health.state == "down" and run.health.last_error == f"discord: {INTENT_HINT}"
        # the other adapter is unaffected
        await other.submit(inbound("still here?"))
        await other.wait_for(1)
        assert other.texts() == ["echo: still here? [users=1]"]
        lines = [
            r.getMessage() for r in caplog.records if "MESSAGE CONTENT INTENT" in r.getMessage()
        ]
        assert len(lines) == 1 and "developer portal → Bot" in lines[0]
        # no reconnect loop
        assert fake_discord.identify_count == 1 and fake_discord.connections == 1
        assert run.adapter._client is not None and run.adapter._client.is_closed()


async def test_intents_revoked_while_running_stays_down(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        assert run.health.state == "running"
        await fake_discord.close_with(4014, "Disallowed intent(s).")
        await wait_for(lambda: run.health.state == "down")
        lines = [
            r.getMessage() for r in caplog.records if "MESSAGE CONTENT INTENT" in r.getMessage()
        ]
        assert len(lines) == 1
        assert fake_discord.identify_count == 1 and fake_discord.connections == 1


async def test_bad_token_is_a_clear_fatal_error(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(home, fake_llm, fake_discord, token="not-the-token") as run:
        assert run.health.state == "down"
        assert run.health.last_error == "discord: token rejected (401) — check DISCORD_BOT_TOKEN"
        assert fake_discord.connections == 0 and run.health.restarts == 0
    assert sum(TOKEN_HINT in r.getMessage() for r in caplog.records) == 1


async def test_start_raises_adapter_fatal_for_a_bad_token(
    home: Path, fake_discord: FakeDiscord
) -> None:
    write_config(home, extra=discord_yaml(fake_discord, token="not-the-token"))
    config = load_config(home, env={})
    assert config.discord is not None
    adapter = DiscordAdapter(config.discord, guild_ready_timeout=0.1)

    async def submit(_: Any) -> Any:
        raise AssertionError("nothing is submitted")

    with pytest.raises(AdapterFatal, match="check DISCORD_BOT_TOKEN"):
        await adapter.start(submit)
    await adapter.stop()


# ----------------------------------------------------------------------------------- slash commands
async def test_slash_commands_are_synced_globally(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord):
        names = [c["name"] for c in fake_discord.global_commands]
        assert names == [name for name, _ in COMMANDS] + ["ask", "jobs"]
        body = fake_discord.calls_to("PUT /applications/{app}/commands")[0].body
        by_name = {c["name"]: c for c in body}
        assert by_name["status"]["description"] == "Show the session, model and token usage"
        assert by_name["ask"]["description"] == ASK_DESCRIPTION
        assert by_name["ask"]["options"] == [
            {"type": 3, "name": "prompt", "description": "What to ask", "required": True}
        ]
        assert fake_discord.guild_commands == {}


async def test_slash_commands_per_guild(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    extra = f"  command_sync: guilds\n  allowed_guilds: ['{GUILD_ID}']\n"
    async with running(home, fake_llm, fake_discord, extra):
        assert [c["name"] for c in fake_discord.guild_commands[GUILD_ID]][-2:] == ["ask", "jobs"]
        assert fake_discord.global_commands == []
    fake_discord.calls.clear()
    async with running(home, fake_llm, fake_discord, "  command_sync: 'off'\n"):
        assert not fake_discord.calls_to(lambda c: "/commands" in c.path)


async def test_status_is_answered_ephemerally_and_ask_submits_a_prompt(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_interaction("status")
        status = await fake_discord.wait_for_sent(CHANNEL_ID)
        await wait_for(lambda: bool(fake_discord.sent_messages(CHANNEL_ID)[0].edits))
        status = fake_discord.sent_messages(CHANNEL_ID)[0]
        assert fake_discord.interaction_responses[0]["type"] == 5  # "thinking…" at once
        # only the asker sees it
        assert fake_discord.interaction_responses[0]["data"]["flags"] == 64
        assert status.via == "interaction" and status.content.startswith(
            "No conversation yet in this chat"
        )

        await fake_discord.push_interaction(
            "ask", options=[{"name": "prompt", "type": 3, "value": "why?"}]
        )
        await wait_for(lambda: len(fake_discord.sent) == 2 and bool(fake_discord.sent[1].edits))
        answer = fake_discord.sent[1]
        # everyone sees the answer
        assert fake_discord.interaction_responses[1]["data"].get("flags", 0) == 0
        assert answer.content == "echo: [Alice] why? [users=1]" and answer.via == "interaction"
        assert run.inbound_texts() == ["/status", "why?"]
        # sessions.group_per_user
        assert run.session_keys() == {f"discord:group:{CHANNEL_ID}:{USER_ID}"}


async def test_slash_command_in_a_dm_and_a_long_answer_follows_up(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_message(DM, "hi")  # Alice's DM channel exists
        await fake_discord.wait_for_sent(DM)
        await run.gw.sessions.wait_idle()
        fake_llm.script(Reply("word " * 600))
        await fake_discord.push_interaction(
            "ask", options=[{"name": "prompt", "type": 3, "value": "talk"}], channel_id=DM
        )
        await wait_for(lambda: len(fake_discord.sent_messages(DM)) == 3)
        original, follow_up = fake_discord.sent_messages(DM)[1:]
        assert (original.via, follow_up.via) == ("interaction", "webhook")
        assert len(original.content) <= 2000 and original.edits == ("",)
        assert " ".join((original.content + " " + follow_up.content).split()) == " ".join(
            ["word"] * 600
        )
        assert f"discord:dm:{DM}" in run.session_keys()


async def test_slash_command_from_a_stranger_in_a_guild(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        await fake_discord.push_interaction(
            "ask",
            options=[{"name": "prompt", "type": 3, "value": "hi"}],
            user_id="400000000000000077",
        )
        await wait_for(lambda: bool(fake_discord.sent) and bool(fake_discord.sent[0].edits))
        assert fake_discord.sent[0].content == "Sorry, I can't answer you here."
        assert run.inbound_texts() == [] and fake_llm.anthropic_requests() == []


# ---------------------------------------------------------------------------------------- wiring
def test_platform_adapters_builds_the_discord_adapter(home: Path) -> None:
    write_config(home, extra="discord:\n  token: x\n  max_lines: 30\n")
    config = load_config(home, env={})
    assert [type(a).__name__ for a in platform_adapters(config)] == [
        "WebChatAdapter",
        "DiscordAdapter",
    ]
    gw = build_gateway(config, env={}, probe_ollama=False)
    try:
        assert gw.facts["discord"].max_lines == 30 and gw.facts["discord"].max_length == 2000
    finally:
        gw.store.close()


# ------------------------------------------------------------------------------------ pure helpers
def said(text: str) -> Addressing:
    return addressing(
        text,
        int(BOT_ID),
        users={42: "Carol"},
        roles={7: "mods", 8: "Gateway"},
        bot_roles={8},
        channels={9: "general"},
    )


def test_addressing_strips_our_mention_and_names_the_rest() -> None:
    assert said(f"<@{BOT_ID}>, what's up?") == Addressing("what's up?", mentioned=True)
    assert said(f"hey <@!{BOT_ID}> ask <@42> in <#9> and <@&7>") == Addressing(
        "hey ask @Carol in #general and @mods", mentioned=True
    )
    # our managed bot role counts too
    assert said("<@&8> hello") == Addressing("hello", mentioned=True)
    # unknown ids stay as they are; no mention of us
    assert said("<@43> hello") == Addressing("<@43> hello")
    assert said(f"two lines\n<@{BOT_ID}>\nthird") == Addressing("two lines\nthird", mentioned=True)


def test_thread_name() -> None:
    assert thread_name("  plan\nmy   week ", "Alice") == "plan my week"
    assert thread_name("", "Alice") == "Chat with Alice"
    long = thread_name("x" * 200, "Alice")
    assert len(long) == 80 and long.endswith("…")


# ------------------------------------------------------------------------------ Discord's deadlines
async def test_an_interaction_is_acknowledged_within_3_s_even_when_storing_takes_longer(
    home: Path, fake_llm: FakeLLM
) -> None:
    now = [0.0]
    fake = FakeDiscord(clock=lambda: now[0])
    await fake.start()
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra=discord_yaml(fake))
    config = load_config(home, env={})
    assert config.discord is not None
    adapter = DiscordAdapter(config.discord, guild_ready_timeout=0.1)
    gateway = build_gateway(config, env={}, adapters=[adapter], probe_ollama=False, sleep=_no_wait)
    store = gateway.sessions.submit

    async def slow_store(message: Inbound) -> SubmitResult:
        now[0] += 5.0  # Discord's clock moves on while the message is stored
        return await store(message)

    gateway.sessions.submit = slow_store  # type: ignore[method-assign,assignment]
    daemon = Daemon(gateway, install_signals=False)
    try:
        with patch_discord_urls(fake):
            await daemon.start()
            await fake.push_interaction(
                "ask", options=[{"name": "prompt", "type": 3, "value": "slow?"}]
            )
            await wait_for(
                lambda: (
                    bool(fake.late_interactions) or (bool(fake.sent) and bool(fake.sent[0].edits))
                )
            )
            # "thinking…" went out before the store, within the 3 s
            assert fake.late_interactions == []
            assert fake.interaction_responses[0]["type"] == 5
            # the answer through the interaction
            assert fake.sent[0].content == "echo: [Alice] slow? [users=1]"
            await daemon.stop()
    finally:
        await fake.stop()


async def test_discord_py_waits_out_an_exhausted_bucket(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    async with running(home, fake_llm, fake_discord) as run:
        # 7 messages
        fake_llm.script(Reply("\n\n".join(f"part {i} " + "x" * 1500 for i in range(7))))
        await fake_discord.push_message(CHANNEL_ID, f"{MENTION} a long one please")
        await fake_discord.wait_for_sent(CHANNEL_ID, count=7, timeout=15)
        await run.gw.sessions.wait_idle()
    posts = fake_discord.calls_to(f"POST /channels/{CHANNEL_ID}/messages")
    assert len(posts) == 7 and fake_discord.bucket_violations == []
    # the 6th waited for the bucket to reset
    assert posts[5].at - posts[0].at >= fake_discord.bucket_window * 0.9
    assert [m.content.split()[:2] for m in fake_discord.sent_messages(CHANNEL_ID)] == [
        ["part", str(i)] for i in range(7)
    ]
