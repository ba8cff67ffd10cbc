"""`gateway prompt`: what a new session would get (optionally by tier, with sources) and a session's
stored bytes.

The CLI runs as a real subprocess with `--home`, the way a user would call it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.prompt.builder import GROUP_NOTE, TOOL_USE_ENFORCEMENT
from tests.fakes.llm import FakeLLM
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config

UNREACHABLE = "http://127.0.0.1:9"  # `gateway prompt` never calls the model


def gateway(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GATEWAY_HOME")
    }
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli.main", "--home", str(home), "prompt", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def expected(home: Path, **kw: str) -> set[str]:
    """The prompt built in-process for today (or
    yesterday, should the run straddle midnight UTC)."""
    gw = gateway_for(home, [])
    try:
        today = datetime.now(UTC).date()
        out = set()
        for day in (today - timedelta(days=1), today):
            out.add(
                gw.prompts.build(
                    platform=kw.get("platform", "cli"),
                    chat_type=kw.get("chat_type", "dm"),
                    model=kw.get("model", gw.llm.model),
                    provider=gw.llm.provider,
                    tool_names=gw.tools.names(),
                    today=day,
                )
                + "\n"
            )
        return out
    finally:
        gw.store.close()


@pytest.fixture
def configured(home: Path) -> Path:
    write_config(home, base_url=UNREACHABLE)
    return home


def test_prompt_for_a_platform_is_what_a_new_session_would_store(configured: Path) -> None:
    result = gateway(configured, "--platform", "telegram")
    assert result.returncode == 0, result.stderr
    assert result.stdout in expected(configured, platform="telegram")
    assert "You are chatting on Telegram." in result.stdout and "4096 characters" in result.stdout
    assert result.stdout.rstrip("\n").endswith("Model: claude-test (provider: anthropic)")
    assert "shared group" not in result.stdout


def test_chat_type_and_model_change_the_prompt(configured: Path) -> None:
    result = gateway(
        configured, "--platform", "discord", "--chat-type", "group", "--model", "gpt-5.1"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout in expected(
        configured, platform="discord", chat_type="group", model="gpt-5.1"
    )
    assert GROUP_NOTE.format(kind="group") in result.stdout
    assert TOOL_USE_ENFORCEMENT in result.stdout  # `auto` enforcement matches gpt models
    assert "Model: gpt-5.1 (provider: anthropic)" in result.stdout
    plain = gateway(configured, "--platform", "discord")
    assert (
        TOOL_USE_ENFORCEMENT not in plain.stdout
        and GROUP_NOTE.format(kind="group") not in plain.stdout
    )


def test_tiers_show_boundaries_and_each_blocks_source(configured: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "AGENTS.md").write_text("Use tabs in this repo.\n", encoding="utf-8")
    (configured / "SOUL.md").write_text("You are Ada, a terse assistant.\n", encoding="utf-8")
    config = configured / "config.yaml"
    config.write_text(
        config.read_text()
        + textwrap.dedent(f"""\
        agent:
          workdir: {workdir}
          system_message: Answer in English.
        platform_hints:
          slack:
            append: Our workspace uses threads for everything.
        """)
    )
    result = gateway(configured, "--platform", "slack", "--tiers")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    heads = [line for line in out.splitlines() if line.startswith("===")]
    assert [h.split(":")[0] for h in heads] == [
        "=== stable tier",
        "=== context tier",
        "=== volatile tier",
        "=== total",
    ]
    assert f"--- identity [{configured / 'SOUL.md'}]" in out
    assert "--- platform_hint [platform_hints.yaml + config override]" in out
    assert "Our workspace uses threads for everything." in out
    assert f"[{workdir / 'AGENTS.md'}]" in out and "Use tabs in this repo." in out
    assert "Answer in English." in out
    assert (
        out.index("=== stable tier")
        < out.index("You are Ada")
        < out.index("=== context tier")
        < out.index("Use tabs")
        < out.index("=== volatile tier")
        < out.index("Conversation started:")
    )
    assert heads[-1] in {
        f"=== total: {len(text) - 1} chars ===" for text in expected(configured, platform="slack")
    }


def test_unknown_platform_is_a_usage_error(configured: Path) -> None:
    result = gateway(configured, "--platform", "myspace")
    assert result.returncode == 2
    assert "invalid choice: 'myspace'" in result.stderr


def test_bad_config_exits_78_with_the_line(home: Path) -> None:
    (home / "config.yaml").write_text(
        "platform_hints:\n  telegram:\n    prepend: nope\n", encoding="utf-8"
    )
    result = gateway(home, "--platform", "telegram")
    assert result.returncode == 78
    assert "config.yaml:3" in result.stderr


async def test_session_prints_the_stored_bytes(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, base_url=fake_llm.base_url)
    (home / "memories").mkdir()
    (home / "memories" / "MEMORY.md").write_text("Café ☕ opens at 7.\n", encoding="utf-8")
    adapter = RecordingAdapter("web")
    gw = gateway_for(home, [adapter])
    try:
        await gw.sessions.submit(inbound("hi", platform="web", chat_id="browser-1"))
        await gw.sessions.wait_idle()
        row = gw.store.active_session("web:dm:browser-1")
    finally:
        await gw.llm.close()
        gw.store.close()
    assert row is not None and row.system_prompt
    # A memory write after the session started must not show up in what it stored.
    (home / "memories" / "MEMORY.md").write_text("Changed later.\n", encoding="utf-8")

    by_key = gateway(home, "--session", "web:dm:browser-1")
    assert by_key.returncode == 0, by_key.stderr
    assert by_key.stdout.encode() == (row.system_prompt + "\n").encode()
    assert "Café ☕ opens at 7." in by_key.stdout and "Changed later" not in by_key.stdout
    by_id = gateway(home, "--session", str(row.id))
    assert by_id.stdout == by_key.stdout


def test_unknown_session_is_an_error(configured: Path) -> None:
    result = gateway(configured, "--session", "telegram:dm:nobody")
    assert result.returncode == 1
    assert result.stderr.strip() == "no stored prompt for session 'telegram:dm:nobody'"


async def _people_home(home: Path, llm: FakeLLM, extra: str = "") -> None:
    """Ada (telegram:1, linked with discord:77) has a
    profile; Bo (telegram:2) has none; each wrote once."""
    write_config(
        home,
        base_url=llm.base_url,
        extra="web:\n  enabled: false\n"
        "telegram:\n  token: t\n  allowed_users: ['1', '2']\n" + extra,
    )
    gw = gateway_for(home, [RecordingAdapter("telegram")])
    try:
        for user, name in (("1", "Ada"), ("2", "Bo")):
            await gw.sessions.submit(
                inbound("hi", platform="telegram", chat_id=user, user_id=user, user_name=name)
            )
        await gw.sessions.wait_idle()
        ada = gw.people.find("telegram:1")
        assert ada is not None
        gw.memory.profile(ada.id).add("Ada is allergic to peanuts")
        discord = gw.people.resolve("discord", "77", now=datetime.now(UTC))
        gw.people.link(ada, discord, gw.memory, by="test")
    finally:
        await gw.llm.close()
        gw.store.close()


async def test_a_persons_prompt_is_what_their_next_session_stores(
    home: Path, fake_llm: FakeLLM
) -> None:
    await _people_home(home, fake_llm)
    shown = gateway(home, "--person", "telegram:1")
    assert shown.returncode == 0, shown.stderr
    assert (
        "USER PROFILE (who the user is) [1% — 26/1375 chars]\nAda is allergic to peanuts\n"
        in shown.stdout
    )
    assert "You are chatting on Telegram." in shown.stdout
    # Ada's next session stores exactly these bytes.
    gw = gateway_for(home, [RecordingAdapter("telegram")])
    try:
        await gw.sessions.submit(inbound("/new", platform="telegram", chat_id="1", user_id="1"))
        await gw.sessions.submit(
            inbound("what do you know?", platform="telegram", chat_id="1", user_id="1")
        )
        await gw.sessions.wait_idle()
        session = gw.store.active_session("telegram:dm:1")
    finally:
        await gw.llm.close()
        gw.store.close()
    assert session is not None and session.system_prompt is not None
    assert shown.stdout == session.system_prompt + "\n"
    # By person id, and on her linked Discord account (the profile is the person's, the platform
    # hint Discord's).
    assert gateway(home, "--person", "1", "--platform", "telegram").stdout == shown.stdout
    on_discord = gateway(home, "--person", "discord:77")
    assert on_discord.returncode == 0 and "You are chatting on Discord." in on_discord.stdout
    assert "Ada is allergic to peanuts" in on_discord.stdout
    # Bo's prompt holds nothing of hers; nor does the prompt without a person.
    for other in (gateway(home, "--person", "telegram:2"), gateway(home, "--platform", "telegram")):
        assert other.returncode == 0, other.stderr
        assert "peanuts" not in other.stdout and "USER PROFILE" not in other.stdout


async def test_a_persons_prompt_in_a_group_follows_the_session_policy(
    home: Path, fake_llm: FakeLLM
) -> None:
    await _people_home(home, fake_llm)
    (home / "memories" / "chats").mkdir(parents=True, exist_ok=True)
    (home / "memories" / "chats" / "telegram%3A-100.md").write_text(
        "Standup is at 9.\n", encoding="utf-8"
    )
    own = gateway(
        home, "--person", "telegram:1", "--chat-type", "group", "--chat", "-100", "--tiers"
    )
    assert own.returncode == 0, own.stderr
    assert "Ada is allergic to peanuts" in own.stdout and "Standup is at 9." in own.stdout
    assert "--- user_snapshot [memories/people/]" in own.stdout
    config = home / "config.yaml"
    config.write_text(config.read_text() + "sessions:\n  group_per_user: false\n", encoding="utf-8")
    shared = gateway(home, "--person", "telegram:1", "--chat-type", "group", "--chat", "-100")
    assert (
        shared.returncode == 0
        and "peanuts" not in shared.stdout
        and "Standup is at 9." in shared.stdout
    )
    assert (
        "one session for everyone in it (sessions.group_per_user is off): no personal profile"
        in shared.stderr
    )


async def test_a_person_who_cannot_be_found_is_a_clear_error(home: Path, fake_llm: FakeLLM) -> None:
    await _people_home(home, fake_llm)
    unknown = gateway(home, "--person", "telegram:999")
    assert (
        unknown.returncode == 1
        and unknown.stderr.strip() == "no person 'telegram:999' (see `gateway users list`)"
    )
    elsewhere = gateway(home, "--person", "2", "--platform", "discord")
    assert elsewhere.returncode == 1
    assert elsewhere.stderr.strip() == "person 2 Bo (telegram:2) has no identity on discord"
    dm_chat = gateway(home, "--person", "1", "--chat", "-100")
    assert dm_chat.returncode == 1 and "--chat names a group or channel" in dm_chat.stderr
