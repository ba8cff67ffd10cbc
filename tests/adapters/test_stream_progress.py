"""`streaming.mode: progress` on every surface, end to end through the real libraries against the
fakes: one status message lists the tools the agent runs (`🔧 memory ×2`), and the answer arrives as
a new message below it; the status line stays. The fakes enforce each platform's pacing and
limits."""

from __future__ import annotations

from pathlib import Path

from tests.adapters import test_discord_stream as discord_stream
from tests.adapters import test_slack_stream as slack_stream
from tests.adapters.test_discord import MENTION as DISCORD_MENTION
from tests.adapters.test_slack import CHANNEL, USERS, mention
from tests.adapters.test_telegram import ALICE, GROUP, VirtualTime, running
from tests.fakes.discord import BOT_ID, CHANNEL_ID
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.test_stream_web import Tab, auth, config, socket_url
from tests.test_stream_web import _daemon as web_daemon

PROGRESS = "streaming:\n  mode: progress\n"
ANSWER = "Noted: tea, not coffee."
LINE = "🔧 memory ×2"


def two_tools_then_answer(llm: FakeLLM) -> None:
    llm.script(
        ToolCall("memory", {"action": "add", "target": "memory", "content": "Likes tea."}),
        ToolCall("memory", {"action": "add", "target": "memory", "content": "Not coffee."}),
        Reply(ANSWER),
    )


async def test_telegram_private_chat_and_group(home: Path, fake_llm: FakeLLM) -> None:
    tg = FakeTelegram()
    await tg.start()
    try:
        async with running(home, fake_llm, tg, PROGRESS, time_=VirtualTime()) as run:
            for chat, text, kind in (
                (ALICE, "remember: tea", "private"),
                (GROUP, "@gw_test_bot remember: tea", "supergroup"),
            ):
                two_tools_then_answer(fake_llm)
                asked = tg.inject_message(chat, text, chat_type=kind)
                await tg.wait_until(
                    lambda chat=chat: len(tg.sent_messages(chat)) == 2,  # type: ignore[misc]
                    10,
                    lambda chat=chat: f"{tg.sent_texts(chat)}",  # type: ignore[misc]
                )
                await run.gw.sessions.wait_idle()
                status, answer = tg.sent_messages(chat)
                assert status.text == LINE and answer.text == ANSWER and answer.edits == ()
                assert LINE not in status.edits and status.edits in ((), ("🔧 memory",))
                if kind == "supergroup":
                    asked_id = int(tg.injected[asked]["message"]["message_id"])
                    assert status.reply_to_message_id == answer.reply_to_message_id == asked_id
    finally:
        await tg.stop()
    assert tg.drafts == []  # a status line is a message: it stays as a record, a draft would vanish
    assert tg.flood_violations == [] and tg.refused == []


async def test_discord_channel(home: Path, fake_llm: FakeLLM) -> None:
    virtual = VirtualTime()
    async with discord_stream.discord_fake(virtual) as fake:
        two_tools_then_answer(fake_llm)
        async with discord_stream.running(home, fake_llm, fake, virtual, extra=PROGRESS) as gw:
            await fake.push_message(
                CHANNEL_ID, f"{DISCORD_MENTION} remember: tea", mentions=[BOT_ID]
            )
            await fake.wait_until(lambda: len(fake.sent_messages(CHANNEL_ID)) == 2, 10)
            await gw.sessions.wait_idle()
    status, answer = fake.sent_messages(CHANNEL_ID)
    assert (status.content, answer.content) == (LINE, ANSWER) and answer.edits == ()
    assert fake.bucket_violations == [] and fake.retry_after_violations == []


async def test_slack_channel(home: Path, fake_llm: FakeLLM) -> None:
    virtual = VirtualTime()
    async with FakeSlack(users=USERS, clock=virtual.monotonic) as fake:
        two_tools_then_answer(fake_llm)
        async with slack_stream.running(home, fake_llm, fake, virtual, extra=PROGRESS) as gw:
            await fake.push_event(mention("<@UBOT> remember: tea"))
            await fake.wait_until(
                lambda: len(fake.posted(CHANNEL)) == 2, 10, lambda: f"{fake.posted(CHANNEL)}"
            )
            await gw.sessions.wait_idle()
    status, answer = fake.posted(CHANNEL)
    assert status.text == LINE and answer.text == ANSWER and answer.edits == ()
    assert fake.calls_to("chat.startStream") == [] and fake.tier_violations == []


async def test_web_chat(home: Path) -> None:
    async with FakeLLM() as llm:
        config(home, llm, PROGRESS)
        two_tools_then_answer(llm)
        daemon = await web_daemon(home)
        try:
            import aiohttp

            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(socket_url(daemon), headers=auth(home)) as ws,
            ):
                tab = Tab(ws)
                await ws.send_json({"text": "remember: tea", "id": "m1"})
                reply = await tab.until(
                    lambda f: f["type"] == "message" and f.get("kind") == "reply"
                )
        finally:
            await daemon.stop()
    progress = [f for f in tab.frames if f["type"] == "progress"]
    assert progress and progress[-1]["text"] == LINE
    # a new message; the status line stays
    assert reply["text"] == ANSWER and "replaces" not in reply
    assert not any(f["type"] in ("draft", "delta", "retract") for f in tab.frames)
