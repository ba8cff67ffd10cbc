"""`gateway doctor` against the wire fakes: each platform's own auth call at the configured API
base, the model endpoint, home permissions and database integrity; one line per check with a fix
hint, and its exit code."""

from __future__ import annotations

import asyncio
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.ops.doctor import Check, Doctor, exit_code, render
from gateway.store.database import Store
from tests.daemon_proc import GATEWAY
from tests.fakes.discord import API, FakeDiscord
from tests.fakes.discord import TOKEN as DISCORD_TOKEN
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.fakes.telegram import BOT_ID, BOT_USERNAME, FakeTelegram
from tests.fakes.telegram import TOKEN as TELEGRAM_TOKEN
from tests.helpers import closed_port


@pytest.fixture
def refused() -> Iterator[int]:
    """The web port of these homes (nobody listens: "daemon: not running"), and where an unreachable
    endpoint is."""
    with closed_port() as port:
        yield port


def quiet_web(home: Path, port: int) -> None:
    """A config whose only setting is a web port nobody listens on (not the default, 8765, which may
    be the developer's own gateway)."""
    (home / "config.yaml").write_text(f"web:\n  port: {port}\n")
    (home / "config.yaml").chmod(0o600)


def write_home(
    home: Path,
    *,
    llm: FakeLLM,
    telegram: FakeTelegram,
    discord: FakeDiscord,
    slack: FakeSlack,
    web_port: int,
    tg_token: str = TELEGRAM_TOKEN,
    dc_token: str = DISCORD_TOKEN,
    bot_token: str = BOT_TOKEN,
    model_key: str = "test-key",
) -> None:
    home.chmod(0o700)
    (home / "config.yaml").write_text(
        textwrap.dedent(f"""\
        model:
          provider: anthropic
          name: claude-test
          base_url: {llm.base_url}
          api_key: {model_key}
          max_retries: 0
        web:
          port: {web_port}
        telegram:
          token: "{tg_token}"
          api_server: {telegram.base_url}
        discord:
          token: {dc_token}
          api_base: {discord.base_url}{API}
        slack:
          bot_token: {bot_token}
          app_token: {APP_TOKEN}
          api_url: {slack.api_base_url}
        """)
    )
    (home / "config.yaml").chmod(0o600)


def lines(checks: list[Check]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for c in checks:
        found.setdefault(c.name, []).append(c.line())
    return found


async def test_everything_healthy(
    home: Path,
    fake_llm: FakeLLM,
    fake_telegram: FakeTelegram,
    fake_discord: FakeDiscord,
    fake_slack: FakeSlack,
    refused: int,
) -> None:
    write_home(
        home,
        llm=fake_llm,
        telegram=fake_telegram,
        discord=fake_discord,
        slack=fake_slack,
        web_port=refused,
    )
    Store(home / "state.db").close()
    checks = await Doctor(home, {}).run()
    got = lines(checks)
    assert got["config"] == [
        (
            f"ok   config    {home}/config.yaml (model anthropic/claude-test; "
            "platforms: telegram, discord, slack)"
        )
    ]
    assert got["home"] == [f"ok   home      {home} (drwx------, owner uid {os.getuid()})"]
    assert got["database"][0].startswith("ok   database  state.db integrity ok (")
    assert got["web"] == [
        (
            "ok   web       the web chat needs its login link (the secret in web.key; "
            "`gateway web-url` prints it)"
        )
    ]
    assert got["telegram"] == [f"ok   telegram  getMe: @{BOT_USERNAME} (id {BOT_ID})"]
    assert got["discord"][0].startswith("ok   discord   /users/@me: gatewaybot (id ")
    assert got["slack"] == [
        "ok   slack     auth.test: gatewaybot in Fake Team",
        "ok   slack     apps.connections.open: app token can open Socket Mode",
    ]
    assert got["model"][0].startswith("ok   model     anthropic/claude-test answered (")
    nobody = f"http://127.0.0.1:{refused}"
    assert got["daemon"] == [f"skip daemon    not running (nothing answers at {nobody})"]
    assert exit_code(checks) == 0
    assert (
        fake_telegram.calls_to("getme") and fake_discord.calls and fake_slack.calls_to("auth.test")
    )
    assert len(fake_llm.anthropic_requests()) == 1


async def test_rejected_tokens_fail_with_a_fix_and_are_never_printed(
    home: Path,
    fake_llm: FakeLLM,
    fake_telegram: FakeTelegram,
    fake_discord: FakeDiscord,
    fake_slack: FakeSlack,
    refused: int,
) -> None:
    bad_tg, bad_dc, bad_slack = (
        "111111:AAwrong-token-for-the-fake-bot-api-0000",
        "WRONG.DISCORD.TOKEN",
        "xoxb-wrong",
    )
    fake_llm.api_key = "the-right-key"
    write_home(
        home,
        llm=fake_llm,
        telegram=fake_telegram,
        discord=fake_discord,
        slack=fake_slack,
        web_port=refused,
        tg_token=bad_tg,
        dc_token=bad_dc,
        bot_token=bad_slack,
        model_key="a-wrong-model-key",
    )
    checks = await Doctor(home, {}).run()
    got = lines(checks)
    assert got["telegram"] == [
        (
            "FAIL telegram  getMe: token rejected (401) — fix: put the token from @BotFather in "
            "telegram.token (e.g. ${TELEGRAM_BOT_TOKEN})"
        )
    ]
    assert got["discord"] == [
        (
            "FAIL discord   /users/@me: token rejected (401) — fix: reset the bot token in the "
            "Developer Portal (Bot → Reset Token) and set discord.token"
        )
    ]
    assert got["slack"][0] == (
        "FAIL slack     auth.test: invalid_auth — fix: set slack.bot_token to the app's "
        "Bot User OAuth Token (xoxb-...)"
    )
    assert got["model"][0].startswith("FAIL model     anthropic/claude-test: rejected: ")
    assert got["model"][0].endswith("— fix: check model.name and the API key (model.api_key_env)")
    assert exit_code(checks) == 1
    text = render(checks)
    for secret in (bad_tg, bad_dc, "a-wrong-model-key"):
        assert secret not in text


async def test_unreachable_endpoints(home: Path, refused: int) -> None:
    home.chmod(0o700)
    gone = f"http://127.0.0.1:{refused}"
    (home / "config.yaml").write_text(
        textwrap.dedent(f"""\
        model: {{provider: openai, name: gpt-test, base_url: "{gone}/v1", api_key: k,
                 max_retries: 0}}
        telegram: {{token: "123456:AAxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", api_server: "{gone}"}}
        web: {{port: {refused}}}
        """)
    )
    (home / "config.yaml").chmod(0o600)
    got = lines(await Doctor(home, {}, timeout=5).run())
    assert got["telegram"][0].startswith(f"FAIL telegram  getMe at {gone}: unreachable (")
    assert got["telegram"][0].endswith("— fix: check the network and telegram.api_server")
    assert "123456:AA" not in got["telegram"][0]
    assert got["model"][0].startswith("FAIL model     openai/gpt-test: unavailable: ")


def test_broken_config_exits_78_and_skips_the_network_checks(home: Path) -> None:
    (home / "config.yaml").write_text("web:\n  port: many\n")
    checks = asyncio.run(Doctor(home, {}).run())
    assert [c.name for c in checks] == ["config", "home", "home", "database"]
    assert checks[0].line().startswith(f"FAIL config    {home}/config.yaml:2: web.port")
    assert (
        checks[0]
        .line()
        .endswith("— fix: edit config.yaml; `gateway config check` lists every error")
    )
    assert exit_code(checks) == 78


def test_loose_permissions(home: Path, refused: int) -> None:
    home.chmod(0o777)
    (home / "config.yaml").write_text(f"web:\n  port: {refused}\n")
    (home / "config.yaml").chmod(0o644)
    got = lines(asyncio.run(Doctor(home, {}).run()))
    assert got["home"] == [
        (
            f"FAIL home      {home} is writable by group/others (drwxrwxrwx) — fix: chmod 700 "
            f"{home} (or `gateway doctor --fix`)"
        ),
        (
            f"WARN home      {home}/config.yaml is readable by group/others (-rw-r--r--) — fix: "
            f"chmod 600 {home}/config.yaml, or chmod 700 {home} (`gateway doctor --fix`)"
        ),
    ]
    home.chmod(0o750)
    got = lines(asyncio.run(Doctor(home, {}).run()))
    assert got["home"][0].startswith(
        f"WARN home      {home} is readable by group/others (drwxr-x---)"
    )


def test_a_0644_config_in_a_private_home_is_fine(home: Path, refused: int) -> None:
    """docs/operations.md installs the system unit's config.yaml with -m 0644 (the dynamic user must
    read it); inside the 0700 state directory nobody else can reach it, so doctor does not ask for
    0600."""
    home.chmod(0o700)
    (home / "config.yaml").write_text(f"web:\n  port: {refused}\n")
    (home / "config.yaml").chmod(0o644)
    got = lines(asyncio.run(Doctor(home, {}).run()))
    assert got["home"] == [f"ok   home      {home} (drwx------, owner uid {os.getuid()})"]
    docs = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text(
        encoding="utf-8"
    )
    assert "install -m 0644 config.yaml" in docs and "StateDirectoryMode=0700" in docs


async def test_no_warning_about_what_the_gateway_made_itself(tmp_path: Path, refused: int) -> None:
    """A first run in a home that did not exist, with the usual umask 022: the home, the database,
    the pairing key and the memory files it creates pass doctor's permission checks."""
    from gateway.config.settings import load_config
    from gateway.ops.wiring import build_gateway
    from gateway.store.rows import utcnow
    from tests.helpers import RecordingAdapter, inbound

    home = tmp_path / "fresh" / "home"
    old = os.umask(0o022)
    try:
        config = load_config(home, env={})
        gateway = build_gateway(
            config, env={}, adapters=[RecordingAdapter("cli")], probe_ollama=False
        )
        gateway.memory.profile(gateway.people.resolve("cli", "local", now=utcnow()).id).add(
            "Likes tea."
        )
        await gateway.sessions.submit(inbound("hello"))
        await gateway.sessions.wait_idle()
        gateway.store.close()
    finally:
        os.umask(old)
    assert {p.name for p in home.iterdir()} >= {"state.db", "pairing.key", "memories"}
    quiet_web(home, refused)  # (written after it ran: the first run had none)
    got = lines(await Doctor(home, {}).run())
    assert got["home"] == [f"ok   home      {home} (drwx------, owner uid {os.getuid()})"]


def test_doctor_fix_repairs_folders_and_permissions_and_nothing_else(
    tmp_path: Path, refused: int
) -> None:
    home, user_home = tmp_path / "home", tmp_path / "user"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    (home / "config.yaml").write_text(f"web:\n  port: {refused}\n")
    (home / "config.yaml").chmod(0o644)
    (home / "pairing.key").write_text("00" * 32)
    (home / "pairing.key").chmod(0o644)
    (home / "state.db").write_bytes(b"not a database " * 100)
    env_file = user_home / ".config" / "agent-gateway" / "env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text("TELEGRAM_BOT_TOKEN=123:abc\n")
    env_file.chmod(0o644)
    env = {"HOME": str(user_home), "PATH": os.environ["PATH"]}
    before = lines(asyncio.run(Doctor(home, env).run()))
    assert [line.split()[0] for line in before["home"]] == ["WARN", "WARN", "WARN", "WARN"]

    done = subprocess.run(
        [GATEWAY, "--home", str(home), "doctor", "--fix"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    out = done.stdout.splitlines()
    assert out[:5] == [
        f"fix  created {home}/memories (drwx------)",
        f"fix  created {home}/skills (drwx------)",
        f"fix  chmod 700 {home} (was drwxr-xr-x)",
        f"fix  chmod 600 {home}/config.yaml (was -rw-r--r--)",
        f"fix  chmod 600 {home}/pairing.key (was -rw-r--r--)",
    ]
    assert out[5] == f"fix  chmod 600 {env_file} (was -rw-r--r--)"
    assert f"ok   home      {home} (drwx------, owner uid {os.getuid()})" in out
    # not its to repair: restoring is the owner's call
    assert any(line.startswith("FAIL database") for line in out)
    assert (home / "state.db").read_bytes() == b"not a database " * 100
    assert done.returncode == 1
    again = subprocess.run(
        [GATEWAY, "--home", str(home), "doctor", "--fix"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (
        again.stdout.splitlines()[0]
        == "fix  nothing to repair (folders and permissions are as they should be)"
    )


def test_doctor_fix_leaves_a_0644_config_in_a_private_home_alone(
    tmp_path: Path, refused: int
) -> None:
    """The system unit's config.yaml is installed 0644 inside its 0700 state directory so the
    dynamic user can read it (docs/operations.md); `sudo gateway doctor --fix` must not make it 0600
    and stop the service reading it. web.key is the exception doctor always wants 0600, and --fix
    agrees."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    for name, mode in (("config.yaml", 0o644), ("pairing.key", 0o644), ("web.key", 0o644)):
        text = f"web:\n  port: {refused}\n" if name == "config.yaml" else "00" * 32
        (home / name).write_text(text)
        (home / name).chmod(mode)
    for folder in ("memories", "skills"):
        (home / folder).mkdir(mode=0o700)
    before = lines(asyncio.run(Doctor(home, {}).run()))
    warned = (
        f"WARN web       {home}/web.key is readable by group/others (-rw-r--r--) — fix: chmod 600 "
        f"{home}/web.key (or `gateway doctor --fix`)"
    )
    assert before["web"] == [warned]
    assert Doctor(home, {}).repair() == [f"chmod 600 {home}/web.key (was -rw-r--r--)"]
    assert (home / "config.yaml").stat().st_mode & 0o777 == 0o644
    assert (home / "pairing.key").stat().st_mode & 0o777 == 0o644
    after = lines(asyncio.run(Doctor(home, {}).run()))
    assert [line.split()[0] for line in after["home"] + after["web"]] == ["ok", "ok"]


def test_a_damaged_database_fails_with_the_restore_hint(home: Path, refused: int) -> None:
    home.chmod(0o700)
    quiet_web(home, refused)
    (home / "state.db").write_bytes(b"this is not a database " * 200)
    got = lines(asyncio.run(Doctor(home, {}).run()))
    assert got["database"][0].startswith("FAIL database  integrity_check: file is not a database")
    assert "restore the latest backup" in got["database"][0]


def test_a_corrupt_page_is_found_by_integrity_check(home: Path, refused: int) -> None:
    home.chmod(0o700)
    quiet_web(home, refused)
    store = Store(home / "state.db")
    for i in range(400):
        store.execute(
            "INSERT INTO llm_calls (purpose, provider, model, input_tokens, output_tokens,"
            " cache_read_tokens, cache_write_tokens, created_at) "
            "VALUES ('turn', 'p', ?, 1, 1, 0, 0, 'x')",
            (f"model-{i}" * 20,),
        )
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = store.conn.execute("PRAGMA page_size").fetchone()[0]
    root = store.conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 'llm_calls'"
    ).fetchone()[0]
    store.close()
    data = bytearray((home / "state.db").read_bytes())
    start = (root - 1) * page_size
    # the table's cell pointers now point into its header
    data[start + 12 : start + 60] = b"\x00\x07" * 24
    (home / "state.db").write_bytes(bytes(data))
    checks = asyncio.run(Doctor(home, {}).run())
    db = next(c for c in checks if c.name == "database")
    assert db.line().startswith("FAIL database  integrity_check: "), db.line()
    assert db.line().endswith(
        "— fix: stop the daemon; restore the latest backup (docs/operations.md: backups) or "
        "salvage with `sqlite3 state.db .recover`"
    )


async def test_the_cli_prints_one_line_per_check(
    home: Path,
    fake_llm: FakeLLM,
    fake_telegram: FakeTelegram,
    fake_discord: FakeDiscord,
    fake_slack: FakeSlack,
    refused: int,
) -> None:
    write_home(
        home,
        llm=fake_llm,
        telegram=fake_telegram,
        discord=fake_discord,
        slack=fake_slack,
        web_port=refused,
    )
    proc = await asyncio.create_subprocess_exec(
        GATEWAY,
        "--home",
        str(home),
        "doctor",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ["PATH"]},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode() + err.decode()
    names = [line.split()[1] for line in out.decode().splitlines()]
    assert names == [
        "config",
        "home",
        "database",
        "web",
        "telegram",
        "discord",
        "slack",
        "slack",
        "model",
        "daemon",
    ]


@pytest.mark.parametrize("verdicts,code", [(("ok", "warn", "skip"), 0), (("ok", "fail"), 1)])
def test_exit_codes(verdicts: tuple[str, ...], code: int) -> None:
    checks = [Check(f"c{i}", v, "x") for i, v in enumerate(verdicts)]  # type: ignore[arg-type]
    assert exit_code(checks) == code
