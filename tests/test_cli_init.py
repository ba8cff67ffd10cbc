"""`gateway init`: the written config.yaml loads with `gateway config check`, holds what was chosen
(and no secret), is never overwritten without --force; the questions re-ask bad answers, send one
test request to the model, and end with the next steps. Run as a subprocess, as a newcomer would run
it."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config.settings import load_config
from tests.daemon_proc import GATEWAY, free_port
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM

TOKENS = {
    "TG_TOKEN": "123456:tg-secret-value",
    "DC_TOKEN": "dc-secret-value",
    "SL_BOT": "xoxb-secret-value",
    "SL_APP": "xapp-secret-value",
    "MY_KEY": "sk-secret-value",
}


def base_env(home: Path) -> dict[str, str]:
    """What `gateway` runs with here: no developer's environment, and a web port from the OS (so
    init never picks, nor probes, 8765, where the developer's own gateway may listen)."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home.parent),
        "GATEWAY_WEB_PORT": str(free_port()),
    }


def gateway(
    home: Path,
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GATEWAY, "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**base_env(home), **(env or {})},
        timeout=120,
        check=False,
    )


async def gateway_async(
    home: Path,
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The same, without blocking the event loop that serves the fake model."""
    proc = await asyncio.create_subprocess_exec(
        GATEWAY,
        "--home",
        str(home),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**base_env(home), **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 120)
    return subprocess.CompletedProcess([], proc.returncode or 0, out.decode(), err.decode())


def test_yes_writes_a_config_that_config_check_accepts(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    done = gateway(
        home,
        "init",
        "--yes",
        "--provider",
        "openai",
        "--model",
        "gpt-4.1-mini",
        "--base-url",
        "https://llm.example/v1",
        "--api-key-env",
        "MY_KEY",
        "--telegram-token-env",
        "TG_TOKEN",
        "--discord-token-env",
        "DC_TOKEN",
        "--slack-bot-token-env",
        "SL_BOT",
        "--slack-app-token-env",
        "SL_APP",
        "--allow",
        "telegram:111",
        "--allow",
        "telegram:222",
        "--allow",
        "slack:U123",
        "--admin",
        "telegram:111",
        "--web-port",
        str(port),
    )
    assert done.returncode == 0, done.stderr
    path = home / "config.yaml"
    out = done.stdout.splitlines()
    assert out[0] == "skip model     MY_KEY is not set here, so no test request"
    assert out[1] == f"wrote {path}"
    assert out[3] == "Next steps:"
    assert out[4] == (
        "  1. set MY_KEY, TG_TOKEN, DC_TOKEN, SL_BOT, SL_APP in the shell that runs the gateway "
        "(export NAME=value), or in the service's env file once it runs as one"
    )
    assert f"`gateway --home {home} config check` validates the file" in out[5]
    assert f"`gateway --home {home} run` starts it and prints the web chat's login link" in out[6]
    assert path.stat().st_mode & 0o777 == 0o600 and home.stat().st_mode & 0o777 == 0o700
    assert (home / "memories").is_dir() and (home / "skills").is_dir()

    check = gateway(home, "config", "check", env=TOKENS)
    assert (check.returncode, check.stdout) == (0, "ok\n"), check.stderr
    text = path.read_text()
    assert not any(secret in text for secret in TOKENS.values())
    assert text.startswith("# agent-gateway configuration, written by `gateway init`")
    config = load_config(home, env=TOKENS)
    assert config.model is not None
    assert (
        config.model.provider,
        config.model.name,
        config.model.base_url,
        config.model.api_key_env,
    ) == ("openai", "gpt-4.1-mini", "https://llm.example/v1", "MY_KEY")
    assert config.telegram is not None and config.telegram.token.value == TOKENS["TG_TOKEN"]
    assert config.telegram.allowed_users == ("111", "222")
    assert config.discord is not None and config.discord.allowed_users == ()
    assert config.slack is not None and config.slack.app_token is not None
    assert (config.slack.bot_token.value, config.slack.app_token.value) == (
        TOKENS["SL_BOT"],
        TOKENS["SL_APP"],
    )
    assert config.slack.allowed_users == ("U123",)
    assert (config.access.unknown_dm, config.access.admins) == ("pair", ("telegram:111",))
    assert (config.web.host, config.web.port) == ("127.0.0.1", port)


def test_a_config_is_never_overwritten_without_force(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("web:\n  port: 1234\n")
    args = (
        "init",
        "--yes",
        "--provider",
        "anthropic",
        "--model",
        "claude-sonnet-4-5",
        "--no-pairing",
    )
    refused = gateway(home, *args)
    assert refused.returncode == 1
    assert f"{home}/config.yaml already exists; not touching it" in refused.stderr
    assert (home / "config.yaml").read_text() == "web:\n  port: 1234\n"

    # Without --yes nothing was asked to change: the README's one-liner, run a second time, goes on
    # to `gateway run` with the config it has instead of stopping at init.
    again = subprocess.run(
        [
            "sh",
            "-c",
            f"{sys.executable} -m gateway.cli.main --home {home} init && echo next-command-ran",
        ],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert again.returncode == 0 and again.stdout == "next-command-ran\n", again.stderr
    assert f"{home}/config.yaml already exists; not touching it" in again.stderr
    assert (home / "config.yaml").read_text() == "web:\n  port: 1234\n"

    forced = gateway(home, *args, "--force")
    assert forced.returncode == 0, forced.stderr
    backups = list(home.glob("config.yaml.*.bak"))
    assert len(backups) == 1 and backups[0].read_text() == "web:\n  port: 1234\n"
    assert f"kept the old config as {backups[0]}" in forced.stdout
    config = load_config(home, env={})
    assert config.model is not None and config.model.api_key_env == "ANTHROPIC_API_KEY"
    assert config.access.unknown_dm == "ignore" and config.telegram is None


def test_yes_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cases = {
        ("--provider", "openai"): "--yes needs --provider (anthropic or openai) and --model NAME",
        (
            "--provider",
            "openai",
            "--model",
            "m",
            "--api-key-env",
            "MY-KEY",
        ): "'MY-KEY' is not an environment variable",
        ("--provider", "openai", "--model", "m", "--slack-bot-token-env", "B"): "Slack needs both",
        (
            "--provider",
            "openai",
            "--model",
            "m",
            "--allow",
            "discord:1",
        ): "--allow names discord, which is not",
        (
            "--provider",
            "openai",
            "--model",
            "m",
            "--admin",
            "irc:me",
        ): "--admin 'irc:me': expected PLATFORM:ID",
        (
            "--provider",
            "openai",
            "--model",
            "m",
            "--discord-token-env",
            "D",
            "--allow",
            "discord:alice",
        ): "--allow 'discord:alice': 'alice' is not a Discord user id: expected a number",
        (
            "--provider",
            "openai",
            "--model",
            "m",
            "--admin",
            "slack:@bob",
        ): "--admin 'slack:@bob': '@bob' is not a Slack "
        "user id: expected a member id like U012AB3CDE",
        (
            "--provider",
            "anthropic",
            "--model",
            "m",
            "--base-url",
            "claude-x",
            "--no-model-test",
        ): "--base-url: expected an http:// or https:// URL with a host (e.g. "
        "https://api.example.com/v1); got 'claude-x'",
    }
    for args, message in cases.items():
        done = gateway(home, "init", "--yes", *args)
        assert done.returncode == 1 and message in done.stderr, (args, done.stderr)
    assert not (home / "config.yaml").exists()


async def test_the_questions_try_the_model_and_write_what_was_answered(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    home = tmp_path / "home"
    fake_llm.script(
        Fault(
            404,
            {
                "error": {
                    "message": "The model `local-modl` does not exist",
                    "type": "invalid_request_error",
                }
            },
        )
    )
    answers = [
        "9",  # not a choice: asked again
        "5",  # another OpenAI-compatible server
        fake_llm.openai_base_url,  # on 127.0.0.1
        "",  # the model name has no default: asked again
        "local-modl",
        "",  # its key variable, optional on this machine: none
        "",  # test request: yes (the default); the fake refuses the name
        "n",  # do not keep it: choose again
        "5",
        fake_llm.openai_base_url,
        "local-model",
        "",
        "",  # test again: this one answers
        "telegram, irc",  # irc is not a platform: asked again
        "telegram,slack",
        "",  # TELEGRAM_BOT_TOKEN
        "42, 43",
        "",  # SLACK_BOT_TOKEN
        "MY APP",  # not a variable name: asked again
        "SLACK_APP",
        "",  # nobody on Slack yet
        "",  # pairing: yes
        "telegram:42",  # admin
        "n",  # no service
    ]
    done = await gateway_async(home, "init", stdin="\n".join(answers) + "\n")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "  expected one of: 1, 2, 3, 4, 5" in out
    assert "  an answer is needed" in out
    assert "  not a platform: irc" in out
    assert "  'MY APP' is not an environment variable name" in out
    assert (
        "FAIL model     openai/local-modl: rejected: " in out
        and "Keep this model anyway? [y/N]" in out
    )
    assert "ok   model     openai/local-model answered" in out
    assert [r["model"] for r in fake_llm.openai_requests()] == ["local-modl", "local-model"]
    assert fake_llm.openai_requests()[1]["messages"][-1]["content"] == "Reply with: ok"
    assert "set TELEGRAM_BOT_TOKEN, SLACK_BOT_TOKEN, SLACK_APP in the shell" in out

    env = {"TELEGRAM_BOT_TOKEN": "1:x", "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP": "xapp-1"}
    assert gateway(home, "config", "check", env=env).stdout == "ok\n"
    config = load_config(home, env=env)
    assert config.model is not None
    assert (config.model.name, config.model.base_url, config.model.api_key_env) == (
        "local-model",
        fake_llm.openai_base_url,
        None,
    )
    assert config.telegram is not None and config.telegram.allowed_users == ("42", "43")
    assert config.slack is not None and config.slack.allowed_users == ()
    assert (config.access.unknown_dm, config.access.admins) == ("pair", ("telegram:42",))


async def test_a_local_server_that_needs_a_key_gets_its_variable(tmp_path: Path) -> None:
    """A vLLM or LiteLLM on 127.0.0.1 started with a key refuses requests without one: its variable
    is asked (optional, Enter: none), the test request carries the key, and the config names the
    variable."""
    home, llm = tmp_path / "home", FakeLLM(api_key="sk-local-secret")
    await llm.start()
    try:
        answers = ["5", llm.openai_base_url, "served-model", "LOCAL_LLM_KEY", "", "", "n", "n"]
        done = await gateway_async(
            home, "init", stdin="\n".join(answers) + "\n", env={"LOCAL_LLM_KEY": "sk-local-secret"}
        )
    finally:
        await llm.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "Environment variable that holds its API key, if it needs one (Enter: none): "
        in done.stdout
    )
    assert "ok   model     openai/served-model answered" in done.stdout
    assert [r[2].get("Authorization") for r in llm.requests] == ["Bearer sk-local-secret"]
    assert "sk-local-secret" not in (home / "config.yaml").read_text()
    config = load_config(home, env={"LOCAL_LLM_KEY": "sk-local-secret"})
    assert config.model is not None and config.model.api_key_env == "LOCAL_LLM_KEY"


def test_a_base_url_that_is_not_a_url_is_asked_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    answers = ["5", "claude-x", "http://127.0.0.1:9/v1", "served-model", "", "", "n", "n"]
    done = gateway(home, "init", "--no-model-test", stdin="\n".join(answers) + "\n")
    assert done.returncode == 0, done.stdout + done.stderr
    said = "  expected an http:// or https:// URL with a host (e.g. https://api.example.com/v1);"
    assert f"{said} got 'claude-x'" in done.stdout
    config = load_config(home, env={})
    assert config.model is not None and config.model.base_url == "http://127.0.0.1:9/v1"


def test_the_questions_skip_the_test_without_a_key_and_can_install_the_service(
    tmp_path: Path,
) -> None:
    """`systemctl`/`loginctl` are stand-ins on PATH that
    record their arguments (no systemd PID 1 here)."""
    home, bin_dir, calls = tmp_path / "home", tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for tool in ("systemctl", "loginctl"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho {tool} "$@" >> {calls}\n')
        (bin_dir / tool).chmod(0o755)
    # Anthropic, its default model and key variable, no platforms
    answers = ["1", "", "", "", "n", "y"]
    done = gateway(
        home,
        "init",
        stdin="\n".join(answers) + "\n",
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "USER": "tester", "LOGNAME": "tester"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ANTHROPIC_API_KEY is not set in this shell, so no test request now" in done.stdout
    unit = tmp_path / ".config/systemd/user/agent-gateway.service"
    assert f"Environment=GATEWAY_HOME={home}" in unit.read_text()
    assert calls.read_text().splitlines()[:2] == [
        "systemctl --user daemon-reload",
        "systemctl --user enable --now agent-gateway.service",
    ]
    assert (
        "set ANTHROPIC_API_KEY in ~/.config/agent-gateway/env (NAME=value lines), then `systemctl "
        "--user restart agent-gateway`"
    ) in done.stdout
    config = load_config(home, env={})
    assert config.model is not None and (config.model.provider, config.model.name) == (
        "anthropic",
        "claude-sonnet-4-5",
    )
    assert config.access.unknown_dm == "ignore"


def test_a_user_id_in_the_wrong_shape_is_asked_again_and_nothing_is_lost(tmp_path: Path) -> None:
    """A Telegram name without its @ would match nobody, and a bad admin ended the whole set-up with
    nothing written: each is asked again, saying what an id looks like there."""
    home = tmp_path / "home"
    # Anthropic, its default model and key variable (unset: no test request)
    answers = [
        "1",
        "",
        "",
        "telegram",
        "",  # TELEGRAM_BOT_TOKEN
        "@alice, bob",  # bob: not an id
        "@alice, 123456789",
        "",  # pairing: yes
        "alice",  # not platform:id
        "telegram:bob",  # not a Telegram id
        "telegram:123456789",
        "n",
    ]
    done = gateway(home, "init", stdin="\n".join(answers) + "\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "  'bob' is not a Telegram user id: expected a number "
        "(@userinfobot tells you yours) or an @username" in done.stdout
    )
    assert "  admin 'alice': expected PLATFORM:ID" in done.stdout
    assert "  admin 'telegram:bob': 'bob' is not a Telegram user id" in done.stdout
    config = load_config(home, env={"TELEGRAM_BOT_TOKEN": "1:x"})
    assert config.telegram is not None and config.telegram.allowed_users == ("@alice", "123456789")
    assert config.access.admins == ("telegram:123456789",)


def _interruptible() -> None:
    """In the child, before exec: Ctrl-C as a terminal delivers it. A run in the background (`cmd
    &`, nohup) ignores SIGINT, children inherit that, and Python keeps an inherited ignore."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def test_ctrl_c_in_the_questions_is_not_a_success(tmp_path: Path) -> None:
    """Ctrl-C exited 0, so the README's `gateway init &&
    gateway run` went on to start the gateway anyway."""
    home = tmp_path / "home"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli.main",
        "--home",
        str(home),
        "init",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=base_env(home),
        preexec_fn=_interruptible,
    )
    assert proc.stdout is not None
    try:
        seen = b""
        async with asyncio.timeout(60):
            while b"Choose [1]: " not in seen:
                chunk = await proc.stdout.read(4096)
                assert chunk, seen.decode()
                seen += chunk
        proc.send_signal(signal.SIGINT)
        _out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:  # never left behind, waiting for an answer
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130
    assert err.decode().strip() == "interrupted"  # one line, no traceback
    assert not (home / "config.yaml").exists()


def test_input_that_ends_early_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = gateway(home, "init", stdin="2\n")
    assert done.returncode == 1
    assert (
        "no answer (input ended); `gateway init --yes --provider … --model …` asks nothing"
        in done.stderr
    )
    assert not (home / "config.yaml").exists()


def test_a_taken_web_port_is_noticed_before_gateway_run_fails_on_it(tmp_path: Path) -> None:
    """Another program (say a second gateway) listens on 8765: init gives the web chat the next free
    port and says so, rather than writing a config whose `gateway run` cannot start; a port asked
    for is kept, with a note."""
    from gateway.cli.context import port_in_use
    from gateway.cli.init import DEFAULT_WEB_PORT, web_port
    from gateway.ops.home import hold_home

    home, out = tmp_path / "home", io.StringIO()
    taken = {DEFAULT_WEB_PORT, DEFAULT_WEB_PORT + 1}
    assert web_port(None, home, out, in_use=taken.__contains__) == DEFAULT_WEB_PORT + 2
    assert out.getvalue() == (
        f"port {DEFAULT_WEB_PORT} is in use on this machine (another gateway?), so the web "
        f"chat gets port {DEFAULT_WEB_PORT + 2} (web.port)\n"
    )
    assert web_port(None, home, io.StringIO(), in_use=set().__contains__) == DEFAULT_WEB_PORT
    out = io.StringIO()
    assert web_port(DEFAULT_WEB_PORT, home, out, in_use=taken.__contains__) == DEFAULT_WEB_PORT
    assert (
        out.getvalue() == f"note: port {DEFAULT_WEB_PORT} is in use on "
        "this machine now; `gateway run` needs it free\n"
    )
    # this home's own daemon runs (`init --force` beside it): the port it holds is its own
    lock = hold_home(home)
    try:
        assert web_port(None, home, io.StringIO(), in_use=taken.__contains__) == DEFAULT_WEB_PORT
    finally:
        lock.release()

    with socket.socket() as listener:  # a real listener, as `gateway run` would meet it
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert port_in_use(port)
        done = gateway(
            home,
            "init",
            "--yes",
            "--provider",
            "openai",
            "--model",
            "m",
            "--no-model-test",
            "--web-port",
            str(port),
        )
        assert (
            done.returncode == 0
            and f"note: port {port} is in use on this machine now" in done.stdout
        )
    assert not port_in_use(port)
    assert load_config(home, env={"OPENAI_API_KEY": "x"}).web.port == port


def test_init_moves_off_a_taken_default_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another program listens on the default port: init writes the next free one and says so. The
    default is moved to a port the OS gave this test: 8765 itself may be the developer's gateway."""
    from gateway.cli import context, init
    from gateway.cli.main import main

    home = tmp_path / "home"
    monkeypatch.delenv(context.PORT_VAR, raising=False)
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        monkeypatch.setattr(init, "DEFAULT_WEB_PORT", taken)
        code = main(
            [
                "--home",
                str(home),
                "init",
                "--yes",
                "--provider",
                "openai",
                "--model",
                "m",
                "--no-model-test",
            ]
        )
    out = capsys.readouterr().out
    assert code == 0, out
    port = load_config(home, env={"OPENAI_API_KEY": "x"}).web.port
    assert port != taken
    assert (
        f"port {taken} is in use on this machine (another gateway?), so the web chat gets port "
        f"{port}"
    ) in out


def test_gateway_web_port_gives_init_its_port(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    done = gateway(
        home,
        "init",
        "--yes",
        "--provider",
        "openai",
        "--model",
        "m",
        "--no-model-test",
        env={"GATEWAY_WEB_PORT": str(port)},
    )
    assert done.returncode == 0, done.stderr
    assert load_config(home, env={"OPENAI_API_KEY": "x"}).web.port == port
    done = gateway(
        tmp_path / "other",
        "init",
        "--yes",
        "--provider",
        "openai",
        "--model",
        "m",
        env={"GATEWAY_WEB_PORT": "web"},
    )
    assert (done.returncode, done.stderr) == (
        1,
        "error: GATEWAY_WEB_PORT='web': expected a port number\n",
    )
