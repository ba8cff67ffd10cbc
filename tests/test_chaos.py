"""Chaos, CI's short version (bench/chaos.py is the long one): kill -9 at seeded moments, platform
faults on ~20 % of calls, and every way the model can fail; what a user sees must stay whole,
ordered and single."""

from __future__ import annotations

import asyncio
import collections
import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.events import OutboundKind, OutboundMessage
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import build_gateway, platform_adapters
from gateway.sessions.commands import NEW_TEXT, NOTHING_TO_STOP
from gateway.sessions.turn_text import ERROR_TEXT
from tests.chaos.crashpoints import Scenario, down, long_answer, run_with_crash
from tests.chaos.killrun import ChaosPlan, KillRun
from tests.chaos.models import HEADER, RespondingLLM, chunk_keys, numbered_reply, text_of
from tests.fakes.base import Call, ConnectionReset, Delay, Fault, Malformed
from tests.fakes.discord import TOKEN as DISCORD_TOKEN
from tests.fakes.discord import AfterCommit, FakeDiscord, discord_error, rate_limited
from tests.fakes.llm import CutStream, FakeLLM, Reply, ToolCall
from tests.fakes.slack import APP_TOKEN as SLACK_APP
from tests.fakes.slack import BOT_TOKEN as SLACK_BOT
from tests.fakes.slack import FakeSlack
from tests.fakes.slack import ratelimited as slack_ratelimited
from tests.fakes.telegram import TOKEN as TG_TOKEN
from tests.fakes.telegram import FakeTelegram, retry_after, server_error
from tests.helpers import (
    RecordingAdapter,
    away_from_daily_reset,
    gateway_for,
    inbound,
    write_config,
)

pytestmark = pytest.mark.chaos


@pytest.mark.heavy
async def test_kill_9_at_seeded_moments_loses_and_doubles_nothing(tmp_path: Path) -> None:
    # answer_timeout stays under pytest-timeout's 180 s,
    # so a stuck conversation fails with its own name
    run = KillRun(
        ChaosPlan(conversations=20, turns=4, kills=3, seed=12, answer_timeout=120.0),
        tmp_path / "home",
        log=print,
    )
    report = await run.run()
    print(report.render())
    assert report.counts["kills"] == 3
    assert not report.problems, report.render()
    # one kill landed while Discord held a chunk the
    # daemon had not recorded: its nonce kept it single
    assert (
        report.counts["Discord creates deduped by nonce"] >= 1
        and report.counts["Discord chunks posted twice"] == 0
    )
    # messages posted in known Discord chats between a kill and its restart reached nobody live:
    # each was answered once, after the restarted daemon's catch-up read it from the channel's
    # history (and counted it)
    dead = report.counts["Discord messages sent between kill+restart"]
    assert dead >= 1 and report.counts["  of them answered once, read by a catch-up"] == dead
    assert report.counts["Discord messages submitted by a catch-up first"] >= dead


# ------------------------------------------------------------------------------------- crash points
CRASH_SCENARIOS = [
    Scenario(
        "a long reply (3 Telegram, 5 Discord messages)",
        before=("hi",),
        text="tell me everything",
        answer=long_answer,
    ),
    Scenario("/new", before=("hi",), text="/new", answer=long_answer),
    Scenario("the model is down", before=(), text="hello", answer=down),
]


def crash_home(tmp_path: Path, name: str, platform: str) -> Path:
    home = tmp_path / name
    home.mkdir()
    write_config(
        home,
        extra=f"web:\n  enabled: false\n{platform}:\n  token: '123:abc'\n  allowed_users: ['42']\n",
    )
    return home


@pytest.mark.parametrize("platform", ["telegram", "discord"])
@pytest.mark.parametrize("scenario", CRASH_SCENARIOS, ids=lambda s: s.name)
async def test_a_crash_before_any_write_or_after_any_send_loses_and_doubles_nothing(
    tmp_path: Path, scenario: Scenario, platform: str
) -> None:
    """Telegram keeps at-least-once at the platform boundary (the chunk in flight at the death goes
    out again); Discord's nonce closes that window, so there every chunk arrives exactly once."""
    clean, baseline, _ = await run_with_crash(
        crash_home(tmp_path, "clean", platform), platform, scenario
    )
    answered_before = len(clean.sent) - baseline.sends
    expected = clean.texts()[answered_before:]
    assert expected and baseline.writes > 0
    failures = []
    points = [{"at_write": n} for n in range(1, baseline.writes + 1)]
    points += [{"after_send": n} for n in range(1, baseline.sends + 1)]
    for point in points:
        record, life, calls = await run_with_crash(
            crash_home(tmp_path, "-".join(map(str, *point.items())), platform),
            platform,
            scenario,
            **point,
        )
        got = record.texts()[answered_before:]
        # a chunk the platform took right before the death
        # (not yet marked sent) goes out again: at-least-once
        k = life.died_after_send if platform != "discord" else 0
        allowed = expected[:k] + expected[k - 1 :] if k else expected
        if got != allowed or "/new" in calls:
            failures.append(f"died at {point}: user saw {[t[:40] for t in got]}; model saw {calls}")
    print(
        f"{platform}, {scenario.name}: {baseline.writes} write points, {baseline.sends} send points"
    )
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------- platform faults
def seeded_faults(rng: random.Random, count: int, rate: float, menu: Sequence[Any]) -> list[Any]:
    """One step per request to come: None (answer normally) or, with probability `rate`, a fault
    from `menu`."""
    return [rng.choice(menu) if rng.random() < rate else None for _ in range(count)]


class VirtualClock:
    """The gateway's waits (pacing, retry_after, backoff) pass at once; the fakes stamp requests
    with it too."""

    SHORT = 10.0  # longer waits (the 30 s retry round) never finish inside a test

    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        if seconds > self.SHORT:
            await asyncio.Event().wait()
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)


def fault_reply(body: dict[str, Any]) -> Any:
    last: dict[str, Any] = next(
        (m for m in reversed(body.get("messages") or []) if m.get("role") == "user"), {}
    )
    found = re.search(r"\b(\w+-\d+-\d+)\b", text_of(last))
    tag = found.group(1) if found else "?"
    users = sum(1 for m in body.get("messages") or [] if m.get("role") == "user")
    return Reply(numbered_reply(tag, users, 90 if tag.endswith(("-1", "-4")) else 0))


def check_chat(name: str, texts: Sequence[str], tags: Sequence[str]) -> list[str]:
    """Every message answered once, whole, in the order asked; notices (busy) may sit in between."""
    problems = []
    keys = [k for t in texts for k in chunk_keys(t)]
    counts = collections.Counter(keys)
    doubled = sorted(k for k, n in counts.items() if n > 1)
    if doubled:
        problems.append(f"{name}: doubled {doubled[:5]}")
    expected = [
        (tag, line)
        for tag in tags
        for line in [-1, *range(90 if tag.endswith(("-1", "-4")) else 0)]
    ]
    firsts = list(dict.fromkeys(keys))
    if firsts != expected:
        missing = sorted(set(expected) - set(firsts))
        problems.append(f"{name}: missing {missing[:5]}" if missing else f"{name}: out of order")
    return problems


def flood_waits_entered(
    tg: FakeTelegram, steps: Mapping[str, Sequence[Any]]
) -> list[tuple[Call, str]]:
    """Each request the fake refused inside a served retry_after, with the method whose 429 started
    that wait.

    A 429 on sendChatAction (the typing indicator) starts a wait for the whole chat too: the adapter
    holds the chat's sends until it is over, so a request inside any wait is a problem, whichever
    method started it."""
    refused = {id(c) for c in tg.flood_violations}
    taken: collections.Counter[str] = collections.Counter()
    last_429: dict[str, str] = {}  # chat → the method that got its latest 429
    entered = []
    for call in tg.calls:  # in arrival order, which is the order the fake consumed its fault steps
        chat = str(call.body.get("chat_id"))
        if id(call) in refused:
            entered.append((call, last_429.get(chat, "?")))
            continue
        queue = steps.get(call.name, ())
        step = queue[taken[call.name]] if taken[call.name] < len(queue) else None
        taken[call.name] += 1
        if isinstance(step, Fault) and step.status == 429:
            last_429[chat] = call.name
    return entered


def discord_steps_served(
    dc: FakeDiscord, creates: Sequence[Call], steps: Sequence[Any]
) -> list[Any]:
    """The fault steps the creates were really served, in order. A create the fake refused with a
    429 before taking a step (Remaining was 0 by its count, or a served retry_after had not run out)
    consumed none: discord.py retries a 5xx or 429 inside one bucket slot, so the fake counts
    requests discord.py does not, and now and then refuses one. Counting every create as a step
    would call an AfterCommit lost that no request was ever served."""
    refused = {id(c) for c in (*dc.bucket_violations, *dc.retry_after_violations)}
    served = sum(1 for c in creates if id(c) not in refused)
    return list(steps[:served])


def discord_menu() -> list[Any]:
    """Discord's weather: 429s with its real body (a float `retry_after`, `global`) and
    X-RateLimit-* headers, which discord.py waits out itself; 500/502, which it retries itself with
    the same nonce; resets and lost answers (posted, then the connection dropped or a 502 came
    back), which reach our outbox; slow answers."""
    return [
        rate_limited(0.3),
        rate_limited(0.2, global_=True),
        discord_error(500, "Internal Server Error"),
        Fault(502),
        ConnectionReset(),
        Delay(0.2),
        AfterCommit(ConnectionReset()),
        AfterCommit(Fault(502)),
    ]


async def test_platform_faults_on_a_fifth_of_calls_still_deliver_everything_in_order(
    home: Path, fake_llm: FakeLLM
) -> None:
    rng = random.Random(20)
    clock = VirtualClock()
    llm = RespondingLLM(fault_reply)
    users = {
        f"U{i}": {
            "id": f"U{i}",
            "name": f"user{i}",
            "real_name": f"User {i}",
            "profile": {"display_name": f"User{i}", "real_name": f"User {i}"},
        }
        for i in range(1, 5)
    }
    # discord.py sleeps for real (429 retry_after, 5xx retries): its fake keeps real time
    async with (
        llm,
        FakeTelegram(clock=clock.monotonic) as tg,
        FakeSlack(users=users, clock=clock.monotonic) as sl,
        FakeDiscord(guilds=[]) as dc,
    ):
        tg_chats, slack_chats, turns = (
            [7001 + i for i in range(6)],
            [f"D{i}" for i in range(1, 5)],
            5,
        )
        # DM → user
        dc_chats = {str(710000000000000001 + i): str(810000000000000001 + i) for i in range(3)}
        write_config(
            home,
            provider="anthropic",
            base_url=llm.base_url,
            extra=(
                f"web:\n  enabled: false\n"
                f"telegram:\n  token: '{TG_TOKEN}'\n  api_server: "
                f"{tg.base_url}\n  polling_timeout: 1\n"
                f"  allowed_users: {[str(c) for c in tg_chats]}\n"
                f"slack:\n  bot_token: '{SLACK_BOT}'\n  app_token: "
                f"'{SLACK_APP}'\n  api_url: {sl.api_base_url}\n"
                f"  allowed_users: {list(users)}\n"
                f"discord:\n  token: '{DISCORD_TOKEN}'\n  api_base: "
                f"{dc.base_url}/api/v10\n  gateway_url: {dc.ws_url}\n"
                f"  command_sync: 'off'\n  allowed_users: {list(dc_chats.values())}\n"
            ),
        )
        tg_menu = [
            retry_after(1),
            server_error(500),
            server_error(502),
            ConnectionReset(),
            Delay(0.2),
        ]
        tg_steps = {
            "sendmessage": seeded_faults(rng, 400, 0.2, tg_menu),
            "sendchataction": seeded_faults(rng, 400, 0.2, tg_menu),
        }
        for method, steps in tg_steps.items():
            tg.fail(method, *steps)
        tg.fail("getUpdates", *seeded_faults(rng, 40, 0.2, [server_error(502), Delay(0.2)]))
        slack_menu = [slack_ratelimited(1), Fault(500), Fault(502), ConnectionReset(), Delay(0.2)]
        slack_steps = seeded_faults(rng, 400, 0.2, slack_menu)
        sl.fail("chat.postMessage", *slack_steps)
        sl.fail("reactions.add", *seeded_faults(rng, 400, 0.2, slack_menu))
        # the first create's answer is lost for certain (posted, then reset: our outbox resends),
        # then the mix
        dc_steps = [AfterCommit(ConnectionReset()), *seeded_faults(rng, 400, 0.2, discord_menu())]
        dc.fail("POST /channels/{cid}/messages", *dc_steps)
        dc.fail("POST /channels/{cid}/typing", *seeded_faults(rng, 400, 0.2, discord_menu()))
        config = load_config(home, env={})
        gw = build_gateway(
            config,
            env={},
            adapters=platform_adapters(config, monotonic=clock.monotonic),
            probe_ollama=False,
            sleep=clock.sleep,
            monotonic=clock.monotonic,
        )
        daemon = Daemon(gw, install_signals=False)
        await daemon.start()
        try:
            # Discord delivers a message only to a connected bot
            await dc.wait_until(lambda: dc.online, 30)
            for t in range(turns):
                # every chat asks all its questions at once: queues, busy notices, retries
                for chat in tg_chats:
                    tg.inject_message(
                        chat, f"tg-{chat}-{t} hello", user_id=chat, username=f"u{chat}"
                    )
                for i, channel in enumerate(slack_chats, start=1):
                    await sl.push_event(
                        {
                            "type": "message",
                            "channel_type": "im",
                            "channel": channel,
                            "user": f"U{i}",
                            "text": f"sl-{i}-{t} hello",
                            "ts": f"1700000000.{i}{t:05d}",
                        }
                    )
                for i, (channel, user) in enumerate(dc_chats.items(), start=1):
                    await dc.push_message(channel, f"dc-{i}-{t} hello", author_id=user)

            def replies_in(texts: Sequence[str]) -> int:
                return sum(1 for text in texts if HEADER.search(text))

            await tg.wait_until(
                lambda: all(replies_in(tg.sent_texts(c)) >= turns for c in tg_chats), 90
            )
            await sl.wait_until(
                lambda: all(
                    replies_in([m.text for m in sl.posted(c)]) >= turns for c in slack_chats
                ),
                90,
            )
            await dc.wait_until(
                lambda: all(
                    replies_in([m.content for m in dc.sent_messages(c)]) >= turns for c in dc_chats
                ),
                90,
            )
            await gw.sessions.wait_idle()
            outbound = {
                r[0]: r[1]
                for r in gw.store.all("SELECT status, COUNT(*) FROM outbound GROUP BY status")
            }
        finally:
            await daemon.stop()
        problems = [] if outbound.keys() == {"sent"} else [f"outbound rows: {outbound}"]
        for chat in tg_chats:
            problems += check_chat(
                f"telegram {chat}", tg.sent_texts(chat), [f"tg-{chat}-{t}" for t in range(turns)]
            )
        for i, channel in enumerate(slack_chats, start=1):
            problems += check_chat(
                f"slack {channel}",
                [m.text for m in sl.posted(channel)],
                [f"sl-{i}-{t}" for t in range(turns)],
            )
        for i, channel in enumerate(dc_chats, start=1):
            problems += check_chat(
                f"discord {channel}",
                [m.content for m in dc.sent_messages(channel)],
                [f"dc-{i}-{t}" for t in range(turns)],
            )
        # no request before a served retry_after expired: Telegram's and Discord's fakes record them
        # (Discord per bucket: route and channel); Slack's by channel
        inside = flood_waits_entered(tg, tg_steps)
        problems += [
            f"telegram: request {c.name} at {c.at} inside a flood wait started by a {by} 429"
            for c, by in inside
        ]
        typing_waits = sum(1 for _, by in inside if by == "sendchataction")
        problems += [
            f"discord: {c.method} {c.path} inside a served retry_after"
            for c in dc.retry_after_violations
        ]
        posts = sl.calls_to("chat.postMessage")
        for i, call in enumerate(posts):
            step = slack_steps[i] if i < len(slack_steps) else None
            if isinstance(step, Fault) and step.status == 429:
                early = [
                    c
                    for c in posts[i + 1 :]
                    if c.body.get("channel") == call.body.get("channel") and c.at < call.at + 1.0
                ]
                problems += [
                    f"slack: post to {c.body.get('channel')} {call.at + 1.0 - c.at:.2f}s before "
                    "the retry_after ended"
                    for c in early
                ]
        faults_served = sum(1 for s in slack_steps[: len(posts)] if s is not None)
        creates = dc.calls_to("POST /channels/{cid}/messages")
        dc_served = discord_steps_served(dc, creates, dc_steps)
        lost = sum(1 for s in dc_served if isinstance(s, AfterCommit))
        print(
            f"telegram: {len(tg.calls_to('sendmessage'))} sendMessage calls, "
            f"{len(tg.sent_messages())} delivered, {typing_waits} requests inside a flood wait a "
            f"typing 429 started; slack: {len(posts)} chat.postMessage calls ({faults_served} "
            f"faulted), {len(sl.posted())} delivered; discord: {len(creates)} message creates "
            f"({sum(1 for s in dc_served if s is not None)} faulted, {lost} answers lost after the "
            f"post, {len(creates) - len(dc_served)} refused inside a bucket's window), "
            f"{len(dc.sent_messages())} delivered, {len(dc.nonce_repeats)} repeats answered from "
            "the nonce"
        )
        assert not problems, "\n".join(problems)
        # every lost answer was retried, and none posted twice
        assert lost and len(dc.nonce_repeats) >= lost


# ------------------------------------------------------------------------------------- model faults
def openai_bad_arguments() -> Fault:
    """A 200 whose tool call carries arguments that are not JSON at all (only the OpenAI wire can
    say that)."""
    return Fault(
        200,
        {
            "id": "chatcmpl-bad",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_bad",
                                "type": "function",
                                "function": {
                                    "name": "memory",
                                    "arguments": '{"action": "add", "targ',
                                },
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    )


MODEL_FAULTS: list[tuple[str, Any]] = [
    ("timeout", Delay(3.0)),
    ("429", Fault(429)),
    ("500", Fault(500)),
    ("529 overloaded", Fault(529)),
    ("malformed JSON", Malformed()),
    ("cut response", CutStream()),
    ("connection reset", ConnectionReset()),
]


def model_yaml(primary: FakeLLM, provider: str, fallback: FakeLLM | None) -> str:
    url = primary.openai_base_url if provider == "openai" else primary.base_url
    text = (
        "web:\n  enabled: false\nmodel:\n  provider: "
        f"{provider}\n  name: primary-model\n  base_url: {url}\n"
        f"  api_key: k\n  max_retries: 0\n  timeout_s: 1\n"
    )
    if fallback is not None:
        text += (
            f"  fallback:\n    provider: openai\n    name: fallback-model\n"
            f"    base_url: {fallback.openai_base_url}\n"
            f"    api_key: k\n    max_retries: 0\n    timeout_s: 5\n"
        )
    return text


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("with_fallback", [True, False], ids=["fallback", "no-fallback"])
async def test_every_model_fault_ends_in_one_reply_or_one_sentence_and_a_usable_session(
    home: Path, provider: str, with_fallback: bool
) -> None:
    async with FakeLLM() as primary, FakeLLM() as backup:
        write_config(home, extra=model_yaml(primary, provider, backup if with_fallback else None))
        web = RecordingAdapter("web")
        gw = gateway_for(home, [web], clock=away_from_daily_reset())
        try:
            await drive_model_faults(gw, web, primary, backup, provider, with_fallback)
        finally:
            await gw.llm.close()
            gw.store.close()


async def drive_model_faults(
    gw: Any,
    web: RecordingAdapter,
    primary: FakeLLM,
    backup: FakeLLM,
    provider: str,
    with_fallback: bool,
) -> None:
    answered = 0  # turns that reached the model's answer: only they are in the history
    users = 0  # user-role messages the model sees (an Anthropic tool result rides in one too)

    async def say(text: str) -> OutboundMessage:
        before = len(web.sent)
        await gw.sessions.submit(inbound(text, platform="web", chat_id="me", user_id="me"))
        await gw.sessions.wait_idle()
        assert len(web.sent) == before + 1, (
            f"{text!r}: expected one message, got {web.texts()[before:]}"
        )
        return web.sent[-1]

    bad_arguments = (
        openai_bad_arguments()
        if provider == "openai"
        else ToolCall("memory", {"action": "explode", "target": 7})
    )
    for name, fault in [*MODEL_FAULTS, ("tool call with invalid arguments", bad_arguments)]:
        backup_calls = len(backup.calls)
        primary.script(fault)
        got = await say(f"q {name}")
        tool_fault = name.startswith("tool call")
        if with_fallback or tool_fault:
            # a bad tool call is the model's to recover from: no fallback needed
            answered += 1
            users += 2 if tool_fault and provider == "anthropic" else 1
            assert (
                got.kind is OutboundKind.REPLY and got.text == f"echo: q {name} [users={users}]"
            ), name
            assert len(backup.calls) == backup_calls + (0 if tool_fault else 1), name
        else:
            why = "it took too long" if name == "timeout" else "the model service is unavailable"
            assert got.kind is OutboundKind.ERROR and got.text == ERROR_TEXT.format(why=why), name
        # the session stays usable: the next message is
        # answered, and the model sees only whole turns
        answered += 1
        users += 1
        after = await say(f"after {name}")
        assert after.text == f"echo: after {name} [users={users}]", name
    if with_fallback:  # both models down: one sentence, nothing more
        primary.script(Fault(500))
        backup.script(Fault(503))
        got = await say("both down")
        assert got.kind is OutboundKind.ERROR and got.text == ERROR_TEXT.format(
            why="the model service is unavailable"
        )
    stored = [
        r["content"]
        for r in gw.store.all(
            "SELECT content FROM messages WHERE role = "
            "'assistant' AND tool_calls IS NULL ORDER BY id"
        )
    ]
    replies = [m.text for m in web.sent if m.kind is OutboundKind.REPLY]
    assert stored == replies  # nothing half-written stored as a reply
    failed = len(web.sent) - len(replies)
    statuses = collections.Counter(r[0] for r in gw.store.all("SELECT status FROM inbound"))
    assert statuses == {"answered": answered, **({"failed": failed} if failed else {})}


# ----------------------------------------------------------------------------- the answer in flight
class SlowSend(RecordingAdapter):
    """The platform has the message the moment it is sent, but its answer (the message id) is slow
    to come back."""

    def __init__(self) -> None:
        super().__init__("web")
        self.hold = asyncio.Event()
        self.holding = asyncio.Event()

    async def send(self, message: OutboundMessage) -> str:
        mid = await super().send(message)
        if message.kind is OutboundKind.REPLY and not self.hold.is_set():
            self.holding.set()
            await self.hold.wait()
        return mid


@pytest.mark.parametrize("follow_up", ["and another thing", "/stop", "/new"])
async def test_a_message_sent_while_the_answer_is_still_being_marked_finds_the_turn_finished(
    home: Path, follow_up: str
) -> None:
    """Found by the kill run: the user already has the whole answer while the gateway still waits
    for the platform's reply to the last send. A follow-up then got "still working on your previous
    message", and /stop or /new cancelled the finished turn, marking the answered message
    interrupted mid-send."""
    async with FakeLLM() as llm:
        write_config(home, base_url=llm.base_url, extra="web:\n  enabled: false\n")
        web = SlowSend()
        gw = gateway_for(home, [web])
        try:
            await gw.sessions.submit(inbound("first", platform="web", chat_id="me", user_id="me"))
            await asyncio.wait_for(web.holding.wait(), 10)
            assert web.texts() == ["echo: first [users=1]"]  # the user is reading the answer now
            await gw.sessions.submit(inbound(follow_up, platform="web", chat_id="me", user_id="me"))
            web.hold.set()
            await gw.sessions.wait_idle()
            statuses = [r[0] for r in gw.store.all("SELECT status FROM inbound ORDER BY id")]
        finally:
            await gw.llm.close()
            gw.store.close()
    assert "Still working on your previous message; I'll answer this one next." not in web.texts()
    assert statuses == ["answered", "answered"]
    expected = {
        "and another thing": "echo: and another thing [users=2]",
        "/stop": NOTHING_TO_STOP,
        "/new": NEW_TEXT,
    }[follow_up]
    assert web.texts() == ["echo: first [users=1]", expected]
