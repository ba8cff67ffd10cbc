"""Logging: JSON lines off a TTY, the human format on one, turn fields, and redaction of every
secret — checked by grepping all output of a real `gateway run` that handled a turn with
real-looking secrets in env and config."""

from __future__ import annotations

import io
import json
import logging
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.config.settings import load_config
from gateway.telemetry.logs import MASK, Redactor, config_secrets, env_secrets, setup_logging
from tests.daemon_proc import DaemonProc, WebChatClient, free_port
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram

TG_TOKEN = "7212345678:AAH3kF9xQpLmZ0vYtR2wN8sUeBcD4gJ6hKo"
ANTHROPIC_KEY = (
    "sk-ant-api03-Zq8vN2xW5yL7kJ4hG1fD9sA3pO6iU0tR-bE8cM2nV5xQ7zKjH4gF1dS9aP3oI6uY0tRe-QwErTy12"
)
# a literal in config.yaml: no known shape, masked by value
WEB_TOKEN = "webtok-9f8e7d6c5b4a3210"
PASSWORD = "hunter2-correct-horse-battery"  # an unrelated *_PASSWORD in the environment
# never configured anywhere: masked by its shape
STRANGER = "sk-proj-4Fh7Jk2Lm9Np3Qr5St8Vw1Xy6Za0Bc"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


def test_redactor_masks_values_and_known_shapes() -> None:
    redact = Redactor(["my-literal-secret", "x"])  # too short to be a secret: left alone
    text = (
        f"literal my-literal-secret tg {TG_TOKEN} url https://api.telegram.org/bot{TG_TOKEN}/getMe "
        f"slack xoxb-1234-5678-abcdefgh app xapp-1-A0B1C2-3456-abcdef key {ANTHROPIC_KEY} "
        f"{STRANGER} discord MTA0NTY3ODkwMTIzNDU2Nzg5.GhIjKl.abcdefghijklmnopqrstuvwxyz01234 "
        "Authorization: Bearer abc.def-ghi_jkl and ?token=s3cr3tvalue&x=1 x marks"
    )
    out = redact(text)
    for secret in (
        "my-literal-secret",
        TG_TOKEN,
        "xoxb-1234",
        "xapp-1-",
        ANTHROPIC_KEY,
        STRANGER,
        "MTA0NTY3ODkwMTIzNDU2Nzg5",
        "abc.def-ghi_jkl",
        "s3cr3tvalue",
    ):
        assert secret not in out, secret
    assert out.endswith("x marks") and "&x=1" in out
    assert out.startswith(f"literal {MASK} tg {MASK} url https://api.telegram.org/bot{MASK}/getMe")


def test_a_secret_containing_another_is_masked_whole() -> None:
    assert Redactor(["abcdef", "abcdef-123456"])("v=abcdef-123456") == f"v={MASK}"


def test_json_lines_with_turn_fields_and_masked_args_and_tracebacks(restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging("DEBUG", "auto", secrets=["sup3r-s3cret-value"], stream=stream)
    log = logging.getLogger("gateway.sessions.manager")
    log.info("turn start platform=%s session=%s turn=%s", "telegram", 12, "t34")
    log.debug("payload %r", {"token": "sup3r-s3cret-value"})
    try:
        raise RuntimeError(f"bad url https://x/bot{TG_TOKEN}/getMe")
    except RuntimeError:
        log.exception("adapter failed with %s", "sup3r-s3cret-value")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["msg"] == "turn start platform=telegram session=12 turn=t34"
    assert (lines[0]["platform"], lines[0]["session"], lines[0]["turn"], lines[0]["level"]) == (
        "telegram",
        "12",
        "t34",
        "INFO",
    )
    assert lines[1]["msg"] == f"payload {{'token': '{MASK}'}}"
    assert lines[2]["msg"] == f"adapter failed with {MASK}"
    assert "RuntimeError: bad url https://x/bot***/getMe" in lines[2]["exc"]
    assert "sup3r-s3cret-value" not in stream.getvalue() and TG_TOKEN not in stream.getvalue()


def test_human_format_on_a_tty_and_forced_json(restore_logging: None) -> None:
    tty = Tty()
    setup_logging("INFO", "auto", stream=tty)
    logging.getLogger("gateway.x").warning("hello %s", "there")
    assert tty.getvalue().rstrip().endswith("WARNING gateway.x: hello there")
    forced = Tty()
    setup_logging("INFO", "json", stream=forced)
    logging.getLogger("gateway.x").warning("hello")
    assert json.loads(forced.getvalue())["msg"] == "hello"


def test_library_chatter_stays_quiet_and_levels_apply(restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging("INFO", "json", stream=stream)
    logging.getLogger("aiogram.event").info("Update id=1 is handled")
    logging.getLogger("gateway.y").debug("not at INFO")
    assert stream.getvalue() == ""


def test_every_secret_field_of_the_config_is_found(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        textwrap.dedent("""\
        model: {provider: anthropic, name: m, api_key: model-key-123456,
                fallback: {provider: openai, name: f, api_key: fallback-key-123456}}
        web: {auth_token: web-token-123456}
        telegram: {token: "${TG}", secret_token: hook-secret-123456}
        discord: {token: discord-token-123456}
        slack: {bot_token: xoxb-slack-123456, app_token: xapp-slack-123456,
                signing_secret: signing-123456}
        """)
    )
    config = load_config(tmp_path, env={"TG": "tg-from-env-123456"})
    assert sorted(config_secrets(config)) == sorted(
        [
            "model-key-123456",
            "fallback-key-123456",
            "web-token-123456",
            "tg-from-env-123456",
            "hook-secret-123456",
            "discord-token-123456",
            "xoxb-slack-123456",
            "xapp-slack-123456",
            "signing-123456",
        ]
    )


def test_env_secrets_by_name() -> None:
    env = {
        "ANTHROPIC_API_KEY": "a1",
        "MY_TOKEN": "t1",
        "DB_PASSWORD": "p1",
        "CUSTOM": "c1",
        "PATH": "/bin",
        "HOME": "/root",
    }
    assert sorted(env_secrets(env, also=["CUSTOM"])) == ["a1", "c1", "p1", "t1"]


async def test_no_secret_reaches_any_output_of_a_real_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    async with FakeLLM(api_key=ANTHROPIC_KEY) as llm, FakeTelegram(token=TG_TOKEN) as telegram:
        (home / "config.yaml").write_text(
            textwrap.dedent(f"""\
            model:
              provider: anthropic
              name: claude-test
              base_url: {llm.base_url}
              api_key: ${{ANTHROPIC_API_KEY}}
              max_retries: 0
            web:
              port: {port}
              auth_token: {WEB_TOKEN}
            telegram:
              token: ${{TELEGRAM_BOT_TOKEN}}
              api_server: {telegram.base_url}
              allowed_users: ["1001"]
            """)
        )
        env = {
            "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "TELEGRAM_BOT_TOKEN": TG_TOKEN,
            "BACKUP_PASSWORD": PASSWORD,
        }
        daemon = DaemonProc(
            home, env=env, args=("--log-level", "DEBUG", "--log-format", "json", "run")
        )
        await daemon.start()
        try:
            await daemon.wait_ready()
            client = WebChatClient(port)
            client.url += f"&token={WEB_TOKEN}"
            async with client as tab:
                await tab.say(
                    f"remember {TG_TOKEN} {ANTHROPIC_KEY} {WEB_TOKEN} {PASSWORD} {STRANGER}"
                )
                reply = await tab.next("message")
            # FakeLLM(api_key=...) answers only when the env key was really used
            assert reply["kind"] == "reply"
            code = await daemon.stop()
        finally:
            await daemon.kill()
    output = daemon.output()
    assert code == 0, output
    for secret in (TG_TOKEN, ANTHROPIC_KEY, WEB_TOKEN, PASSWORD, STRANGER, TG_TOKEN.split(":")[1]):
        assert secret not in output, f"{secret[:12]}... leaked"
    text_lines = [r for r in daemon.log_records() if r["msg"].startswith("turn text")]
    assert len(text_lines) == 1 and text_lines[0]["level"] == "DEBUG"
    assert text_lines[0]["msg"].endswith(f"text='remember {MASK} {MASK} {MASK} {MASK} {MASK}'")


def test_url_passwords_and_key_like_query_values_are_masked_in_any_line() -> None:
    redact = Redactor()
    assert redact("http://bot:pa55-word@mcp.example/x") == f"http://bot:{MASK}@mcp.example/x"
    last_at_ends_it = "https://u:p@ss:w@h.example/x?y=@"
    assert redact(last_at_ends_it) == f"https://u:{MASK}@h.example/x?y=@"
    assert redact("GET /v1?api_key=abc&page=2 ok") == f"GET /v1?api_key={MASK}&page=2 ok"
    assert (
        redact("?client_secret=zz;sig=1&Password=hunter2 &code=4/0Ab")
        == f"?client_secret={MASK};sig={MASK}&Password={MASK} &code={MASK}"
    )
    for kept in ("http://host:8080/p?q=a@b", "mail bob@example.com", "?page=2&lang=en", "x=1 y=2"):
        assert redact(kept) == kept


def test_a_config_urls_password_and_query_values_are_secrets(tmp_path: Path) -> None:
    """A value that names no key (`?k=…`) is masked as the config's own secret."""
    (tmp_path / "config.yaml").write_text(
        textwrap.dedent("""\
        model: {provider: anthropic, name: claude-test, api_key: test-key-123}
        mcp_servers:
          remote: {url: "https://bot:pa55-word-99@mcp.example/mcp?k=k9f8e7d6c&v=2"}
        """),
        encoding="utf-8",
    )
    from gateway.telemetry.logs import redactor_for

    redact = redactor_for(load_config(tmp_path, env={}), {})
    assert redact("k9f8e7d6c and pa55-word-99") == f"{MASK} and {MASK}"


async def test_the_mcp_sdks_debug_line_never_shows_a_url_password(
    tmp_path: Path, restore_logging: None
) -> None:
    """The SDK logs the URL it dials at DEBUG; its password and a key in its query are masked there
    like anywhere, though the redactor was given no secret at all."""
    import asyncio
    import sys

    from gateway.config.tools import McpServerConfig
    from gateway.mcp.hub import McpHub

    tools, port_file = tmp_path / "tools.json", tmp_path / "port"
    tools.write_text(json.dumps({"tools": ["echo"], "version": "v1"}), encoding="utf-8")
    server = Path(__file__).parent / "fakes" / "mcp_server.py"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(server),
        "--tools",
        str(tools),
        "--http",
        "--port-file",
        str(port_file),
        stderr=asyncio.subprocess.DEVNULL,
    )
    stream = io.StringIO()
    hub: McpHub | None = None
    try:
        async with asyncio.timeout(90):  # met at once unless the server is stuck
            while not (port_file.exists() and port_file.read_text()):
                await asyncio.sleep(0.05)
        setup_logging("DEBUG", "json", stream=stream)
        url = f"http://bot:pa55-word-99@127.0.0.1:{port_file.read_text()}/mcp?api_key=k9f8e7d6c"
        hub = McpHub({"remote": McpServerConfig(url=url, connect_timeout_s=20)})
        await hub.start()
        assert hub.states["remote"].state == "up", hub.states["remote"].error
    finally:
        if hub is not None:
            await hub.stop()
        proc.kill()
        await proc.wait()
    out = stream.getvalue()
    assert f"Connecting to StreamableHTTP endpoint: http://bot:{MASK}@127.0.0.1" in out
    assert "pa55-word-99" not in out and "k9f8e7d6c" not in out
