"""Config: every bad key is reported with its file, line and key path; secrets never show."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway.config.settings import load_config
from gateway.errors import ConfigError

MODEL = "model:\n  provider: openai\n  name: m\n"
BAD_CONFIGS = [
    # (yaml, expected substring including the line)
    (
        "session_reset:\n  mode: sometimes\n",
        (
            "config.yaml:2: session_reset.mode: expected "
            "one of idle, daily, both, none; got 'sometimes'"
        ),
    ),
    (
        "agent:\n  max_iterations: many\n",
        "config.yaml:2: agent.max_iterations: expected an integer; got 'many'",
    ),
    ("web:\n  port: 8765\n  colour: blue\n", "config.yaml:3: web.colour: unknown key"),
    (
        "session_reset:\n  at_hour: 24\n",
        "config.yaml:2: session_reset.at_hour: expected a number between 0 and 23",
    ),
    (
        "model:\n  provider: gemini\n  name: x\n",
        "config.yaml:2: model.provider: expected one of anthropic, openai; got 'gemini'",
    ),
    ("model:\n  name: x\n", "config.yaml:2: model.provider: required key is missing"),
    (
        "telegram:\n  token: ${NO_SUCH_TOKEN_VAR}\n",
        "config.yaml:2: telegram.token: environment variable NO_SUCH_TOKEN_VAR is not set",
    ),
    (
        "platform_hints:\n  telegrm: be brief\n",
        "config.yaml:2: platform_hints: expected one of telegram",
    ),
    (
        "platform_hints:\n  slack: {prepend: x}\n",
        "config.yaml:2: platform_hints.slack.prepend: unknown key",
    ),
    (
        "session_reset:\n  idle_minutes: 0\n",
        "config.yaml:2: session_reset.idle_minutes: expected a positive number",
    ),
    ("web:\n\tport: 1\n", "config.yaml:2: invalid YAML"),
    ("a: &x [1, 2]\nb: *x\n", "unknown key"),
    ("sessions:\n  busy: sometimes\n  queue_cap: -1\n", "config.yaml:2: sessions.busy"),
    ("agent: [1, 2]\n", "config.yaml:1: agent: expected a mapping; got a list"),
    ("access:\n  admins: [bob]\n", "access.admins: expected 'platform:user_id'"),
    (
        f"{MODEL}  base_url: claude-x\n",
        "config.yaml:4: model.base_url: expected an http:// or https:// URL with a host",
    ),
    (
        f"{MODEL}  base_url: 'file:///etc/passwd'\n",
        "config.yaml:4: model.base_url: expected an http:// or https:// URL with a host",
    ),
    (f"{MODEL}  base_url: 'http:///v1'\n", "config.yaml:4: model.base_url"),
    (f"{MODEL}  base_url: 'http://h:0/v1'\n", "config.yaml:4: model.base_url"),
    (
        (
            f"{MODEL}  fallback:\n    provider: openai\n  "
            "  name: n\n    base_url: api.example.com/v1\n"
        ),
        "config.yaml:7: model.fallback.base_url: expected an http://",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD_CONFIGS)
def test_bad_config_names_file_line_and_key(home: Path, text: str, expected: str) -> None:
    (home / "config.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(home, env={})
    assert expected in str(info.value)
    assert str(home / "config.yaml") in str(info.value)


def test_all_errors_reported_at_once(home: Path) -> None:
    (home / "config.yaml").write_text(
        "session_reset:\n  mode: x\n  at_hour: 99\nweb:\n  port: nope\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(home, env={})
    lines = str(info.value).splitlines()
    assert [line.split(": ")[0].rsplit(":", 1)[1] for line in lines] == ["2", "3", "5"]


def test_aliases_refused(home: Path) -> None:
    (home / "config.yaml").write_text("web: &w {port: 1}\nsessions: {busy: queue}\nx: *w\n")
    with pytest.raises(ConfigError):
        load_config(home, env={})
    (home / "config.yaml").write_text("platform_hints:\n  telegram: &h {append: a}\n  slack: *h\n")
    with pytest.raises(ConfigError, match="anchors and aliases are not allowed"):
        load_config(home, env={})


def test_oversized_and_non_utf8_files(home: Path) -> None:
    (home / "config.yaml").write_bytes(b"web:\n  host: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"config.yaml:2: not valid UTF-8"):
        load_config(home, env={})
    (home / "config.yaml").write_text("# x\n" * 300_000)
    with pytest.raises(ConfigError, match="the limit is 1,000,000"):
        load_config(home, env={})


def test_good_config_with_env_refs_and_masked_secrets(home: Path) -> None:
    (home / "config.yaml").write_text(
        textwrap.dedent("""\
        model:
          provider: openai
          name: gpt-test
          api_key: ${MY_KEY}
          fallback: {provider: anthropic, name: claude-test}
        telegram:
          token: ${TG}
          allowed_users: [123, "@alice"]
        agent:
          tool_use_enforcement: [gpt, qwen]
        session_reset:
          idle_minutes: 0.1
          by_platform: {telegram: {mode: idle}}
          by_chat_type: {group: {at_hour: 6}}
        platform_hints:
          telegram: be brief
          slack: {replace: x, append: y}
        """)
    )
    cfg = load_config(home, env={"MY_KEY": "sk-live-123456", "TG": "123:SECRETSECRET"})
    assert cfg.model is not None and cfg.model.api_key == "sk-live-123456"
    assert cfg.model.fallback is not None and cfg.model.fallback.provider == "anthropic"
    assert cfg.telegram is not None and cfg.telegram.allowed_users == ("123", "@alice")
    assert cfg.agent.tool_use_enforcement == ("gpt", "qwen")
    assert cfg.session_reset.idle_minutes == 0.1
    assert cfg.session_reset.by_platform["telegram"].mode == "idle"
    assert cfg.platform_hints["telegram"].append == "be brief"
    assert cfg.platform_hints["slack"].replace == "x"
    shown = repr(cfg)
    assert "sk-live-123456" not in shown and "SECRETSECRET" not in shown


def test_missing_file_means_defaults(home: Path) -> None:
    cfg = load_config(home, env={})
    assert cfg.session_reset.mode == "both" and cfg.web.port == 8765 and cfg.home == home


def _gateway(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli.main", "--home", str(home), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_config_check_command(home: Path) -> None:
    (home / "config.yaml").write_text("web:\n  port: 8765\nsession_reset:\n  mode: sometimes\n")
    bad = _gateway("config", "check", home=home)
    assert bad.returncode == 78
    assert (
        "config.yaml:4: session_reset.mode: expected "
        "one of idle, daily, both, none; got 'sometimes'" in bad.stderr
    )
    (home / "config.yaml").write_text(f"{MODEL}  base_url: claude-x\n")
    bad = _gateway("config", "check", home=home)
    assert bad.returncode == 78
    assert "config.yaml:4: model.base_url: expected an http://" in bad.stderr
    (home / "config.yaml").write_text("web:\n  port: 8765\n")
    good = _gateway("config", "check", home=home)
    assert (good.returncode, good.stdout.strip()) == (0, "ok")


def test_run_refuses_bad_config_with_78(home: Path) -> None:
    (home / "config.yaml").write_text("nonsense: 1\n")
    result = _gateway("run", home=home)
    assert result.returncode == 78
    assert "config.yaml:1: nonsense: unknown key" in result.stderr
