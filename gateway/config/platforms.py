"""The chat platforms' sections: `telegram:`, `discord:`, `slack:`, each one bot account or several.

`XConfig` is one bot account (its token and settings); the section (`XSection`) is that same
account, the account `default`, plus `accounts:`, more bots of that platform. An account is written
with only the keys it changes: the others come from the section (gateway/config/accounts.py fills
them in before loading), except the tokens, which every account brings itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from gateway.config.yamlload import KeyProblem, Secret
from gateway.events import DEFAULT_ACCOUNT

PlatformName = Literal["telegram", "discord", "slack", "web", "cli", "cron"]
ChatTypeName = Literal["dm", "group", "channel"]
ACCOUNT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


@dataclass(frozen=True, slots=True)
class BindingSpec:
    """One of `bindings:` (first match wins): traffic that matches every key set here goes to
    `agent`. `chat` is a chat, channel or thread id; `space` a Discord server or Slack workspace."""

    agent: str
    platform: PlatformName | None = None
    account: str | None = None
    chat: str | None = None
    chat_type: ChatTypeName | None = None
    space: str | None = None

    def __post_init__(self) -> None:
        if self.account is not None and self.platform is None:
            raise KeyProblem("account", "an account belongs to a platform: set `platform` too")


NO_TOKEN = Secret("")  # a section that only holds `accounts:` has no token of its own


def _range(lo: float | None = None, hi: float | None = None) -> dict[str, object]:
    return {"min": lo, "max": hi}


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    token: Secret = NO_TOKEN
    api_server: str = "https://api.telegram.org"
    local_api: bool = False
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None
    secret_token: Secret | None = None
    listen_host: str = "127.0.0.1"
    listen_port: int = field(default=8443, metadata=_range(0, 65535))
    path: str = "/telegram/webhook"
    allowed_users: tuple[str, ...] = ()
    allowed_chats: tuple[str, ...] = ()
    require_mention: bool = True
    group_sessions_per_user: bool | None = None
    answer_edited: bool = False
    answer_channel_posts: bool = False
    answer_bots: bool = False
    polling_timeout: int = field(default=30, metadata=_range(0, 60))

    def __post_init__(self) -> None:
        _own_token(self, TelegramConfig, "token")
        if self.token and self.mode == "webhook" and not self.webhook_url:
            raise ValueError("telegram.webhook_url is required when mode is webhook")


@dataclass(frozen=True, slots=True)
class ShardsConfig:
    """`discord.shards: {count: N, ids: [...]}`: of the bot's N shards, this process runs `ids`
    (all of them when unset); another process with the same token runs the others."""

    count: int = field(metadata=_range(1, 100_000))
    ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        ids = self.ids or ()
        if self.ids is not None and not ids:
            raise KeyProblem("ids", "expected at least one shard id (or leave `ids` out: all)")
        wrong = [i for i in ids if not 0 <= i < self.count]
        if wrong:
            raise KeyProblem(
                "ids", f"shard ids run from 0 to {self.count - 1} (count {self.count}); got {wrong}"
            )
        if len(set(ids)) != len(ids):
            raise KeyProblem("ids", "a shard id is listed twice")

    @property
    def shard_ids(self) -> tuple[int, ...]:
        return self.ids if self.ids is not None else tuple(range(self.count))


@dataclass(frozen=True, slots=True)
class DiscordConfig:
    token: Secret = NO_TOKEN
    allowed_users: tuple[str, ...] = ()
    allowed_guilds: tuple[str, ...] = ()
    allowed_channels: tuple[str, ...] = ()
    allowed_roles: tuple[str, ...] = ()
    require_mention: bool = True
    thread_replies: Literal["off", "auto"] = "off"
    group_sessions_per_user: bool | None = None
    command_sync: Literal["global", "guilds", "off"] = "global"
    answer_bots: bool = False
    max_lines: int | None = field(default=None, metadata={"positive": True})
    api_base: str | None = None
    gateway_url: str | None = None
    shards: Literal["auto"] | ShardsConfig | None = None

    def __post_init__(self) -> None:
        _own_token(self, DiscordConfig, "token")


@dataclass(frozen=True, slots=True)
class SlackConfig:
    bot_token: Secret = NO_TOKEN
    app_token: Secret | None = None
    signing_secret: Secret | None = None
    mode: Literal["socket", "http"] = "socket"
    listen_host: str = "127.0.0.1"
    listen_port: int = field(default=3000, metadata=_range(0, 65535))
    path: str = "/slack/events"
    api_url: str | None = None
    allowed_users: tuple[str, ...] = ()
    allowed_channels: tuple[str, ...] = ()
    reply_in_thread: Literal["always", "when_threaded"] = "always"
    require_mention: bool = True
    group_sessions_per_user: bool | None = None
    thread_history_limit: int = field(default=20, metadata=_range(0, 1000))
    slash_command: str = "/agent"
    liveness_minutes: float = field(default=5.0, metadata={"positive": True})
    answer_bots: bool = False

    def __post_init__(self) -> None:
        _own_token(self, SlackConfig, "bot_token")
        if not self.bot_token:
            return  # a section that only holds `accounts:`; each account is checked on its own
        if self.mode == "socket" and not self.app_token:
            raise ValueError(
                "slack.app_token is required when mode is socket (set SLACK_APP_TOKEN)"
            )
        if self.mode == "http" and not self.signing_secret:
            raise ValueError(
                "slack.signing_secret is required when mode is http (set SLACK_SIGNING_SECRET)"
            )


@dataclass(frozen=True, slots=True)
class TelegramSection(TelegramConfig):
    accounts: dict[str, TelegramConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        TelegramConfig.__post_init__(self)
        check_accounts(self, "token", webhook=lambda a: a.mode == "webhook")


@dataclass(frozen=True, slots=True)
class DiscordSection(DiscordConfig):
    accounts: dict[str, DiscordConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_accounts(self, "token")


@dataclass(frozen=True, slots=True)
class SlackSection(SlackConfig):
    accounts: dict[str, SlackConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        SlackConfig.__post_init__(self)
        check_accounts(self, "bot_token", webhook=lambda a: a.mode == "http")


def platform_accounts(
    section: TelegramSection | DiscordSection | SlackSection | None,
) -> dict[str, TelegramConfig | DiscordConfig | SlackConfig]:
    """Every bot account of a platform section by name: `default` (the section's own token, when it
    has one) first, then `accounts:` in the file's order. None (platform off): none."""
    if section is None:
        return {}
    found: dict[str, TelegramConfig | DiscordConfig | SlackConfig] = {}
    if _token(section):
        found[DEFAULT_ACCOUNT] = replace(cast(Any, section), accounts={})
    found.update(section.accounts)
    return found


def _own_token(account: object, kind: type, token_key: str) -> None:
    """An account under `accounts:` brings its own token (the section may go without one)."""
    if type(account) is kind and not _token(account):
        raise KeyProblem(token_key, "required key is missing")


def _token(account: object) -> str:
    return str(getattr(account, "token", None) or getattr(account, "bot_token", None) or "")


def check_accounts(
    section: TelegramSection | DiscordSection | SlackSection,
    token_key: str,
    *,
    webhook: Callable[[Any], bool] | None = None,
) -> None:
    """A section needs a token or `accounts:`; account names are words; no two accounts are one bot,
    and no two accounts serve webhooks on one port."""
    accounts: Mapping[str, object] = section.accounts
    if not _token(section) and not accounts:
        raise KeyProblem(token_key, "required key is missing (or give `accounts:`)")
    bad = [n for n in accounts if not ACCOUNT_NAME.fullmatch(n)]
    if bad:
        raise KeyProblem(
            "accounts",
            f"{bad[0]!r} cannot name an account: use lowercase letters, digits, - and _ (up to 32)",
        )
    if _token(section) and DEFAULT_ACCOUNT in accounts:
        raise KeyProblem(
            "accounts",
            f"the section's own {token_key} is the account `default`: "
            "name this account otherwise, or move the token into it",
        )
    every = {**({DEFAULT_ACCOUNT: section} if _token(section) else {}), **accounts}
    tokens = [_token(a) for a in every.values()]
    if len(set(tokens)) != len(tokens):
        raise KeyProblem(
            "accounts",
            f"two accounts have the same {token_key}: they would be one "
            "bot; give each account its own",
        )
    if webhook is not None:
        listeners: list[Any] = [a for a in every.values() if webhook(a)]
        ports = [(a.listen_host, a.listen_port) for a in listeners if a.listen_port]
        if len(set(ports)) != len(ports):
            raise KeyProblem(
                "accounts",
                "two accounts listen on the same listen_host and "
                "listen_port: give each its own port",
            )
