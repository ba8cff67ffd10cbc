"""The daemon imports a platform's libraries only when that platform is configured
(gateway/ops/wiring.py platform_adapters, gateway/delivery/markup/render.py): a web-chat-only daemon
loads no aiogram, discord.py, slack-bolt, nor the Telegram or Slack/Discord Markdown renderers, also
after a reply is rendered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

WATCHED = (
    "aiogram",
    "discord",
    "slack_bolt",
    "slack_sdk",
    "telegramify_markdown",
    "pyromark",
    "markdown_it",
)
DAEMON = f"""
import sys
from pathlib import Path
from gateway.config.settings import load_config
from gateway.events import ChatRef
from gateway.ops.wiring import build_gateway, platform_adapters
import gateway.cli.main, gateway.ops.daemon
config = load_config(Path(sys.argv[1]), env={{}})
adapters = platform_adapters(config)
gw = build_gateway(config, env={{}}, adapters=adapters, probe_ollama=False)
for platform in sys.argv[2:]:
    gw.outbox.rows_for("t1", ChatRef(platform, "dm", "1"), "**bold** and a [link](https://example.com)")
gw.store.close()
print(" ".join(sorted({{m.split(".")[0] for m in sys.modules if m.split(".")[0] in {WATCHED!r}}})))
"""


def _loaded(home: Path, config: str, *rendered: str) -> set[str]:
    (home / "config.yaml").write_text(config, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", DAEMON, str(home), *rendered],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


@pytest.mark.parametrize("rendered", [(), ("web",)])
def test_a_web_chat_daemon_loads_no_platform_library(home: Path, rendered: tuple[str, ...]) -> None:
    assert _loaded(home, "web:\n  port: 0\n", *rendered) == set()


def test_a_configured_platform_loads_its_own_libraries_only(home: Path) -> None:
    assert _loaded(home, "telegram:\n  token: '1:t'\n  allowed_users: [1]\n", "telegram") == {
        "aiogram",
        "telegramify_markdown",
        "pyromark",
    }
    assert _loaded(
        home, "slack:\n  bot_token: xoxb-1\n  app_token: xapp-1\n  allowed_users: [U1]\n", "slack"
    ) == {"slack_bolt", "slack_sdk", "markdown_it"}
