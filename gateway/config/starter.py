"""The commented config.yaml that `gateway init` writes, from the answers it collected.

It names environment variables and never holds a secret; every value the user typed is written as a
JSON string (valid YAML), so no answer can change the file's structure. The result must load with
settings.load_config.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `gateway init` imports this module before anything else: it stays light
    from gateway.config.settings import Provider

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CHAT_PLATFORMS = ("telegram", "discord", "slack")
TOKEN_VARS = {
    "telegram": ("TELEGRAM_BOT_TOKEN",),
    "discord": ("DISCORD_BOT_TOKEN",),
    "slack": ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"),
}


@dataclass(frozen=True, slots=True)
class PlatformChoice:
    """One chat platform: the variables holding its
    tokens (Slack: bot, then app) and who may talk."""

    name: str
    token_envs: tuple[str, ...]
    allowed_users: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Starter:
    """Everything `gateway init` asks for."""

    provider: Provider
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    # only when known to differ from the default (a local Ollama model)
    context_window: int | None = None
    platforms: tuple[PlatformChoice, ...] = ()
    pairing: bool = True
    admins: tuple[str, ...] = ()
    web_port: int = 8765
    written_on: date = field(default_factory=date.today)

    def env_names(self) -> list[str]:
        """The environment variables the written config
        needs at start-up, in the order they appear."""
        names = [self.api_key_env] if self.api_key_env else []
        return [*names, *(var for p in self.platforms for var in p.token_envs)]


# What a user id looks like on each platform, and where a person finds theirs: an id in another
# shape (a Telegram name without its @, a Discord or Slack display name) would match nobody, and the
# person would never get an answer.
USER_IDS = {
    "telegram": (
        re.compile(r"-?\d+|@\w+"),
        "a number (@userinfobot tells you yours) or an @username",
    ),
    "discord": (
        re.compile(r"\d+"),
        "a number (User Settings → Advanced → Developer Mode, then Copy User ID)",
    ),
    "slack": (
        re.compile(r"[UW][A-Z0-9]+"),
        "a member id like U012AB3CDE (a profile's ⋮ menu → Copy member ID)",
    ),
}


def check_user_id(platform: str, user: str) -> str:
    """A user id as `platform` writes it, or ValueError saying what one looks like there."""
    shape, hint = USER_IDS[platform]
    if not shape.fullmatch(user):
        raise ValueError(f"{user!r} is not a {platform.capitalize()} user id: expected {hint}")
    return user


def check_env_name(name: str) -> str:
    """An environment variable name, or ValueError saying what is wrong with it."""
    if not ENV_NAME.fullmatch(name):
        raise ValueError(
            f"{name!r} is not an environment variable name (letters, digits, _; not starting "
            "with a digit)"
        )
    return name


def render(s: Starter) -> str:
    """The file's text: a header, then model, web, each chosen platform and access, each with a
    short why."""
    parts = [_header(s), _model(s), _web(s), *(_platform(p) for p in s.platforms), _access(s)]
    return "\n".join(parts)


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(_q(v) for v in values) + "]"


def _header(s: Starter) -> str:
    return (
        f"# agent-gateway configuration, written by `gateway init` on {s.written_on.isoformat()}.\n"
        "# Every key is described in docs/configuration.md; "
        "`gateway config check` validates this file.\n"
        "# No secret is written here: ${NAME} and *_env "
        "name environment variables, read at start-up\n"
        "# (export them, or put them in the service's env "
        "file: ~/.config/agent-gateway/env for the user\n"
        "# unit, /etc/agent-gateway/env for the system unit).\n"
    )


def _model(s: Starter) -> str:
    lines = [
        (
            "# Which model answers. provider is the wire "
            "protocol: anthropic (Messages API) or openai (Chat"
        ),
        "# Completions: OpenAI, OpenRouter, vLLM, Ollama, llama.cpp …).",
        "model:",
        f"  provider: {s.provider}",
        f"  name: {_q(s.model)}",
    ]
    if s.base_url:
        lines.append(
            f"  base_url: {_q(s.base_url)}          # the "
            "API endpoint (OpenAI-compatible: ends in /v1)"
        )
    if s.api_key_env:
        lines.append(
            f"  api_key_env: {s.api_key_env}          # the environment variable that holds the key"
        )
    else:
        lines.append(
            "  # no key is sent: if this server needs one, add  api_key_env: NAME_OF_ITS_VARIABLE"
        )
    if s.context_window:
        lines.append(f"  context_window: {s.context_window}")
    return "\n".join(lines) + "\n"


def _web(s: Starter) -> str:
    return (
        "# The web chat and the dashboard (/dashboard), on "
        "this machine only. The first start creates a login\n"
        "# secret in web.key; `gateway run` and `gateway "
        "web-url` print the link that logs a browser in.\n"
        f"web:\n  host: 127.0.0.1\n  port: {s.web_port}\n"
    )


def _platform(p: PlatformChoice) -> str:
    users = f"  allowed_users: {_list(p.allowed_users)}"
    who = "          # user ids that get an answer; everyone else is refused (or paired, below)"
    if p.name == "telegram":
        return (
            "# Telegram: a bot made with @BotFather (docs/telegram.md).\n"
            f"telegram:\n  token: ${{{p.token_envs[0]}}}\n{users}{who}\n"
        )
    if p.name == "discord":
        return (
            "# Discord: an application with a bot user and "
            "the Message Content intent (docs/discord.md).\n"
            f"discord:\n  token: ${{{p.token_envs[0]}}}\n{users}{who}\n"
        )
    bot, app = p.token_envs
    return (
        "# Slack: an app in Socket Mode, from docs/slack-app-manifest.yaml (docs/slack.md).\n"
        f"slack:\n  bot_token: ${{{bot}}}          # "
        f"xoxb-…\n  app_token: ${{{app}}}          # xapp-… "
        f"(connections:write)\n{users}{who}\n"
    )


def _access(s: Starter) -> str:
    mode = "pair" if s.pairing else "ignore"
    lines = [
        (
            "# Strangers in a DM: pair = they get a code, and "
            "you let them in with `gateway pairing approve CODE`"
        ),
        (
            "# (or from the dashboard); ignore = no answer at "
            "all. The web chat and the terminal are yours alone."
        ),
        "access:",
        f"  unknown_dm: {mode}",
    ]
    if s.admins:
        lines.append(
            f"  admins: {_list(s.admins)}          # may "
            "approve codes in the chat with /approve CODE"
        )
    else:
        lines.append(
            '  # admins: ["telegram:123456789"]          # '
            "may approve codes in the chat with /approve CODE"
        )
    return "\n".join(lines) + "\n"
