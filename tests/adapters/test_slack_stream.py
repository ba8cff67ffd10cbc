"""Slack live previews end to end: slack-bolt over Socket Mode against the fake Slack (Web API tiers
enforced on the test's virtual clock; chat.startStream/appendStream/stopStream as Slack documents
them), the whole gateway on the same clock, and the fake LLM streaming for real, held piece by piece
by a StreamGate."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from adapters.slack.adapter import SlackAdapter, SlackTimings
from gateway.config.settings import load_config
from gateway.events import ChatRef, PreviewPart
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.adapters.test_slack import ALICE, CHANNEL, DM, USERS, dm, mention, slack_yaml
from tests.adapters.test_telegram import VirtualTime
from tests.fakes.llm import FakeLLM, Paced, Reply, StreamGate
from tests.fakes.slack import FakeSlack, SlackMessage
from tests.helpers import write_config

ANSWER = (
    "Here you go:\n\n• first, the *easy* part\n• then the rest\n\n```\nmake build\nmake test\n```\n"
    "And that is all."
)
EDIT = "streaming:\n  by_platform:\n    slack: edit\n"


@asynccontextmanager
async def running(
    home: Path, llm: FakeLLM, fake: FakeSlack, virtual: VirtualTime, extra: str = EDIT
) -> AsyncIterator[Gateway]:
    write_config(
        home, provider="anthropic", base_url=llm.base_url, extra=slack_yaml(fake, "socket", extra)
    )
    config = load_config(home, env={})
    assert config.slack is not None
    timings = SlackTimings(ping_interval=30.0, monotonic=virtual.monotonic)
    adapter = SlackAdapter(config.slack, timings=timings)
    gw = build_gateway(
        config,
        env={},
        adapters=[adapter],
        probe_ollama=False,
        sleep=virtual.sleep,
        monotonic=virtual.monotonic,
    )
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    try:
        yield gw
    finally:
        await daemon.stop()


def bot_messages(fake: FakeSlack, channel: str) -> list[SlackMessage]:
    return fake.posted(channel)


def versions(fake: FakeSlack, channel: str) -> int:
    """How many versions of the bot's first message in `channel` people have seen."""
    sent = bot_messages(fake, channel)
    return len(sent[0].edits) + 1 if sent else 0


async def piece_by_piece(
    fake: FakeSlack, gate: StreamGate, seen: Callable[[], int], count: int = 3
) -> None:
    for n in range(1, count + 1):
        gate.release(1)
        await fake.wait_until(lambda n=n: seen() >= n, 10)  # type: ignore[misc]
    gate.release_all()


async def answered(fake: FakeSlack, channel: str) -> SlackMessage:
    await fake.wait_until(
        lambda: (
            bool(bot_messages(fake, channel))
            and not bot_messages(fake, channel)[0].streaming
            and bot_messages(fake, channel)[0].text.endswith("all.")
        ),
        10,
    )
    return bot_messages(fake, channel)[0]


async def unstreamed(tmp_path: Path, llm: FakeLLM, event: dict[str, object], channel: str) -> str:
    home = tmp_path / "off"
    home.mkdir()
    virtual = VirtualTime()
    async with FakeSlack(users=USERS, clock=virtual.monotonic) as fake:
        llm.script(Reply(ANSWER))
        async with running(home, llm, fake, virtual, extra="") as gw:
            await fake.push_event(event)
            text = (await fake.wait_for_post(channel)).text
            await gw.sessions.wait_idle()
    return text


async def test_a_thread_answer_streams_natively_and_ends_as_the_answer(
    home: Path, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    virtual = VirtualTime()
    event = mention("<@UBOT> how do I build it?")
    async with FakeSlack(users=USERS, clock=virtual.monotonic) as fake:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, fake, virtual) as gw:
            await fake.push_event(event)
            await piece_by_piece(fake, gate, lambda: versions(fake, CHANNEL))
            message = await answered(fake, CHANNEL)
            await gw.sessions.wait_idle()
    [start] = fake.calls_to("chat.startStream")
    assert start.body["thread_ts"] == event["ts"] and start.body["recipient_user_id"] == ALICE
    assert start.body["recipient_team_id"] == "T1"
    assert (
        len(fake.calls_to("chat.appendStream")) >= 2 and len(fake.calls_to("chat.stopStream")) == 1
    )
    assert len(bot_messages(fake, CHANNEL)) == 1 and message.thread_ts == event["ts"]
    assert message.text == await unstreamed(
        tmp_path, fake_llm, mention("<@UBOT> how do I build it?"), CHANNEL
    )
    assert fake.tier_violations == []
    preview = [
        c.at
        for c in fake.calls
        if c.name in ("chat.startStream", "chat.appendStream", "chat.stopStream")
    ]
    # paced for the whole workspace
    assert all(b - a >= 1.2 for a, b in itertools.pairwise(preview))


async def test_without_slack_streaming_the_message_is_updated_in_place(
    home: Path, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    virtual = VirtualTime()
    async with FakeSlack(users=USERS, clock=virtual.monotonic, streaming_supported=False) as fake:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, fake, virtual) as gw:
            await fake.push_event(mention("<@UBOT> how do I build it?"))
            await piece_by_piece(fake, gate, lambda: versions(fake, CHANNEL))
            message = await answered(fake, CHANNEL)
            await gw.sessions.wait_idle()
    # asked once; Slack said it has no such method
    assert len(fake.calls_to("chat.startStream")) == 1
    assert len(bot_messages(fake, CHANNEL)) == 1 and len(message.edits) >= 3
    # fences closed in every update
    assert all(text.count("```") % 2 == 0 for text in message.edits)
    assert message.text == await unstreamed(
        tmp_path, fake_llm, mention("<@UBOT> how do I build it?"), CHANNEL
    )
    assert fake.tier_violations == []


async def test_a_dm_answered_in_place_is_updated_not_streamed(
    home: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    virtual = VirtualTime()
    async with FakeSlack(users=USERS, clock=virtual.monotonic) as fake:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, fake, virtual) as gw:
            await fake.push_event(dm("how do I build it?"))
            await piece_by_piece(fake, gate, lambda: versions(fake, DM))
            message = await answered(fake, DM)
            await gw.sessions.wait_idle()
    assert (
        fake.calls_to("chat.startStream") == []
        and len(message.edits) >= 3
        and message.thread_ts is None
    )
    assert len(bot_messages(fake, DM)) == 1


async def test_a_kill_mid_stream_gives_one_answer_in_the_streamed_message(
    home: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    virtual = VirtualTime()
    async with FakeSlack(users=USERS, clock=virtual.monotonic) as fake:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate), Reply(ANSWER))
        async with running(home, fake_llm, fake, virtual, EDIT + "daemon:\n  drain_seconds: 0\n"):
            await fake.push_event(mention("<@UBOT> how do I build it?"))
            gate.release(2)
            await fake.wait_until(lambda: versions(fake, CHANNEL) >= 2, 10)
        # the daemon died mid-answer; the next one, a while later, answers it again
        gate.release_all()
        virtual.t += 5.0
        async with running(home, fake_llm, fake, virtual) as gw:
            message = await answered(fake, CHANNEL)
            await gw.sessions.wait_idle()
    # the stale stream became the answer
    assert [m.ts for m in bot_messages(fake, CHANNEL)] == [message.ts]
    assert fake.tier_violations == []


async def test_a_slash_command_answer_has_no_preview(home: Path, fake_llm: FakeLLM) -> None:
    gate = StreamGate()
    virtual = VirtualTime()
    async with FakeSlack(users=USERS, clock=virtual.monotonic) as fake:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, fake, virtual) as gw:
            await fake.push_slash_command(
                "/agent", "how do I build it?", channel_id=CHANNEL, trigger_id="t1"
            )
            gate.release_all()
            await fake.wait_until(lambda: bool(fake.responses), 10)
            await gw.sessions.wait_idle()
    # the response_url only
    assert fake.responses[0]["text"].endswith("all.") and fake.posted() == []
    assert fake.calls_to("chat.startStream") == [] and fake.calls_to("chat.update") == []


async def test_at_most_18_streams_start_a_minute_and_the_rest_are_updated_messages(
    home: Path, fake_llm: FakeLLM
) -> None:
    """chat.startStream is Tier 2 (20 a minute per workspace): past 18 starts in a minute a thread's
    preview is a posted message, so Slack never has to refuse one; a minute later streams start
    again."""
    virtual = VirtualTime()
    async with FakeSlack(users=USERS, clock=virtual.monotonic) as fake:
        async with running(home, fake_llm, fake, virtual) as gw:
            adapter = gw.sessions.adapters["slack"]
            assert isinstance(adapter, SlackAdapter)
            opened = []
            for n in range(21):
                if n == 20:
                    virtual.t += 60.0
                chat = ChatRef("slack", "group", CHANNEL, f"1700000{n:03d}.000100")
                style = adapter.preview_style(chat, None)
                assert style is not None
                part = PreviewPart(
                    chat=chat,
                    index=0,
                    text=f"answer {n}",
                    user_id=ALICE,
                    space_id="T1",
                    key=f"t{n}:0",
                )
                opened.append((style.raw, await adapter.show_preview(part)))
                virtual.t += 1.2  # as the core paces a workspace's preview calls
    streamed = [raw and mid.startswith("s:") for raw, mid in opened]
    assert streamed == [True] * 18 + [False] * 2 + [True]
    assert len(fake.calls_to("chat.startStream")) == 19 and fake.tier_violations == []
    assert [m.text for m in fake.posted(CHANNEL)][18:20] == ["answer 18", "answer 19"]
