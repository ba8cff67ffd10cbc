"""Self-test of the wire fakes in tests/fakes/: each
one driven by the real client library it imitates.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import discord
import httpx2
import openai
import pytest
from aiogram import Bot, Dispatcher, F, Router
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
)
from aiogram.types import Message, MessageEntity, ReplyParameters
from anthropic.types import Message as AnthropicMessage
from anthropic.types import MessageParam, TextBlock, TextBlockParam, ToolUseBlock
from discord import app_commands
from openai.types.chat import ChatCompletionMessageParam
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.say.async_say import AsyncSay
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes import discord as dc
from tests.fakes import slack as sl
from tests.fakes import telegram as tg
from tests.fakes.llm import (
    CutStream,
    Delay,
    FakeLLM,
    Fault,
    Malformed,
    Reply,
    ToolCall,
    ToolCalls,
    estimate_tokens,
    prompt_elements,
)


# ---------------------------------------------------------------------------------------------- LLM
def _openai(fake: FakeLLM, retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-test", base_url=fake.openai_base_url, max_retries=retries, timeout=5
    )


def _anthropic(fake: FakeLLM, retries: int = 0) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="sk-ant-test", base_url=fake.base_url, max_retries=retries, timeout=5
    )


def _text(message: AnthropicMessage) -> str:
    """The text of the first content block, which these tests expect to be a text block."""
    block = message.content[0]
    assert isinstance(block, TextBlock), block
    return block.text


async def test_openai_default_echo_stream_tools_and_retry(fake_llm: FakeLLM) -> None:
    client = _openai(fake_llm, retries=2)
    history: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "two"},
    ]
    r = await client.chat.completions.create(model="m", messages=history)
    assert r.choices[0].message.content == "echo: two [users=2]"
    assert r.usage is not None and r.usage.prompt_tokens == sum(estimate_tokens(m) for m in history)
    assert r.usage.completion_tokens == len("echo: two [users=2]") // 4

    fake_llm.script(
        ToolCalls([ToolCall("get_time", {"tz": "UTC"}), ToolCall("add", {"a": 1})], text="hm")
    )
    stream = await client.chat.completions.create(
        model="m", messages=history, stream=True, stream_options={"include_usage": True}
    )
    text, usage = "", None
    args: dict[int, str] = {}
    names: dict[int, str | None] = {}
    async for chunk in stream:
        usage = chunk.usage or usage
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            assert d.function is not None
            names[d.index] = d.function.name or names.get(d.index)
            args[d.index] = args.get(d.index, "") + (d.function.arguments or "")
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == "hm" and names == {0: "get_time", 1: "add"}
    assert (
        json.loads(args[0]) == {"tz": "UTC"}
        and json.loads(args[1]) == {"a": 1}
        and usage is not None
    )

    fake_llm.script(Fault(429, headers={"retry-after-ms": "5"}), Reply("after retry"))
    n = len(fake_llm.calls)
    r = await client.chat.completions.create(model="m", messages=history)
    assert r.choices[0].message.content == "after retry" and len(fake_llm.calls) - n == 2

    bad: list[ChatCompletionMessageParam] = [
        {"role": "tool", "tool_call_id": "call_x", "content": "orphan"}
    ]
    with pytest.raises(openai.BadRequestError, match="role 'tool'"):
        await client.chat.completions.create(model="m", messages=bad)
    await client.close()


async def test_openai_faults(fake_llm: FakeLLM) -> None:
    client = _openai(fake_llm)
    msgs: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    fake_llm.script(Malformed(), CutStream(after=2), Delay(1.0))
    with pytest.raises(json.JSONDecodeError):  # the SDK lets the raw ValueError through
        await client.chat.completions.create(model="m", messages=msgs)
    with pytest.raises((openai.APIConnectionError, httpx2.RemoteProtocolError)):
        stream = await client.chat.completions.create(model="m", messages=msgs, stream=True)
        async for _ in stream:
            pass
    with pytest.raises(openai.APITimeoutError):
        await client.with_options(timeout=0.2).chat.completions.create(model="m", messages=msgs)
    fake_llm.script(lambda body: Reply(f"saw {len(body['messages'])}"))
    r = await client.chat.completions.create(model="m", messages=msgs)
    assert r.choices[0].message.content == "saw 1"
    await client.close()


SYSTEM: list[TextBlockParam] = [
    {"type": "text", "text": "You are a gateway. " * 100, "cache_control": {"type": "ephemeral"}}
]


async def test_anthropic_echo_tools_stream_and_errors(fake_llm: FakeLLM) -> None:
    client = _anthropic(fake_llm, retries=1)
    msgs: list[MessageParam] = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    r = await client.messages.create(model="c", max_tokens=50, system="sys", messages=msgs)
    assert _text(r) == "echo: hello [users=1]" and r.stop_reason == "end_turn"
    assert fake_llm.calls[-1].headers["Authorization"] == "Bearer sk-ant-test"

    fake_llm.script(ToolCall("get_time", {"tz": "UTC"}, id="toolu_1"))
    async with client.messages.stream(model="c", max_tokens=50, messages=msgs) as s:
        final = await s.get_final_message()
    tool_use = final.content[0]
    assert (
        final.stop_reason == "tool_use"
        and isinstance(tool_use, ToolUseBlock)
        and tool_use.input == {"tz": "UTC"}
    )
    msgs += [
        {"role": "assistant", "content": final.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"}],
        },
    ]
    async with client.messages.stream(model="c", max_tokens=50, messages=msgs) as s:
        text = "".join([t async for t in s.text_stream])
    assert text == "echo: hello [users=2]"

    with pytest.raises(anthropic.BadRequestError, match="tool_result"):
        await client.messages.create(model="c", max_tokens=5, messages=msgs[:1] + msgs[2:])
    fake_llm.script(
        Fault(529, headers={"retry-after-ms": "5"}), Fault(529, headers={"retry-after-ms": "5"})
    )
    with pytest.raises(anthropic.APIStatusError) as err:
        await client.messages.create(model="c", max_tokens=5, messages=msgs[:1])
    assert err.value.status_code == 529
    await client.close()


async def test_anthropic_prefix_cache_emulation() -> None:
    async with FakeLLM(cache=True) as fake:
        client = _anthropic(fake)
        turn1: list[MessageParam] = [
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "first question",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            }
        ]
        r1 = await client.messages.create(model="c", max_tokens=50, system=SYSTEM, messages=turn1)
        body1 = fake.anthropic_requests()[-1]
        sizes = [estimate_tokens(e) for e, _ in prompt_elements(body1, "anthropic")]
        assert r1.usage.cache_read_input_tokens == 0
        assert r1.usage.cache_creation_input_tokens == sum(sizes) and r1.usage.input_tokens == 0

        # Turn 2 moves the breakpoint to the newest message: the whole of turn 1 is read back.
        turn2: list[MessageParam] = [
            {"role": "user", "content": [{"type": "text", "text": "first question"}]},
            {"role": "assistant", "content": [{"type": "text", "text": _text(r1)}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}}
                ],
            },
        ]
        r2 = await client.messages.create(model="c", max_tokens=50, system=SYSTEM, messages=turn2)
        sizes2 = [
            estimate_tokens(e)
            for e, _ in prompt_elements(fake.anthropic_requests()[-1], "anthropic")
        ]
        assert r2.usage.cache_read_input_tokens == sum(sizes)
        assert r2.usage.cache_creation_input_tokens == sum(sizes2) - sum(sizes)
        assert r2.usage.input_tokens == 0

        # Same system, new conversation without a message
        # breakpoint: only the system prefix is read.
        r3 = await client.messages.create(
            model="c", max_tokens=50, system=SYSTEM, messages=[{"role": "user", "content": "other"}]
        )
        assert (
            r3.usage.cache_read_input_tokens == sizes[0]
            and r3.usage.cache_creation_input_tokens == 0
        )
        fake.forget()
        r4 = await client.messages.create(
            model="c", max_tokens=50, system=SYSTEM, messages=[{"role": "user", "content": "other"}]
        )
        assert (
            r4.usage.cache_read_input_tokens == 0
            and r4.usage.cache_creation_input_tokens == sizes[0]
        )
        await client.close()


# ----------------------------------------------------------------------------------------- Telegram
def _bot(fake: tg.FakeTelegram, token: str = tg.TOKEN) -> Bot:
    return Bot(token, session=AiohttpSession(api=TelegramAPIServer.from_base(fake.base_url)))


async def test_telegram_polling_reply_and_markup(fake_telegram: tg.FakeTelegram) -> None:
    router = Router()

    @router.message(F.text)
    async def on_text(message: Message) -> None:
        said = (message.text or "").replace("@", "").replace("_", "\\_")
        await message.answer(
            f"*got* {said}\\!",
            parse_mode="MarkdownV2",
            reply_parameters=ReplyParameters(message_id=message.message_id),
        )

    dp = Dispatcher()
    dp.include_router(router)
    bot = _bot(fake_telegram)
    poll = asyncio.create_task(dp.start_polling(bot, polling_timeout=1, handle_signals=False))
    fake_telegram.inject_message(
        -100, "hi @gw_test_bot", chat_type="supergroup", message_thread_id=7, is_topic=True
    )
    sent = await fake_telegram.wait_for_sent(-100)
    assert sent.text == "got hi gw_test_bot!" and sent.entities == (
        {"type": "bold", "offset": 0, "length": 3},
    )
    assert sent.reply_to_message_id == 1 and sent.message_thread_id == 7
    update = next(iter(fake_telegram.injected.values()))
    assert update["message"]["entities"] == [{"type": "mention", "offset": 3, "length": 12}]
    await dp.stop_polling()
    await poll
    assert fake_telegram.updates == []  # confirmed by the offset of the last poll


async def test_telegram_errors_and_flood_control(fake_telegram: tg.FakeTelegram) -> None:
    now = [1000.0]
    fake_telegram.clock = lambda: now[0]
    bot = _bot(fake_telegram)
    with pytest.raises(
        TelegramBadRequest, match=r"can't parse entities: Character '\.' is reserved"
    ):
        await bot.send_message(5, "a.b", parse_mode="MarkdownV2")
    fake_telegram.fail("sendMessage", tg.retry_after(30), tg.ConnectionReset())
    with pytest.raises(TelegramRetryAfter) as flood:
        await bot.send_message(5, "x")
    assert flood.value.retry_after == 30
    with pytest.raises(TelegramRetryAfter):
        # too early: Telegram answers 429 again and the fake notes it
        await bot.send_message(5, "x")
    assert [c.name for c in fake_telegram.flood_violations] == ["sendmessage"]
    with pytest.raises(TelegramNetworkError):
        await bot.send_message(6, "y")
    sent = await bot.send_message(6, "first")
    now[0] += 1.0  # an edit a second after the chat's last message: fine
    with pytest.raises(TelegramBadRequest, match="message is not modified"):
        await bot.edit_message_text("first", chat_id=6, message_id=sent.message_id)
    now[0] += 1.0
    await bot.edit_message_text("second", chat_id=6, message_id=sent.message_id)
    assert [(m.text, m.edits) for m in fake_telegram.sent_messages(6)] == [("second", ("first",))]
    await bot.session.close()
    bad = _bot(fake_telegram, token="1:wrong")
    with pytest.raises(Exception, match="Unauthorized"):
        await bad.get_me()
    await bad.session.close()


async def test_telegram_drafts_and_edit_pacing(fake_telegram: tg.FakeTelegram) -> None:
    now = [1000.0]
    fake_telegram.clock = lambda: now[0]
    bot = _bot(fake_telegram)
    fake_telegram.inject_message(7, "hi")  # a private chat
    fake_telegram.inject_message(-70, "hi", chat_type="group")
    assert await bot.send_message_draft(7, 3, text="Thinking about it")
    await bot.send_message(7, "Thought about it.")  # the answer may follow a draft at once
    with pytest.raises(TelegramBadRequest, match="private chats"):
        await bot.send_message_draft(-70, 3, text="no drafts in groups")
    sent = await bot.send_message(-70, "one")
    with pytest.raises(TelegramRetryAfter):
        # an edit inside the second after the chat's last message
        await bot.edit_message_text("two", chat_id=-70, message_id=sent.message_id)
    now[0] += 1.0
    with pytest.raises(TelegramBadRequest, match="outside the text"):
        await bot.edit_message_text(
            "two",
            chat_id=-70,
            message_id=sent.message_id,
            entities=[MessageEntity(type="bold", offset=2, length=5)],
        )
    # the refused ones did not count
    await bot.edit_message_text("two", chat_id=-70, message_id=sent.message_id)
    with pytest.raises(TelegramRetryAfter):  # a send right after an edit
        await bot.send_message(-70, "three")
    assert [d.text for d in fake_telegram.drafts] == ["Thinking about it"]
    assert [c.name for c in fake_telegram.flood_violations] == ["editmessagetext", "sendmessage"]
    assert [status for _, status, _ in fake_telegram.refused] == [400, 429, 400, 429]
    await bot.session.close()
    no_drafts = tg.FakeTelegram(drafts_supported=False)
    async with no_drafts:
        old = _bot(no_drafts)
        with pytest.raises(TelegramNotFound):
            await old.send_message_draft(7, 3, text="x")
        await old.session.close()


# -------------------------------------------------------------------------------------------- Slack
async def test_slack_web_api(fake_slack: sl.FakeSlack) -> None:
    client = AsyncWebClient(token=sl.BOT_TOKEN, base_url=fake_slack.api_base_url)
    root = fake_slack.seed_thread("C1", ["question", {"text": "more", "user": "U2"}])
    r = await client.chat_postMessage(channel="C1", thread_ts=root, text="answer")
    await client.chat_update(channel="C1", ts=r["ts"], text="better answer")
    page = await client.conversations_replies(channel="C1", ts=root, limit=2)
    assert [m["text"] for m in page["messages"]] == ["question", "more"] and page["has_more"]
    rest = await client.conversations_replies(
        channel="C1", ts=root, cursor=page["response_metadata"]["next_cursor"]
    )
    assert [m["text"] for m in rest["messages"]] == ["better answer"]
    assert [(m.text, m.edits) for m in fake_slack.posted("C1", thread_ts=root)] == [
        ("better answer", ("answer",))
    ]

    fake_slack.fail("chat.postMessage", sl.ratelimited(7), sl.slack_error("invalid_blocks"))
    with pytest.raises(SlackApiError) as err:
        await client.chat_postMessage(channel="C1", text="x")
    assert (
        err.value.response.status_code == 429 and err.value.response.headers["Retry-After"] == "7"
    )
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        await client.chat_postMessage(channel="C1", text="x")
    with pytest.raises(SlackApiError, match="msg_too_long"):
        await client.chat_postMessage(channel="C1", text="x" * 40_001)
    bad = AsyncWebClient(token="xoxb-wrong", base_url=fake_slack.api_base_url)
    with pytest.raises(SlackApiError, match="invalid_auth"):
        await bad.auth_test()


async def test_slack_socket_mode_event_ack_and_reconnect(fake_slack: sl.FakeSlack) -> None:
    app = AsyncApp(
        client=AsyncWebClient(token=sl.BOT_TOKEN, base_url=fake_slack.api_base_url),
        signing_secret=sl.SIGNING_SECRET,
    )

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: AsyncSay) -> None:
        await say(text=f"echo: {event['text']}", thread_ts=event["ts"])

    handler = AsyncSocketModeHandler(app, app_token=sl.APP_TOKEN, ping_interval=1)
    await handler.connect_async()
    try:
        env = await fake_slack.push_event(
            {
                "type": "app_mention",
                "user": "U1",
                "text": "<@UBOT> hi",
                "ts": "1700000001.000100",
                "channel": "C1",
            }
        )
        assert await fake_slack.wait_for_ack(env) == {"envelope_id": env}
        post = await fake_slack.wait_for_post("C1")
        assert post.text == "echo: <@UBOT> hi" and post.thread_ts == "1700000001.000100"
        await fake_slack.disconnect()
        await fake_slack.wait_for_connections(2)
        env = await fake_slack.push_event(
            {
                "type": "app_mention",
                "user": "U1",
                "text": "again",
                "ts": "1700000002.000100",
                "channel": "C1",
            }
        )
        await fake_slack.wait_for_ack(env)
        assert len(fake_slack.calls_to("apps.connections.open")) == 2
    finally:
        await handler.close_async()


async def test_slack_signed_events_helpers() -> None:
    body = json.dumps(sl.event_callback({"type": "message", "text": "x"}, event_id="Ev9"))
    headers = sl.signed_request_headers(sl.SIGNING_SECRET, body, timestamp=1_700_000_000)
    from slack_sdk.signature import SignatureVerifier

    verifier = SignatureVerifier(
        sl.SIGNING_SECRET, clock=type("C", (), {"now": lambda self: 1_700_000_010})()
    )
    assert verifier.is_valid_request(body, headers)


# ------------------------------------------------------------------------------------------ Discord
class _EchoClient(discord.Client):
    def __init__(self) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents, guild_ready_timeout=0.1)
        self.ready = asyncio.Event()
        self.seen: list[str] = []

    async def on_ready(self) -> None:
        self.ready.set()

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot:
            return
        self.seen.append(message.content)
        await message.reply(
            f"echo: {message.content}", allowed_mentions=discord.AllowedMentions.none()
        )


async def test_discord_gateway_rest_reconnect(fake_discord: dc.FakeDiscord) -> None:
    client = _EchoClient()
    task = asyncio.create_task(client.start(dc.TOKEN))
    try:
        await asyncio.wait_for(client.ready.wait(), 5)
        assert client.get_channel(int(dc.CHANNEL_ID)).name == "general"  # type: ignore[union-attr]
        assert fake_discord.identifies[0]["intents"] & (1 << 15)
        fake_discord.fail("POST /channels/{cid}/messages", dc.rate_limited(0.05))
        mid = await fake_discord.push_message(
            dc.CHANNEL_ID, "hello <@100000000000000001>", mentions=[dc.BOT_ID]
        )
        sent = await fake_discord.wait_for_sent(dc.CHANNEL_ID)
        assert sent.content == "echo: hello <@100000000000000001>"
        assert (
            sent.message_reference is not None and str(sent.message_reference["message_id"]) == mid
        )
        assert sent.allowed_mentions is not None and sent.allowed_mentions["parse"] == []
        # 429, then retried
        assert len(fake_discord.calls_to(f"POST /channels/{dc.CHANNEL_ID}/messages")) == 2

        await fake_discord.push_message(dc.CHANNEL_ID, "while away", live=False)
        await fake_discord.force_reconnect()
        await fake_discord.wait_for_sent(dc.CHANNEL_ID, count=2)
        assert client.seen == ["hello <@100000000000000001>", "while away"]
        assert (
            fake_discord.identify_count == 1
            and fake_discord.connection_paths[-1] == "/resume-gateway"
        )
    finally:
        await client.close()
        await asyncio.wait_for(task, 5)


async def test_discord_login_failures(fake_discord: dc.FakeDiscord) -> None:
    client = _EchoClient()
    with pytest.raises(discord.LoginFailure):
        await client.start("wrong-token")
    await client.close()
    fake_discord.enabled_privileged_intents = 0
    client = _EchoClient()
    with pytest.raises(discord.PrivilegedIntentsRequired):
        await asyncio.wait_for(client.start(dc.TOKEN), 5)
    await client.close()


async def test_discord_slash_command_interaction_and_thread(fake_discord: dc.FakeDiscord) -> None:
    client = _EchoClient()
    tree = app_commands.CommandTree(client)

    @tree.command(name="ask", description="Ask the agent")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await interaction.response.defer(thinking=True)
        await interaction.edit_original_response(content=f"answer to {question}")
        channel = interaction.channel
        assert isinstance(channel, discord.TextChannel), channel
        thread = await channel.create_thread(name="Chat")
        await thread.send("in thread")

    task = asyncio.create_task(client.start(dc.TOKEN))
    try:
        await asyncio.wait_for(client.ready.wait(), 5)
        await tree.sync()
        assert [c["name"] for c in fake_discord.global_commands] == ["ask"]
        await fake_discord.push_interaction(
            "ask", options=[{"name": "question", "type": 3, "value": "why?"}]
        )
        in_thread = await fake_discord.wait_for_sent(count=2)
        original = fake_discord.sent_messages(dc.CHANNEL_ID)[0]
        assert (original.content, original.via, original.edits) == (
            "answer to why?",
            "interaction",
            ("",),
        )
        assert (
            in_thread.content == "in thread"
            and fake_discord.channels[in_thread.channel_id]["type"] == 12
        )
        assert fake_discord.interaction_responses[0]["type"] == 5
    finally:
        await client.close()
        await asyncio.wait_for(task, 5)


# ------------------------------------------------------------------------------------ buttons
# (approvals)
async def test_telegram_keyboards_and_callback_queries_follow_the_bot_api(
    fake_telegram: tg.FakeTelegram,
) -> None:
    from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

    bot = _bot(fake_telegram)
    # the edit below comes right after the send: not what this is about
    fake_telegram.enforce_retry_after = False
    try:

        def keyboard(data: str) -> InlineKeyboardMarkup:
            button = InlineKeyboardButton(text="Yes", callback_data=data)
            return InlineKeyboardMarkup(inline_keyboard=[[button]])

        # callback_data: 1-64 bytes
        with pytest.raises(TelegramBadRequest, match="BUTTON_DATA_INVALID"):
            await bot.send_message(1001, "pick", reply_markup=keyboard("x" * 65))
        sent = await bot.send_message(1001, "pick", reply_markup=keyboard("d" * 64))
        assert fake_telegram.buttons(1001, sent.message_id) == ["Yes"]
        with pytest.raises(LookupError):
            fake_telegram.tap(1001, sent.message_id, "No")
        query = fake_telegram.tap(1001, sent.message_id, "Yes")
        assert fake_telegram.callback_queries[query]["data"] == "d" * 64
        with pytest.raises(TelegramBadRequest, match="MESSAGE_TOO_LONG"):  # text: 0-200 characters
            await bot.answer_callback_query(query, text="x" * 201)
        await bot.answer_callback_query(query, text="ok")
        with pytest.raises(TelegramBadRequest, match="query ID is invalid"):  # answered once
            await bot.answer_callback_query(query)
        await bot.edit_message_text("done", chat_id=1001, message_id=sent.message_id)
        # an edit without reply_markup drops it
        assert fake_telegram.buttons(1001, sent.message_id) == []
    finally:
        await bot.session.close()


async def test_slack_buttons_follow_block_kit_and_clicks_answer_the_clicker(
    fake_slack: sl.FakeSlack,
) -> None:
    client = AsyncWebClient(token=sl.BOT_TOKEN, base_url=fake_slack.api_base_url)

    def actions(*buttons: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "actions", "elements": list(buttons)}]

    def button(text: str, action_id: str) -> dict[str, Any]:
        return {
            "type": "button",
            "text": {"type": "plain_text", "text": text},
            "action_id": action_id,
            "value": "v",
        }

    with pytest.raises(SlackApiError, match="invalid_blocks"):  # button text: at most 75 characters
        await client.chat_postMessage(channel="C1", text="x", blocks=actions(button("y" * 76, "a")))
    with pytest.raises(SlackApiError, match="invalid_blocks"):  # action_id: unique in the message
        await client.chat_postMessage(
            channel="C1", text="x", blocks=actions(button("A", "a"), button("B", "a"))
        )
    posted = await client.chat_postMessage(
        channel="C1", text="x", blocks=actions(button("A", "a"), button("B", "b"))
    )
    payload = fake_slack.block_actions("C1", posted["ts"], "B", user_id="U2")
    assert payload["type"] == "block_actions" and payload["actions"][0]["action_id"] == "b"
    with pytest.raises(LookupError):
        fake_slack.block_actions("C1", posted["ts"], "C")
    async with httpx2.AsyncClient() as http:
        await http.post(
            payload["response_url"], json={"text": "only you", "response_type": "ephemeral"}
        )
    assert fake_slack.ephemeral_for("U2") == ["only you"] and fake_slack.ephemeral_for("U1") == []
    await client.chat_update(channel="C1", ts=posted["ts"], text="decided")
    assert fake_slack.posted("C1")[0].buttons() == []  # text without blocks: the blocks go


async def test_discord_components_clicks_and_ephemeral_replies(
    fake_discord: dc.FakeDiscord,
) -> None:
    client = _EchoClient()
    clicked: list[discord.Interaction] = []

    @client.event
    async def on_interaction(interaction: discord.Interaction) -> None:
        clicked.append(interaction)
        await interaction.response.defer()  # type 6 for a component
        await interaction.followup.send("only you", ephemeral=True)

    task = asyncio.create_task(client.start(dc.TOKEN))
    try:
        await asyncio.wait_for(client.ready.wait(), 5)
        channel = client.get_partial_messageable(int(dc.CHANNEL_ID))
        view = discord.ui.View(timeout=None)
        view.add_item(discord.ui.Button(label="Yes", custom_id="y" * 101))
        with pytest.raises(discord.HTTPException, match="100"):  # custom_id: at most 100 characters
            await channel.send("pick", view=view)
        view = discord.ui.View(timeout=None)
        view.add_item(discord.ui.Button(label="Yes", custom_id="yes"))
        sent = await channel.send("pick", view=view)
        with pytest.raises(LookupError):
            await fake_discord.click(dc.CHANNEL_ID, str(sent.id), "No")
        await fake_discord.click(dc.CHANNEL_ID, str(sent.id), "Yes", user_id=dc.OTHER_USER_ID)
        await fake_discord.wait_until(lambda: bool(fake_discord.ephemerals()))
        assert [m.content for m in fake_discord.ephemerals(dc.OTHER_USER_ID)] == ["only you"]
        assert fake_discord.ephemerals(dc.USER_ID) == []
        assert clicked[0].data == {"custom_id": "yes", "component_type": 2}
        assert [r["type"] for r in fake_discord.interaction_responses] == [6]
        await sent.edit(content="decided", view=None)
        assert fake_discord.sent_messages(dc.CHANNEL_ID)[0].buttons() == []
    finally:
        await client.close()
        await asyncio.wait_for(task, 5)
