"""The configuration: `GATEWAY_HOME/config.yaml` → frozen dataclasses, validated once, passed down.

Defaults live only in the field definitions below (docs/configuration.md is checked against them by
a test). This is the only module that reads the environment; secrets are `Secret` strings, masked in
repr.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import yaml

from gateway.config.accounts import inherit_accounts
from gateway.config.media import MediaConfig, TranscriptionConfig
from gateway.config.platforms import (
    BindingSpec,
    ChatTypeName,
    DiscordConfig,
    DiscordSection,
    PlatformName,
    SlackConfig,
    SlackSection,
    TelegramConfig,
    TelegramSection,
)
from gateway.config.schedule import ScheduleConfig
from gateway.config.tools import McpServerConfig, ToolsConfig
from gateway.config.voice import VoiceConfig
from gateway.config.yamlload import KeyProblem, Secret, load_dataclass, read_yaml_file
from gateway.errors import ConfigError
from gateway.events import PLATFORMS

__all__ = [
    "ChatTypeName",
    "Config",
    "DiscordConfig",
    "MediaConfig",
    "PlatformName",
    "Secret",
    "SlackConfig",
    "TelegramConfig",
    "TranscriptionConfig",
    "default_home",
    "load_config",
]

Provider = Literal["anthropic", "openai"]
ResetMode = Literal["idle", "daily", "both", "none"]
BusyPolicy = Literal["queue", "interrupt"]
StreamMode = Literal["off", "edit", "progress"]

WEB_KEY_FILE = "web.key"  # in the home: the web login secret


def _positive(**kw: object) -> dict[str, object]:
    return {"positive": True, **kw}


def _range(lo: float | None = None, hi: float | None = None) -> dict[str, object]:
    return {"min": lo, "max": hi}


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """One model and how to reach it; `model.fallback`
    is one of these (a fallback has no fallback)."""

    provider: Provider
    name: str
    base_url: str | None = None
    api_key_env: str | None = None
    api_key: Secret | None = None
    max_tokens: int = field(default=4096, metadata=_positive())
    timeout_s: float = field(default=120.0, metadata=_positive())
    max_retries: int = field(default=2, metadata=_range(0, 10))
    context_window: int = field(default=200_000, metadata=_positive())
    client: Literal["native", "sdk"] = "native"
    vision: bool | Literal["auto"] = "auto"

    def __post_init__(self) -> None:
        try:
            check_base_url(self.base_url)
        except ValueError as exc:
            raise KeyProblem("base_url", str(exc)) from None


def check_base_url(url: str | None, *, flag: str = "") -> str | None:
    """`url` when it can be a model's endpoint (an http(s) URL with a host), else ValueError (its
    text after `flag: ` when given); None when there is none."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or not port_ok
        or any(ch.isspace() for ch in url)
    ):
        said = f"{flag}: " if flag else ""
        raise ValueError(
            f"{said}expected an http:// or https:// URL with a host (e.g. "
            f"https://api.example.com/v1); got {url!r}"
        )
    return url


@dataclass(frozen=True, slots=True)
class ModelConfig(ModelEndpoint):
    fallback: ModelEndpoint | None = None


@dataclass(frozen=True, slots=True)
class AgentConfig:
    max_iterations: int = field(default=20, metadata=_range(1, 200))
    system_message: str | None = None
    workdir: Path | None = None
    tool_use_enforcement: bool | Literal["auto"] | tuple[str, ...] = "auto"
    context_file_max_chars: int = field(default=20_000, metadata=_positive())
    compress_at: float = field(default=0.8, metadata=_range(0.1, 1.0))
    keep_recent: int = field(default=12, metadata=_range(2, 1000))
    tools: tuple[str, ...] | None = None
    tools_by_platform: dict[PlatformName, tuple[str, ...]] = field(default_factory=dict)
    turn_timeout_s: float = field(default=600.0, metadata=_positive())


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    memory_char_limit: int = field(default=2200, metadata=_positive())
    user_char_limit: int = field(default=1375, metadata=_positive())
    flush_enabled: bool = True
    flush_min_messages: int = field(default=4, metadata=_range(0, None))
    flush_max_iterations: int = field(default=8, metadata=_range(1, 50))
    flush_timeout_s: float = field(default=180.0, metadata=_positive())
    flush_concurrency: int = field(default=2, metadata=_range(1, 32))
    shared_writers: Literal["admins", "everyone"] = "admins"
    chat_notes: bool = True
    chat_char_limit: int = field(default=1000, metadata=_positive())
    chat_writers: Literal["admins", "everyone"] = "everyone"


@dataclass(frozen=True, slots=True)
class ResetOverride:
    mode: ResetMode | None = None
    idle_minutes: float | None = field(default=None, metadata=_positive())
    at_hour: int | None = field(default=None, metadata=_range(0, 23))
    notify: bool | None = None


@dataclass(frozen=True, slots=True)
class SessionResetConfig:
    mode: ResetMode = "both"
    idle_minutes: float = field(default=1440.0, metadata=_positive())
    at_hour: int = field(default=4, metadata=_range(0, 23))
    notify: bool = True
    by_platform: dict[PlatformName, ResetOverride] = field(default_factory=dict)
    by_chat_type: dict[ChatTypeName, ResetOverride] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionsConfig:
    group_per_user: bool = True
    busy: BusyPolicy = "queue"
    busy_by_platform: dict[PlatformName, BusyPolicy] = field(default_factory=dict)
    queue_cap: int = field(default=32, metadata=_range(1, 10_000))
    max_concurrent_turns: int = field(default=8, metadata=_range(1, 1000))
    timezone: str | None = None

    def __post_init__(self) -> None:
        if self.timezone is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(
                    f"sessions.timezone: unknown time zone {self.timezone!r}"
                ) from None


@dataclass(frozen=True, slots=True)
class DeliveryConfig:
    replay_max_age_minutes: float = field(default=60.0, metadata=_range(0, None))
    offline_notice: str = (
        "Sorry, I was offline when you sent this. Please send it again if it still matters."
    )
    dedupe_retention_hours: float = field(default=72.0, metadata=_positive())
    max_send_attempts: int = field(default=6, metadata=_range(1, 100))


@dataclass(frozen=True, slots=True)
class StreamingByChat:
    """`streaming.by_platform.<platform>` per chat type; a bare mode there sets all three."""

    dm: StreamMode | None = None
    group: StreamMode | None = None
    channel: StreamMode | None = None


@dataclass(frozen=True, slots=True)
class StreamingConfig:
    """Live previews of an answer while it is written (docs/streaming.md). `auto`: edit in Telegram
    private chats and the web chat, off elsewhere."""

    mode: Literal["auto", "off", "edit", "progress"] = "auto"
    by_platform: dict[PlatformName, StreamMode | StreamingByChat] = field(default_factory=dict)

    def mode_for(self, platform: str, chat_type: str) -> StreamMode:
        override = self.by_platform.get(platform)  # type: ignore[call-overload]
        chosen = (
            getattr(override, chat_type, None)
            if isinstance(override, StreamingByChat)
            else override
        )
        if chosen is not None:
            return chosen  # type: ignore[no-any-return]
        if self.mode != "auto":
            return self.mode
        return (
            "edit" if platform == "web" or (platform == "telegram" and chat_type == "dm") else "off"
        )


@dataclass(frozen=True, slots=True)
class PromptCachingConfig:
    enabled: bool = True
    ttl: Literal["5m", "1h"] = "5m"


@dataclass(frozen=True, slots=True)
class PlatformHintOverride:
    """`{append: ...}`, `{replace: ...}`, both (replace,
    then append), or a bare string meaning append."""

    append: str | None = None
    replace: str | None = None

    @classmethod
    def from_yaml_scalar(cls, text: str) -> PlatformHintOverride:
        return cls(append=text)

    def __post_init__(self) -> None:
        if self.append is None and self.replace is None:
            raise ValueError("expected `append`, `replace` or both")


@dataclass(frozen=True, slots=True)
class WebConfig:
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = field(default=8765, metadata=_range(0, 65535))
    auth_token: Secret | None = None
    auth: Literal["token", "none"] = "token"
    public_url: str | None = None

    def __post_init__(self) -> None:
        if self.enabled and not self.auth_token and not is_loopback_host(self.host):
            # checked by config check too
            raise KeyProblem(
                "host",
                f"{self.host!r} is not a loopback address, so the web chat needs web.auth_token "
                "(e.g. web.auth_token: ${GATEWAY_WEB_TOKEN}); or bind to 127.0.0.1",
            )
        if self.auth == "none" and not is_loopback_host(self.host):
            raise ValueError(
                f"web.auth: none is allowed only with a loopback web.host (it is {self.host!r}); "
                "anyone who reaches the port would be the owner"
            )
        if self.auth == "none" and self.public_url is not None:
            raise ValueError(
                "web.auth: none cannot go with web.public_url: the proxy in front makes the chat "
                "reachable from elsewhere, and anyone reaching it would be the owner"
            )
        if self.public_url is not None and not _ORIGIN.fullmatch(self.public_url):
            raise ValueError(
                f"web.public_url must be scheme://host[:port] (http or https, no path); got "
                f"{self.public_url!r}"
            )


_ORIGIN = re.compile(r"https?://[^/\s?#@]+/?")
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address: only this machine can reach a listener bound there."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class AccessConfig:
    admins: tuple[str, ...] = ()
    unknown_dm: Literal["ignore", "pair"] = "pair"
    bot_loop_budget: int = field(default=5, metadata=_range(0, 10_000))
    bot_loop_cooldown_s: float = field(default=300.0, metadata=_range(0, None))

    def __post_init__(self) -> None:
        for admin in self.admins:
            platform, _, uid = admin.partition(":")
            if platform not in PLATFORMS or not uid:
                raise ValueError(
                    f"access.admins: expected 'platform:user_id' (e.g. telegram:123); got {admin!r}"
                )


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    drain_seconds: float = field(default=20.0, metadata=_range(0, 3600))
    watchdog: bool = True
    max_connections: int = field(default=256, metadata=_range(8, 100_000))


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["auto", "human", "json"] = "auto"


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """`agents.<name>`: one agent, with what it changes of the top-level settings (the rest it takes
    from them). Its identity is `soul` (a file, relative to the home) or `identity` (the text)."""

    default: bool = False
    soul: Path | None = None
    identity: str | None = None
    model: ModelConfig | str | None = None  # its own model, or the name of one of `models:`
    models: tuple[str, ...] | None = None  # of `models:`, those /model switches to here (None: all)
    system_message: str | None = None
    workdir: Path | None = None
    tools: tuple[str, ...] | None = None
    tools_by_platform: dict[PlatformName, tuple[str, ...]] | None = None
    platform_hints: dict[PlatformName, PlatformHintOverride] = field(default_factory=dict)
    busy: BusyPolicy | None = None
    busy_by_platform: dict[PlatformName, BusyPolicy] | None = None
    session_reset: SessionResetConfig | None = None
    memory: Literal["own", "shared"] = "own"

    def __post_init__(self) -> None:
        if self.soul is not None and self.identity is not None:
            raise KeyProblem("identity", "give `soul` (a file) or `identity` (the text), not both")


@dataclass(frozen=True, slots=True)
class Config:
    model: ModelConfig | None = None
    models: dict[str, ModelConfig] = field(default_factory=dict)  # switched to in chat: /model NAME
    models_switch: Literal["admins", "everyone"] = "admins"
    agent: AgentConfig = field(default_factory=AgentConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    session_reset: SessionResetConfig = field(default_factory=SessionResetConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    delivery: DeliveryConfig = field(default_factory=DeliveryConfig)
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    prompt_caching: PromptCachingConfig = field(default_factory=PromptCachingConfig)
    platform_hints: dict[PlatformName, PlatformHintOverride] = field(default_factory=dict)
    web: WebConfig = field(default_factory=WebConfig)
    telegram: TelegramSection | None = None
    discord: DiscordSection | None = None
    slack: SlackSection | None = None
    access: AccessConfig = field(default_factory=AccessConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    media: MediaConfig = field(default_factory=MediaConfig)
    voice: VoiceConfig = field(default_factory=VoiceConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    agents: dict[str, AgentSpec] = field(default_factory=dict)
    bindings: tuple[BindingSpec, ...] = ()
    # Not from the file: where it all lives. Set by load_config.
    home: Path = field(default=Path("."), metadata={"internal": True})

    @property
    def db_path(self) -> Path:
        return self.home / "state.db"

    @property
    def web_key_path(self) -> Path:
        """The web login secret the daemon makes (gateway/ops/web_guard.py)."""
        return self.home / WEB_KEY_FILE


def default_home(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    home = env.get("GATEWAY_HOME")
    return Path(home).expanduser() if home else Path("~/.agent-gateway").expanduser()


def load_config(
    home: Path, *, env: dict[str, str] | None = None, path: Path | None = None
) -> Config:
    """Read `home/config.yaml` (a missing file means all defaults); raise ConfigError(s) naming
    file:line: key."""
    config_path = path or home / "config.yaml"
    environ = dict(os.environ) if env is None else env
    if not config_path.exists():
        if path is not None:
            raise ConfigError("file not found", file=str(config_path))
        return Config(home=home)
    node = read_yaml_file(config_path)
    inherit_accounts(node)  # an account takes its platform's keys it does not set
    loaded: Config = load_dataclass(Config, node, file=str(config_path), env=environ)
    _check_model_names(node, str(config_path))
    return _with_home(loaded, home)


def _check_model_names(node: yaml.Node | None, file: str) -> None:
    """`models:` names are what /model takes: a word, and never `default` (the main model's)."""
    if not isinstance(node, yaml.MappingNode):
        return
    models = next((v for k, v in node.value if k.value == "models"), None)
    for name_node, _ in models.value if isinstance(models, yaml.MappingNode) else ():
        name = str(name_node.value)
        if name == "default" or not _MODEL_NAME.fullmatch(name):
            raise ConfigError(
                f"{name!r} cannot name a model: use letters, digits, - _ . (up to "
                "32; `default` means the main `model`)",
                file=file,
                line=name_node.start_mark.line + 1,
                key=f"models.{name}",
            )


def _with_home(cfg: Config, home: Path) -> Config:
    from dataclasses import replace

    return replace(cfg, home=home)


def environ() -> dict[str, str]:
    """The process environment, for the few places
    (model auto-detection) that legitimately need it."""
    return dict(os.environ)
