"""An old single-agent home upgrades in place: tests/fixtures/home_before_agents/ was made by the
code from before agents (tests/fixtures/make_home_before_agents.py says how). Its rows become the
agent `main`'s and the account `default`'s, keys and stored prompts byte for byte as they were, a
running conversation goes on with the same prompt, and a new session's prompt is what the old code
built."""

from __future__ import annotations

import io
import shutil
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.cli.main import main
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway
from gateway.store.database import Store
from tests.fakes.llm import FakeLLM
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config
from tests.lifecycle_support import FakeClock

FIXTURE = Path(__file__).parent / "fixtures" / "home_before_agents"
CONFIG = """\
web:
  enabled: false
telegram:
  token: '1000:AAtoken-of-the-home-before-agents-0000'
  allowed_users: ['1001']
"""


# A minute after the fixture's last message: on the real clock the sessions would have reached
# their daily reset (04:00) or idle end, and the upgrade would start new ones.
UPGRADED_AT = datetime(2026, 12, 1, 23, 40, tzinfo=UTC)


def old_home(home: Path, llm: FakeLLM) -> None:
    shutil.copytree(FIXTURE, home, dirs_exist_ok=True)
    write_config(home, provider="anthropic", base_url=llm.base_url, extra=CONFIG)


def rows(home: Path, sql: str) -> list[tuple[Any, ...]]:
    store = Store(home / "state.db")
    try:
        return [tuple(r) for r in store.all(sql)]
    finally:
        store.close()


@asynccontextmanager
async def upgraded(home: Path) -> AsyncIterator[tuple[Gateway, RecordingAdapter]]:
    telegram = RecordingAdapter("telegram")
    gw = gateway_for(home, [telegram, RecordingAdapter("web")], clock=FakeClock(UPGRADED_AT))
    daemon = Daemon(gw, install_signals=False)
    await daemon.start()
    try:
        yield gw, telegram
    finally:
        await daemon.stop()


def system_text(body: dict[str, Any]) -> str:
    return "".join(block["text"] for block in body["system"])


async def test_an_old_home_keeps_its_keys_and_stored_prompts(home: Path, fake_llm: FakeLLM) -> None:
    conn = sqlite3.connect(FIXTURE / "state.db")
    before = conn.execute(
        "SELECT id, key, system_prompt, tool_list_id FROM sessions ORDER BY id"
    ).fetchall()
    conn.close()
    keys = ["telegram:dm:1001", "telegram:group:-100777:1001", "web:dm:owner"]
    assert [r[1] for r in before] == keys
    old_home(home, fake_llm)
    async with upgraded(home) as (gw, telegram):
        after = gw.store.all(
            "SELECT id, key, system_prompt, tool_list_id, agent, account FROM sessions ORDER BY id"
        )
        assert [tuple(r)[:4] for r in after] == before  # byte for byte
        assert {(r["agent"], r["account"]) for r in after} == {("main", "default")}
        assert "0034_agents" in gw.store.migrations_done()
        await telegram.submit(
            inbound(
                "and coffee?",
                platform="telegram",
                chat_id="1001",
                user_id="1001",
                message_id="after-the-upgrade",
            )
        )
        await gw.sessions.wait_idle()
        request = fake_llm.anthropic_requests()[-1]
        assert system_text(request) == before[0][2]  # the same cached prefix
        assert "I drink green tea" in str(request["messages"])  # the same conversation goes on
        assert telegram.texts("1001")[0].startswith("echo: and coffee?")
        assert len(gw.store.all("SELECT id FROM sessions")) == 3
        job = gw.store.one("SELECT agent, account, platform, chat_id FROM jobs")
        assert job is not None and tuple(job) == ("main", "default", "telegram", "1001")
        assert gw.roles is not None and gw.roles.pairing.is_approved("telegram", "2002")


async def test_an_old_home_builds_new_prompts_as_before(home: Path, fake_llm: FakeLLM) -> None:
    old_home(home, fake_llm)
    out = io.StringIO()
    with redirect_stdout(out):
        assert (
            main(
                [
                    "--home",
                    str(home),
                    "prompt",
                    "--person",
                    "telegram:1001",
                    "--platform",
                    "telegram",
                ]
            )
            == 0
        )

    def undated(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("Conversation started:")]

    assert undated(out.getvalue()) == undated((FIXTURE / "prompt.txt").read_text(encoding="utf-8"))
    assert "Drinks green tea." in out.getvalue()  # the agent main's memory is the home's memories/
    assert not (home / "memories" / "agents").exists()  # nothing moved, nothing made


async def test_an_old_home_still_sees_a_redelivered_message_as_a_duplicate(
    home: Path, fake_llm: FakeLLM
) -> None:
    old_home(home, fake_llm)
    stored = rows(home, "SELECT platform, chat_id, platform_message_id FROM inbound ORDER BY id")[0]
    async with upgraded(home) as (_, telegram):
        again = inbound(
            "I drink green tea",
            platform="telegram",
            chat_id=stored[1],
            user_id="1001",
            message_id=stored[2],
        )
        result = await telegram.submit(again)
        assert result.outcome.value == "duplicate"
