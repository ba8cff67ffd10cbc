"""Two agents behind two Telegram bots in one gateway, end to end: real aiogram polling against two
fake Bot APIs (one per bot token), the whole gateway and the fake LLM. What a user sees: each bot
answers through itself with its own identity; what one agent saves never reaches the other; stored
prompts survive a restart byte for byte."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.main import main
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway, platform_adapters
from gateway.sessions.commands import MODEL_TAP, MODEL_USAGE
from tests.adapters.test_telegram import VirtualTime
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.telegram import FakeTelegram
from tests.helpers import write_config

ALICE, BOB = 1001, 1002
HOME_TOKEN = "5001:AAhome-bot-token-000000000000000000000"
FAMILY_TOKEN = "5002:AAfamily-bot-token-00000000000000000"
HOME_IDENTITY = "You are Quill, Alice's own assistant for her work and private life."
FAMILY_IDENTITY = "You are Hearth, the assistant the whole family shares."


def agents_yaml(
    personal: FakeTelegram,
    family: FakeTelegram,
    extra: str = "",
    home_keys: str = "",
    family_keys: str = "",
) -> str:
    """Two bot accounts (the platform's settings apply to both; each has its own token and
    api_server, as each bot is its own fake) bound to two agents; the family bot lets Bob in too.
    `home_keys` and `family_keys` are more lines of each agent's settings."""
    return f"""\
web:
  enabled: false
telegram:
  polling_timeout: 1
  allowed_users: ['{ALICE}']
  accounts:
    personal:
      token: '{HOME_TOKEN}'
      api_server: {personal.base_url}
    family:
      token: '{FAMILY_TOKEN}'
      api_server: {family.base_url}
      allowed_users: ['{ALICE}', '{BOB}']
agents:
  home:
    identity: {HOME_IDENTITY}
{home_keys}  family:
    identity: {FAMILY_IDENTITY}
{family_keys}bindings:
  - {{agent: home, platform: telegram, account: personal}}
  - {{agent: family, platform: telegram, account: family}}
{extra}"""


@dataclass
class Bots:
    personal: FakeTelegram
    family: FakeTelegram


@asynccontextmanager
async def two_bots() -> AsyncIterator[Bots]:
    personal = FakeTelegram(token=HOME_TOKEN, bot_id=5001, bot_username="quill_bot")
    family = FakeTelegram(token=FAMILY_TOKEN, bot_id=5002, bot_username="hearth_bot")
    await personal.start()
    await family.start()
    try:
        yield Bots(personal, family)
    finally:
        await personal.stop()
        await family.stop()


@asynccontextmanager
async def running(
    home: Path, llm: FakeLLM, bots: Bots, *extra: str, web: bool = False
) -> AsyncIterator[Gateway]:
    """The daemon with the two bots; `extra`: agents_yaml's more settings; `web`: its web server
    on a port the OS picks, then written into config.yaml (where the CLI looks for /status)."""
    text = agents_yaml(bots.personal, bots.family, *extra)
    write_config(
        home,
        provider="anthropic",
        base_url=llm.base_url,
        extra=text.replace("enabled: false", "port: 0") if web else text,
    )
    config = load_config(home, env={})
    virtual = VirtualTime()
    bots.personal.clock = bots.family.clock = virtual.monotonic
    adapters = platform_adapters(config, monotonic=virtual.monotonic)
    gw = build_gateway(
        config,
        env={},
        adapters=adapters,
        probe_ollama=False,
        sleep=virtual.sleep,
        monotonic=virtual.monotonic,
    )
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    if web:
        path = home / "config.yaml"
        path.write_text(path.read_text().replace("port: 0", f"port: {daemon.web_port}"))
    try:
        yield gw
    finally:
        await daemon.stop()


def system_text(body: dict[str, Any]) -> str:
    system = body["system"]
    return system if isinstance(system, str) else "".join(block["text"] for block in system)


def prompts(gw: Gateway) -> dict[str, str]:
    """Each agent's stored prompt bytes."""
    rows = gw.store.all("SELECT agent, system_prompt FROM sessions")
    return {r["agent"]: r["system_prompt"] for r in rows}


async def say(gw: Gateway, bot: FakeTelegram, text: str, user: int = ALICE) -> str:
    """A DM to `bot`; returns the text of the reply the bot sent."""
    before = len(bot.sent_messages(user))
    bot.inject_message(
        user,
        text,
        user_id=user,
        username="alice" if user == ALICE else "bob",
        first_name="Alice" if user == ALICE else "Bob",
    )
    sent = await bot.wait_for_sent(user, count=before + 1)
    await gw.sessions.wait_idle()
    return sent.text


async def test_each_bot_answers_through_itself_as_its_own_agent(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with two_bots() as bots, running(home, fake_llm, bots) as gw:
        assert await say(gw, bots.personal, "hello quill") == "echo: hello quill [users=1]"
        quill = system_text(fake_llm.anthropic_requests()[-1])
        assert await say(gw, bots.family, "hello hearth") == "echo: hello hearth [users=1]"
        hearth = system_text(fake_llm.anthropic_requests()[-1])
        assert HOME_IDENTITY in quill and FAMILY_IDENTITY not in quill
        assert FAMILY_IDENTITY in hearth and HOME_IDENTITY not in hearth
        # each bot sent exactly its own answer: nothing crossed to the other token
        assert bots.personal.sent_texts(ALICE) == ["echo: hello quill [users=1]"]
        assert bots.family.sent_texts(ALICE) == ["echo: hello hearth [users=1]"]
        rows = gw.store.all("SELECT key, agent, account FROM sessions ORDER BY id")
        assert [tuple(r) for r in rows] == [
            (f"home/telegram@personal:dm:{ALICE}", "home", "personal"),
            (f"family/telegram@family:dm:{ALICE}", "family", "family"),
        ]
        # Bob is on the family bot's list only: the personal bot gives him a pairing code, no turn
        assert "pairing code" in await say(gw, bots.personal, "let me in", user=BOB)
        assert await say(gw, bots.family, "hi hearth", user=BOB) == "echo: hi hearth [users=1]"


async def test_a_fact_saved_through_one_agent_reaches_only_its_next_session(
    home: Path, fake_llm: FakeLLM
) -> None:
    save = {"action": "add", "target": "user", "content": "Alice's dog is Rex."}
    fake_llm.script(ToolCall("memory", save), Reply("Noted."))
    async with two_bots() as bots, running(home, fake_llm, bots) as gw:
        assert await say(gw, bots.personal, "remember: my dog is Rex") == "Noted."
        assert "Saved to the user profile" in str(fake_llm.anthropic_requests()[1]["messages"][-1])
        await say(gw, bots.personal, "/new")
        await say(gw, bots.personal, "what is my dog called?")
        home_next = system_text(fake_llm.anthropic_requests()[-1])
        assert "Alice's dog is Rex." in home_next  # the home agent's next session
        await say(gw, bots.family, "what is my dog called?")
        family = system_text(fake_llm.anthropic_requests()[-1])
        assert FAMILY_IDENTITY in family and "Rex" not in family  # the family agent never heard it
        profiles = sorted(p.relative_to(home).as_posix() for p in home.rglob("people/*.md"))
        assert profiles == ["memories/agents/home/people/1.md"]


async def test_stored_prompts_stay_byte_identical_across_a_restart(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with two_bots() as bots:
        async with running(home, fake_llm, bots) as gw:
            await say(gw, bots.personal, "one")
            await say(gw, bots.family, "one")
            stored = prompts(gw)
        async with running(home, fake_llm, bots) as gw:
            await say(gw, bots.personal, "two")
            assert system_text(fake_llm.anthropic_requests()[-1]) == stored["home"]
            await say(gw, bots.family, "two")
            assert system_text(fake_llm.anthropic_requests()[-1]) == stored["family"]
            assert prompts(gw) == stored and len(gw.store.all("SELECT id FROM sessions")) == 2


async def test_agents_list_shows_both_agents_and_both_bots(home: Path, fake_llm: FakeLLM) -> None:
    async with two_bots() as bots:
        write_config(
            home,
            provider="anthropic",
            base_url=fake_llm.base_url,
            extra=agents_yaml(bots.personal, bots.family),
        )
        out = io.StringIO()
        with redirect_stdout(out):
            assert main(["--home", str(home), "agents", "list"]) == 0
    text = out.getvalue()
    assert (
        "  home: model anthropic/claude-test (the gateway's); identity agents.home.identity; "
        "memory memories/agents/home/ (profiles: own)" in text
    )
    assert "  family: model anthropic/claude-test" in text and "  main (default):" in text
    assert "  1. platform telegram, account personal → home" in text
    assert "  telegram@personal: direct messages → home" in text
    assert "  telegram@family: direct messages → family" in text


def models_yaml(llm: FakeLLM) -> str:
    """Two more models; the agent `home` may switch to `fast` only, `family` to `cheap` only."""
    model = (
        f"    provider: openai\n    base_url: {llm.openai_base_url}\n"
        "    api_key: test-key\n    max_retries: 0\n"
    )
    return (
        f"access:\n  admins: ['telegram:{ALICE}']\n"
        f"models:\n  fast:\n    name: gpt-fast\n{model}  cheap:\n    name: gpt-cheap\n{model}"
        "voice:\n  replies: never\n  tts:\n    provider: espeak\n"
    )


async def test_model_and_voice_choices_stay_with_their_bot_and_agent(
    home: Path, fake_llm: FakeLLM
) -> None:
    extra = (models_yaml(fake_llm), "    models: [fast]\n", "    models: [cheap]\n")
    async with two_bots() as bots, running(home, fake_llm, bots, *extra) as gw:
        listed = await say(gw, bots.personal, "/model")
        assert "• fast: gpt-fast (openai)" in listed and "cheap" not in listed
        listed = await say(gw, bots.family, "/model")
        assert "• cheap: gpt-cheap (openai)" in listed and "fast" not in listed
        # the refusal lists the models again, without buttons: it says how to switch by name
        assert await say(gw, bots.family, "/model fast") == (
            "There is no model called 'fast' here.\n" + listed.replace(MODEL_TAP, MODEL_USAGE)
        )
        assert (await say(gw, bots.personal, "/model fast")).startswith("Switched to fast")
        assert await say(gw, bots.personal, "now?") == "echo: now? [users=1]"
        assert [r["model"] for r in fake_llm.openai_requests()] == ["gpt-fast"]
        await say(gw, bots.family, "and you?")  # the other agent's conversation kept its model
        assert fake_llm.anthropic_requests()[-1]["model"] == "claude-test"
        assert len(fake_llm.openai_requests()) == 1

        assert (await say(gw, bots.family, "/voice on")).startswith("Voice replies are on")
        await say(gw, bots.family, "speak")
        await bots.family.wait_until(lambda: len(bots.family.voice_notes(ALICE)) == 1)
        assert (await say(gw, bots.personal, "/voice")).startswith(
            "Voice replies follow the gateway's setting: answers come as text only."
        )
        await say(gw, bots.personal, "quiet")
        assert bots.personal.voice_notes() == []  # the other bot in the same chat stays text
        rows = gw.store.all("SELECT platform, account, chat_id, mode FROM chat_voice")
        assert [tuple(r) for r in rows] == [("telegram", "family", str(ALICE), "on")]


async def test_agents_list_shows_each_bots_health_from_the_running_daemon(
    home: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    async with two_bots() as bots, running(home, fake_llm, bots, web=True) as gw:
        assert await say(gw, bots.family, "hi") == "echo: hi [users=1]"
        capsys.readouterr()
        # the CLI asks the daemon's /status, which answers on this loop: the CLI runs in a thread
        assert await asyncio.to_thread(main, ["--home", str(home), "agents", "list"]) == 0
    text = capsys.readouterr().out
    assert "Accounts:\n" in text and "health unknown" not in text
    assert "  telegram@personal: direct messages → home; running since " in text
    assert "  telegram@family: direct messages → family; running since " in text
    assert "  web: direct messages → main; running since " in text


async def test_gateway_prompt_shows_the_named_agents_prompt(
    home: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    async with two_bots() as bots:
        write_config(
            home,
            provider="anthropic",
            base_url=fake_llm.base_url,
            extra=agents_yaml(bots.personal, bots.family),
        )
    for agent, mine, theirs in (
        ("home", HOME_IDENTITY, FAMILY_IDENTITY),
        ("family", FAMILY_IDENTITY, HOME_IDENTITY),
    ):
        args = ["--home", str(home), "prompt", "--agent", agent, "--platform", "telegram"]
        assert main(args) == 0
        text = capsys.readouterr().out
        assert mine in text and theirs not in text and "Telegram" in text
    assert main(["--home", str(home), "prompt", "--agent", "work"]) == 1
    assert "no agent named 'work' (agents: main, home, family)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "binding, key, message",
    [
        ("{agent: work, platform: telegram}", "bindings[0].agent", "no agent named 'work'"),
        (
            "{agent: home, platform: telegram, account: kids}",
            "bindings[0].account",
            "no telegram account named 'kids'",
        ),
    ],
)
def test_config_check_names_a_binding_to_nothing_with_file_and_line(
    home: Path, capsys: pytest.CaptureFixture[str], binding: str, key: str, message: str
) -> None:
    path = write_config(
        home,
        extra=f"""\
        telegram:
          accounts:
            personal: {{token: '{HOME_TOKEN}'}}
        agents:
          home: {{identity: hi}}
        bindings:
          - {binding}
        """,
    )
    assert main(["--home", str(home), "config", "check"]) == 78
    line = path.read_text().splitlines().index(f"  - {binding}") + 1
    assert f"{path}:{line}: {key}: {message}" in capsys.readouterr().err
