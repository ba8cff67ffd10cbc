"""`agents:`, `bindings:` and bot accounts in config.yaml: what an account takes from its section,
what an agent takes from the top-level settings, where bindings send a message, and every mistake
reported with its line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gateway.agent.tools.policy import check_tool_names
from gateway.config.agents import Bindings, Place, agent_config, check_agents, default_agent
from gateway.config.platforms import TelegramConfig, platform_accounts
from gateway.config.settings import Config, load_config
from gateway.errors import ConfigError


def config(home: Path, text: str) -> Config:
    (home / "config.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    return load_config(home, env={"T1": "1:aa", "T2": "2:bb"})


def problems(home: Path, text: str) -> str:
    """Every error `config check` would print for this file."""
    try:
        loaded = config(home, text)
        check_tool_names(loaded)
        check_agents(loaded)
    except ConfigError as exc:
        return str(exc)
    raise AssertionError("no problem found")


def test_an_account_takes_its_sections_keys_but_never_its_token(home: Path) -> None:
    loaded = config(
        home,
        """\
        telegram:
          token: ${T1}
          api_server: http://bots.example
          allowed_users: ['1']
          accounts:
            family:
              token: ${T2}
              allowed_users: ['1', '2']
            kids:
              token: '3:cc'
              api_server: http://other.example
        """,
    )
    accounts = platform_accounts(loaded.telegram)
    assert list(accounts) == ["default", "family", "kids"]
    default, family, kids = (accounts[n] for n in ("default", "family", "kids"))
    assert isinstance(default, TelegramConfig) and isinstance(family, TelegramConfig)
    assert isinstance(kids, TelegramConfig)
    assert default.token.value == "1:aa" and family.token.value == "2:bb"
    assert family.api_server == "http://bots.example" and family.allowed_users == ("1", "2")
    assert kids.api_server == "http://other.example" and kids.allowed_users == ("1",)


def test_a_section_of_accounts_alone_has_no_default_account(home: Path) -> None:
    loaded = config(
        home,
        """\
        slack:
          accounts:
            work: {bot_token: xoxb-1, app_token: xapp-1}
        """,
    )
    assert list(platform_accounts(loaded.slack)) == ["work"]


HERE = "  # <- here"  # marks the line a mistake is reported at


def case(message: str, *lines: str) -> tuple[str, str]:
    return "\n".join(lines) + "\n", message


def where(home: Path) -> int:
    lines = (home / "config.yaml").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.endswith(HERE))


@pytest.mark.parametrize(
    "text, message",
    [
        case(
            "telegram.accounts.family.token: required key is missing",
            "telegram:",
            "  accounts:",
            "    family:",
            "      api_server: http://x" + HERE,
        ),
        case(
            "telegram.token: required key is missing (or give",
            "telegram:",
            "  allowed_users: ['1']" + HERE,
        ),
        case(
            "telegram.accounts: 'Family' cannot name an account",
            "telegram:",
            "  token: ${T1}",
            "  accounts:",
            "    Family:" + HERE,
            "      token: ${T2}",
        ),
        case(
            "the section's own token is the account `default`",
            "telegram:",
            "  token: ${T1}",
            "  accounts:",
            "    default:" + HERE,
            "      token: ${T2}",
        ),
        case(
            "two accounts have the same token",
            "discord:",
            "  token: ${T1}",
            "  accounts:",
            "    ops:" + HERE,
            "      token: ${T1}",
        ),
        case(
            "listen on the same listen_host",
            "slack:",
            "  mode: http",
            "  listen_port: 3000",
            "  accounts:",
            "    a: {bot_token: x1, signing_secret: s1}" + HERE,
            "    b: {bot_token: x2, signing_secret: s2}",
        ),
        case(
            "discord.shards.ids: shard ids run from 0 to 1",
            "discord:",
            "  token: ${T1}",
            "  shards: {count: 2, ids: [0, 2]}" + HERE,
        ),
    ],
)
def test_account_mistakes_are_named_with_their_line(home: Path, text: str, message: str) -> None:
    found = problems(home, text)
    assert f"config.yaml:{where(home)}: " in found and message in found, found


def test_discord_shards_auto_or_a_share(home: Path) -> None:
    auto = config(home, "discord:\n  token: ${T1}\n  shards: auto\n").discord
    assert auto is not None and auto.shards == "auto"
    share = config(home, "discord:\n  token: ${T1}\n  shards: {count: 4, ids: [1, 3]}\n").discord
    assert share is not None and not isinstance(share.shards, str) and share.shards is not None
    assert share.shards.shard_ids == (1, 3)


AGENTS = """\
    agent:
      system_message: Be brief.
      tools: [memory, session_search]
    sessions:
      busy: queue
    platform_hints:
      telegram: Top-level hint.
      slack: Slack hint.
    agents:
      work:
        identity: You are Ledger.
        tools: [memory]
        busy: interrupt
        platform_hints:
          telegram: {replace: Work hint.}
        session_reset: {mode: idle, idle_minutes: 30}
      home:
        default: true
    bindings:
      - {agent: work, platform: slack}
      - {agent: work, platform: telegram, chat: '-100123'}
      - {agent: main, chat_type: group}
    """


def test_an_agent_changes_what_it_sets_and_keeps_the_rest(home: Path) -> None:
    loaded = config(home, AGENTS)
    assert agent_config(loaded, "main") is loaded and agent_config(loaded, "home") is not loaded
    work = agent_config(loaded, "work")
    assert work.agent.tools == ("memory",) and work.agent.system_message == "Be brief."
    assert work.sessions.busy == "interrupt" and work.session_reset.mode == "idle"
    assert work.session_reset.idle_minutes == 30 and work.session_reset.at_hour == 4  # whole
    assert work.platform_hints["telegram"].replace == "Work hint."
    assert work.platform_hints["slack"].append == "Slack hint."
    assert agent_config(loaded, "home").agent.tools == ("memory", "session_search")


def test_bindings_first_match_then_the_default_agent(home: Path) -> None:
    loaded = config(home, AGENTS)
    bindings = Bindings(loaded)
    assert default_agent(loaded) == "home"
    assert bindings.agent_for(Place("slack", "default", "C1", "channel")) == "work"
    assert bindings.agent_for(Place("telegram", "default", "-100123", "group")) == "work"
    assert bindings.agent_for(Place("telegram", "default", "-100999", "group")) == "main"
    in_thread = Place("telegram", "default", "-100999", "group", thread_id="-100123")
    assert bindings.agent_for(in_thread) == "work"
    assert bindings.agent_for(Place("telegram", "default", "42", "dm")) == "home"


def test_without_agents_everything_is_main(home: Path) -> None:
    loaded = config(home, "telegram:\n  token: ${T1}\n")
    assert default_agent(loaded) == "main"
    assert Bindings(loaded).agent_for(Place("telegram", "default", "42", "dm")) == "main"
    check_agents(loaded)


@pytest.mark.parametrize(
    "text, message",
    [
        case(
            "agents.b.default: only one agent can be the default (already a)",
            "agents:",
            "  a: {default: true}",
            "  b: {default: true}" + HERE,
        ),
        case("agents.a.soul: no such file", "agents:", "  a: {soul: souls/a.md}" + HERE),
        case(
            "agents.a.identity: give `soul` (a file) or `identity` (the text), not both",
            "agents:",
            "  a: {soul: a.md, identity: hi}" + HERE,
        ),
        case(
            "agents.a.tools[0]: unknown tool 'memroy'", "agents:", "  a: {tools: [memroy]}" + HERE
        ),
        case("agents.a.model: no model named 'fast'", "agents:", "  a: {model: fast}" + HERE),
        case(
            "bindings[0].account: an account belongs to a platform",
            "bindings:",
            "  - {agent: main, account: x}" + HERE,
        ),
        case(
            "bindings[0].platform: discord is not configured",
            "bindings:",
            "  - {agent: main, platform: discord}" + HERE,
        ),
        case("bindings[0].agent: no agent named 'wrok'", "bindings:", "  - {agent: wrok}" + HERE),
        case(
            "bindings[0].account: no telegram account named 'famly' (accounts: default, family)",
            "telegram:",
            "  token: ${T1}",
            "  accounts:",
            "    family: {token: '${T2}'}",
            "bindings:",
            "  - {agent: main, platform: telegram, account: famly}" + HERE,
        ),
        case(
            "agents.Work: 'Work' cannot name an agent", "agents:", "  Work: {identity: hi}" + HERE
        ),
    ],
)
def test_agent_and_binding_mistakes_are_named_with_their_line(
    home: Path, text: str, message: str
) -> None:
    found = problems(home, text)
    assert f"config.yaml:{where(home)}: " in found and message in found, found


def test_an_agents_soul_is_read_relative_to_the_home(home: Path) -> None:
    (home / "souls").mkdir()
    (home / "souls" / "a.md").write_text("You are A.", encoding="utf-8")
    check_agents(config(home, "agents:\n  a: {soul: souls/a.md}\n"))  # found from the home
    (home / "souls" / "a.md").unlink()
    with pytest.raises(ConfigError, match=r"agents\.a\.soul: no such file"):
        check_agents(config(home, "agents:\n  a: {soul: souls/a.md}\n"))
