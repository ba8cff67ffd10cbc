"""The shell on Telegram end to end: real aiogram polling against the fake Bot API (inline
keyboards, callback queries), the whole daemon, the fake LLM, and commands run by the real
bubblewrap. What a user sees (the request with the exact command, its buttons), what the model is
told (the tool result, the tools array), and what happened on the host (the workspace, nothing of
the home)."""

from __future__ import annotations

import shutil
import socket
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram.adapter import TelegramAdapter
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import Gateway, build_gateway
from tests.adapters.test_telegram import ALICE, BOB, GROUP, VirtualTime, telegram_yaml
from tests.approvals_support import tool_results
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.telegram import TOKEN, FakeTelegram, SentMessage, server_error
from tests.helpers import require, write_config
from tests.lifecycle_support import FakeClock


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require(
        None if shutil.which("bwrap") else "bubblewrap is not installed (apt install bubblewrap)"
    )


def shell_yaml(options: str = "", admin: int = ALICE) -> str:
    return (
        f"access:\n  admins: ['telegram:{admin}']\n"
        "tools:\n  shell:\n    enabled: true\n" + textwrap.indent(options, "    ")
    )


@asynccontextmanager
async def daemon(
    home: Path,
    llm: FakeLLM,
    tg: FakeTelegram,
    options: str = "",
    extra: str = "",
    admin: int = ALICE,
) -> AsyncIterator[Gateway]:
    shell = shell_yaml(options, admin)
    write_config(home, base_url=llm.base_url, extra=telegram_yaml(tg, shell + extra))
    config = load_config(home, env={})
    assert config.telegram is not None
    virtual = VirtualTime()
    tg.clock = virtual.monotonic
    adapter = TelegramAdapter(config.telegram, submit_retry_delays=(), clock=virtual.monotonic)
    gw = build_gateway(
        config,
        env={},
        adapters=[adapter],
        probe_ollama=False,
        clock=FakeClock(),
        sleep=virtual.sleep,
        monotonic=virtual.monotonic,
    )
    running = Daemon(gw, install_signals=False)
    await running.start()
    try:
        yield gw
    finally:
        await running.stop()


async def request_in(tg: FakeTelegram, chat: int, count: int = 1) -> SentMessage:
    """The count-th request sent to the chat (earlier ones lost their buttons once answered)."""

    def requests() -> list[SentMessage]:
        return [m for m in tg.sent_messages(chat) if "Approval needed" in m.text]

    await tg.wait_until(lambda: len(requests()) >= count and bool(requests()[-1].reply_markup))
    return requests()[count - 1]


def tools_sent(llm: FakeLLM, request: int = 0) -> list[str]:
    return [t["name"] for t in llm.anthropic_requests()[request].get("tools", [])]


def result(llm: FakeLLM, request: int = 1) -> dict[str, Any]:
    """The newest tool result the model's `request`-th request carried."""
    return tool_results(llm.anthropic_requests()[request])[-1]


async def allowed(tg: FakeTelegram, command: str, *, count: int = 1) -> None:
    """Alice is asked about `command` (shown whole) and taps Allow once."""
    request = await request_in(tg, ALICE, count)
    assert f"```sh\n{command}\n```" in request.text or command in request.text
    assert any(e["type"] in ("pre", "code") for e in request.entities)
    assert tg.buttons(ALICE, request.message_id)[0] == "Allow once"
    query = tg.tap(ALICE, request.message_id, "Allow once")
    await tg.wait_for_answer(query)


async def test_an_admins_command_runs_after_allow_and_says_hi_42(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    command = "echo hi-$((6*7))"
    fake_llm.script(ToolCall("shell", {"command": command}), Reply("It printed hi-42."))
    async with daemon(home, fake_llm, tg):
        tg.inject_message(ALICE, "run echo")
        await allowed(tg, command)
        assert (await tg.wait_for_sent(ALICE, count=2)).text == "It printed hi-42."
    assert "shell" in tools_sent(fake_llm)
    text = str(result(fake_llm)["content"])
    assert "Exit code: 0" in text and "hi-42" in text and "Duration:" in text


async def test_deny_never_runs_the_command(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(ToolCall("shell", {"command": "touch ran-it"}), Reply("Not run."))
    async with daemon(home, fake_llm, tg):
        tg.inject_message(ALICE, "touch something")
        request = await request_in(tg, ALICE)
        assert "touch ran-it" in request.text
        await tg.wait_for_answer(tg.tap(ALICE, request.message_id, "Deny"))
        assert (await tg.wait_for_sent(ALICE, count=2)).text == "Not run."
    assert not (home / "workspace" / "ran-it").exists()
    assert "denied" in str(result(fake_llm)["content"])


async def test_a_non_admin_never_gets_the_shell(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    tg = fake_telegram
    fake_llm.script(ToolCall("shell", {"command": "touch bob-was-here"}), Reply("I cannot."))
    async with daemon(home, fake_llm, tg):
        tg.inject_message(BOB, "run touch", user_id=BOB, username="bob", first_name="Bob")
        assert (await tg.wait_for_sent(BOB, count=1)).text == "I cannot."
    assert "shell" not in tools_sent(fake_llm)
    assert "not available" in str(result(fake_llm)["content"])
    assert not (home / "workspace" / "bob-was-here").exists()
    assert not any(m.reply_markup for m in tg.sent_messages(BOB))  # nobody was asked


async def test_a_shared_group_session_never_gets_it(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """One session for the whole group is also the non-admins' session: no shell, even when the
    admin started it."""
    tg = fake_telegram
    fake_llm.script(
        Reply("Hello."), ToolCall("shell", {"command": "touch bob-was-here"}), Reply("I cannot.")
    )
    async with daemon(home, fake_llm, tg, extra="sessions:\n  group_per_user: false\n"):
        tg.inject_message(GROUP, "@gw_test_bot hi", chat_type="supergroup")
        await tg.wait_for_sent(GROUP, count=1)
        tg.inject_message(
            GROUP,
            "@gw_test_bot touch a file",
            chat_type="supergroup",
            user_id=BOB,
            username="bob",
            first_name="Bob",
        )
        assert (await tg.wait_for_sent(GROUP, count=2)).text == "I cannot."
    assert "shell" not in tools_sent(fake_llm, 0) and "shell" not in tools_sent(fake_llm, 1)
    assert "not available" in str(result(fake_llm, 2)["content"])
    assert not any(m.reply_markup for m in tg.sent_messages(GROUP))
    assert not (home / "workspace" / "bob-was-here").exists()


async def test_a_session_that_has_it_runs_it_only_for_an_admins_turn(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Alice's session got the shell while she was an admin; once she is not, her call is refused
    before anyone is asked (the stored tool list still names it)."""
    tg = fake_telegram
    fake_llm.script(
        Reply("Hello."), ToolCall("shell", {"command": "touch ran-it"}), Reply("I may not.")
    )
    async with daemon(home, fake_llm, tg):
        tg.inject_message(ALICE, "hi")
        await tg.wait_for_sent(ALICE, count=1)
    async with daemon(home, fake_llm, tg, admin=BOB):  # Alice is no admin any more
        tg.inject_message(ALICE, "touch it")
        assert (await tg.wait_for_sent(ALICE, count=2)).text == "I may not."
    assert "shell" in tools_sent(fake_llm, 1)  # the session's stored list
    assert "only for the gateway's admins" in str(result(fake_llm, 2)["content"])
    assert not any(m.reply_markup for m in tg.sent_messages(ALICE))
    assert not (home / "workspace" / "ran-it").exists()


async def test_what_the_sandbox_keeps_from_an_admins_commands(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    """The home and config unseen, writes outside the workspace lost, no network, no token in the
    environment, a sleeper killed at timeout_s, 200 KB of output capped: each through the chat."""
    tg = fake_telegram
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    outside = tmp_path / "outside.txt"
    commands = [
        f"ls -la {home}; cat {home}/config.yaml; cat ../config.yaml",
        f"echo x > {outside}; echo y > inside.txt",
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)'",
        "env",
        "sleep 100",
        "head -c 200000 /dev/zero | tr '\\0' a",
    ]
    fake_llm.script(*[ToolCall("shell", {"command": c}) for c in commands], Reply("Done."))
    try:
        async with daemon(home, fake_llm, tg, "timeout_s: 3\nmax_output_chars: 5000\n"):
            tg.inject_message(ALICE, "try things")
            for i, command in enumerate(commands, 1):
                await allowed(tg, command, count=i)
            assert (await tg.wait_for_sent(ALICE, count=len(commands) + 1)).text == "Done."
    finally:
        server.close()
    said = [str(result(fake_llm, i)["content"]) for i in range(1, len(commands) + 1)]
    assert "No such file or directory" in said[0] and TOKEN not in said[0]
    assert "config.yaml" in said[0] and "telegram:" not in said[0]
    assert not outside.exists() and (home / "workspace" / "inside.txt").read_text() == "y\n"
    assert "Exit code: 1" in said[2] and ("refused" in said[2] or "unreachable" in said[2])
    assert TOKEN not in said[3] and "TOKEN" not in said[3] and "PATH=" in said[3]
    assert "killed with all its processes" in said[4]
    assert "output cut" in said[5] and len(said[5]) < 5500


async def test_every_command_is_asked_about_and_never_allowed_for_the_session(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """The shell's requests offer Allow once and Deny only; a forged "session" tap, `/approve CODE
    session` and an allowance stored for the session all leave the next command asking again."""
    tg = fake_telegram
    fake_llm.script(
        ToolCall("shell", {"command": "echo one >> log"}),
        Reply("One."),
        ToolCall("shell", {"command": "echo two >> log"}),
        Reply("Two."),
    )
    async with daemon(home, fake_llm, tg) as gw:
        tg.inject_message(ALICE, "run one")
        first = await request_in(tg, ALICE)
        assert tg.buttons(ALICE, first.message_id) == ["Allow once", "Deny"]
        token = gw.store.all("SELECT token FROM approvals")[0]["token"]
        forged = tg.inject_callback(ALICE, first.message_id, f"ag:{token}:session")
        assert "no longer waiting" in (await tg.wait_for_answer(forged))["text"]
        assert tg.buttons(ALICE, first.message_id) == ["Allow once", "Deny"]  # still asking
        await tg.wait_for_answer(tg.tap(ALICE, first.message_id, "Allow once"))
        assert (await tg.wait_for_sent(ALICE, count=2)).text == "One."
        # even an allowance on record for this session (an older daemon's) does not cover it
        gw.store.execute("UPDATE approvals SET decision = 'session'")
        tg.inject_message(ALICE, "run two")
        second = await request_in(tg, ALICE, count=2)
        assert "echo two" in second.text
        assert tg.buttons(ALICE, second.message_id) == ["Allow once", "Deny"]
        code = gw.store.all("SELECT code FROM approvals WHERE state = 'pending'")[0]["code"]
        tg.inject_message(ALICE, f"/approve {code} session")
        refusal = await tg.wait_for_sent(ALICE, count=4)
        assert "cannot be allowed for the session" in refusal.text
        assert tg.buttons(ALICE, second.message_id) == ["Allow once", "Deny"]
        await tg.wait_for_answer(tg.tap(ALICE, second.message_id, "Allow once"))
        assert (await tg.wait_for_sent(ALICE, count=5)).text == "Two."
        rows = gw.store.all("SELECT decision, state FROM approvals ORDER BY id")
        assert [(r["decision"], r["state"]) for r in rows] == [
            ("session", "done"),
            ("once", "done"),
        ]
    assert (home / "workspace" / "log").read_text() == "one\ntwo\n"


async def test_files_the_command_wrote_arrive_as_documents_and_nothing_outside_the_workspace(
    home: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """`attach` sends what the command wrote as documents, with their bytes and names, through the
    outbox (a 500 on the first upload is retried); links out of the workspace (to the home, to
    /etc/passwd, through `..`), absolute paths, missing, oversized and surplus files are refused
    and said."""
    tg = fake_telegram
    command = (
        f"printf 'report body' > report.txt; ln -s report.txt alias.txt; ln -s {home} home;"
        " ln -s /etc/passwd pw; ln -s ../config.yaml cfg; mkdir sub; ln -s ../.. up;"
        " head -c 1100000 /dev/zero > big.bin"
    )
    attach = [
        "report.txt",
        "alias.txt",
        "home/config.yaml",
        "pw",
        "up/etc/passwd",
        "/etc/passwd",
        "../config.yaml",
        "big.bin",
        "missing.txt",
        "sub",
        "cfg",
    ]
    fake_llm.script(ToolCall("shell", {"command": command, "attach": attach}), Reply("Sent."))
    tg.fail("sendDocument", server_error())
    async with daemon(home, fake_llm, tg, "max_attach_mb: 1\n") as gw:
        tg.inject_message(ALICE, "send me the report")
        request = await request_in(tg, ALICE)
        assert (
            "send these files from the workspace to the chat: report.txt, alias.txt,"
            in request.text
        )
        await tg.wait_for_answer(tg.tap(ALICE, request.message_id, "Allow once"))
        await tg.wait_until(lambda: len(documents(tg)) == 2)
        assert (await tg.wait_for_sent(ALICE, count=4)).text == "Sent."
        rows = gw.store.all("SELECT text, status FROM outbound WHERE kind = 'file' ORDER BY id")
        assert [(r["text"], r["status"]) for r in rows] == [
            ("report.txt", "sent"),
            ("alias.txt", "sent"),
        ]
    sent = documents(tg)
    assert [d["filename"] for d in sent] == ["report.txt", "alias.txt"]
    assert [d["data"] for d in sent] == [b"report body", b"report body"]
    assert tg.pending_faults("senddocument") == 0  # the failed upload was sent again
    said = str(result(fake_llm)["content"])
    assert "- report.txt: sent to the chat as report.txt (11 bytes)" in said
    for refused in ("home/config.yaml", "pw", "up/etc/passwd", "../config.yaml"):
        assert f"- {refused}: not sent (it is not inside the workspace" in said
    assert "- /etc/passwd: not sent (give a path relative to the workspace" in said
    assert "- big.bin: not sent (1.0 MB, over the limit of 1.0 MB)" in said
    assert "- missing.txt: not sent (no such file)" in said
    assert "- sub: not sent (not a regular file)" in said
    assert "- cfg: not sent (at most 10 files a command)" in said
    assert not any(b"root:" in d["data"] or b"telegram" in d["data"] for d in sent)
    assert not list((home / "media").glob("*/sent/*"))  # each copy went once it was sent


def documents(tg: FakeTelegram) -> list[Any]:
    return [m.document for m in tg.sent_messages(ALICE) if m.method == "senddocument"]
