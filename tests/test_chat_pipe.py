"""`gateway chat` end to end: a real subprocess, the real SDKs, a fake model server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.fakes.llm import FakeLLM, Fault, Reply, ToolCall
from tests.helpers import closed_port, llm_url, write_config


async def _chat(home: Path, stdin: str, *options: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli.main",
        "--home",
        str(home),
        *options,
        "chat",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_two_lines_two_replies_same_session(
    home: Path, fake_llm: FakeLLM, provider: str
) -> None:
    write_config(home, provider=provider, base_url=llm_url(fake_llm, provider))
    code, out, err = await _chat(home, "hi\nwhat did I say?\n")
    assert code == 0, err
    # a blank line between
    assert out.splitlines() == ["echo: hi [users=1]", "", "echo: what did I say? [users=2]"]
    second = fake_llm.calls[-1].body
    texts = str(second["messages"])
    # the second request carried the first exchange
    assert "hi" in texts and "echo: hi [users=1]" in texts


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_tool_call_round_trip(home: Path, fake_llm: FakeLLM, provider: str) -> None:
    write_config(home, provider=provider, base_url=llm_url(fake_llm, provider))
    fake_llm.script(
        ToolCall("memory", {"action": "add", "target": "user", "content": "Name is Ada."}),
        Reply("Nice to meet you, Ada. I'll remember that."),
    )
    code, out, err = await _chat(home, "my name is Ada\n")
    assert code == 0, err
    assert out.strip() == "Nice to meet you, Ada. I'll remember that."
    assert "Name is Ada." in (home / "memories" / "people" / "1.md").read_text()
    follow_up = fake_llm.calls[-1].body["messages"]
    if provider == "openai":
        tool_msgs = [m for m in follow_up if m["role"] == "tool"]
        assert len(tool_msgs) == 1 and "saved" in tool_msgs[0]["content"].lower()
    else:
        results = [
            b
            for m in follow_up
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        assert len(results) == 1 and "saved" in str(results[0]["content"]).lower()


async def test_no_model_says_what_to_set_and_exits_non_zero(home: Path) -> None:
    code, out, _err = await _chat(home, "hello\n")
    assert code == 1  # nothing was answered: a script piping into `gateway chat` must notice
    # plain text: no backticks
    assert "No model is configured. Run gateway init, or set ANTHROPIC_API_KEY" in out


async def test_unreachable_model_gives_a_clear_line_exits_1_and_logs_the_turn_id(
    home: Path,
) -> None:
    with closed_port() as port:
        write_config(home, provider="openai", base_url=f"http://127.0.0.1:{port}/v1")
        code, out, err = await _chat(home, "hello\nagain\n", "--log-format", "json")
    assert code == 1
    sorry = (
        "Sorry, I couldn't get an answer from the model just now (the model service is "
        "unavailable). Please try again in a moment."
    )
    assert out.splitlines() == [sorry, "", sorry]
    # docs/operations.md's filter `select(.turn == "t1")` finds the failed turn: the colon after the
    # id is prose
    failed = [r for r in map(json.loads, err.splitlines()) if r["msg"].startswith("turn failed")]
    assert [r["turn"] for r in failed] == ["t1", "t2"]
    assert failed[0]["msg"].startswith("turn failed platform=cli session=1 turn=t1: ")


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_refused_key_says_retrying_will_not_help(home: Path, provider: str) -> None:
    """A wrong key (401) fails the same way every time: the person is told so, with the status only
    (never the provider's own sentence), instead of "try again in a moment"."""
    async with FakeLLM(api_key="the-right-key") as llm:  # write_config sends test-key
        write_config(home, provider=provider, base_url=llm_url(llm, provider))
        code, out, _err = await _chat(home, "hello\n")
    assert code == 1
    assert out.strip() == (
        "Sorry, I couldn't get an answer: the model refused the request (HTTP 401). Trying again "
        "won't help until the gateway's model settings are fixed (gateway doctor says what is "
        "wrong)."
    )  # plain text here: no backticks


async def test_one_answered_turn_among_failures_exits_0(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url)
    fake_llm.script(Fault(400), Reply("fine now"))
    code, out, err = await _chat(home, "first\nsecond\n")
    assert code == 0, err
    assert out.splitlines()[-1] == "fine now"


async def test_only_commands_exit_0(home: Path) -> None:
    code, out, _err = await _chat(home, "/help\n")
    assert code == 0
    assert out.startswith("Commands:")


async def test_new_in_the_terminal_flushes_the_old_session_before_exit(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url)
    fake_llm.script(
        Reply("one"),
        Reply("two"),
        ToolCall("memory", {"action": "add", "target": "user", "content": "Likes short answers."}),
        Reply("(saved)"),
    )
    code, out, err = await _chat(home, "first\nsecond\n/new\n")
    assert code == 0, err
    assert out.splitlines() == [
        "one",
        "",
        "two",
        "",
        "Started a new conversation. I still remember what I saved to memory.",
    ]
    flush_request = fake_llm.anthropic_requests()[2]
    assert "about to be reset" in str(flush_request["messages"][-1])
    assert "Likes short answers." in (home / "memories" / "people" / "1.md").read_text()
    state = (
        sqlite3.connect(home / "state.db")
        .execute("SELECT end_reason, flush_state FROM sessions ORDER BY id")
        .fetchall()
    )
    assert state == [("command", "done")]
