"""Agents and bindings: which agent a message goes to, and the settings each agent runs with.

Without `agents:` the top-level settings are the one agent, `main`. An agent in `agents:` takes the
top-level settings and changes what it sets; `bindings:` send traffic to it (first match wins), and
what no binding matches goes to the agent with `default: true`, else to `main`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from gateway.config.platforms import ACCOUNT_NAME, BindingSpec, platform_accounts
from gateway.config.settings import Config
from gateway.config.yamlload import locate
from gateway.errors import ConfigError, ConfigErrors
from gateway.events import MAIN_AGENT, Inbound

MAIN = MAIN_AGENT
AGENT_NAME = ACCOUNT_NAME
CHAT_PLATFORMS = ("telegram", "discord", "slack")
T = TypeVar("T")


def agent_names(config: Config) -> tuple[str, ...]:
    """`main` (the top-level settings, always there), then the configured agents in file order."""
    return (MAIN, *(name for name in config.agents if name != MAIN))


def default_agent(config: Config) -> str:
    """Where traffic no binding matches goes: the agent with `default: true`, else `main`."""
    return next((name for name, spec in config.agents.items() if spec.default), MAIN)


def agent_config(config: Config, name: str) -> Config:
    """The settings agent `name` runs with: the top-level ones with its changes. An agent without
    an entry (`main` of a single-agent config, or one no longer configured) runs with the top-level
    ones, the same object, so nothing it builds can differ from a single-agent gateway's."""
    spec = config.agents.get(name)
    if spec is None:
        return config
    top = config.agent
    agent = replace(
        top,
        system_message=_pick(spec.system_message, top.system_message),
        workdir=_pick(spec.workdir, top.workdir),
        tools=_pick(spec.tools, top.tools),
        tools_by_platform=_pick(spec.tools_by_platform, top.tools_by_platform),
    )
    busy = config.sessions
    sessions = replace(
        busy,
        busy=_pick(spec.busy, busy.busy),
        busy_by_platform=_pick(spec.busy_by_platform, busy.busy_by_platform),
    )
    model = config.models.get(spec.model) if isinstance(spec.model, str) else spec.model
    return replace(
        config,
        model=_pick(model, config.model),
        agent=agent,
        sessions=sessions,
        session_reset=_pick(spec.session_reset, config.session_reset),
        platform_hints={**config.platform_hints, **spec.platform_hints},
    )


def _pick(mine: T | None, theirs: T) -> T:
    return theirs if mine is None else mine


def soul_path(config: Config, name: str) -> Path:
    """The agent's identity file: its `soul` (relative to the home), else the home's SOUL.md."""
    spec = config.agents.get(name)
    if spec is not None and spec.soul is not None:
        return spec.soul if spec.soul.is_absolute() else config.home / spec.soul
    return config.home / "SOUL.md"


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message was said, as bindings see it."""

    platform: str
    account: str
    chat_id: str
    chat_type: str
    thread_id: str | None = None
    space_id: str | None = None


def place_of(inbound: Inbound) -> Place:
    chat = inbound.chat
    return Place(
        chat.platform, chat.account, chat.chat_id, chat.chat_type, chat.thread_id, inbound.space_id
    )


class Bindings:
    """`bindings:` in order, then the default agent: resolved once per message, at the gate."""

    def __init__(self, config: Config) -> None:
        self.rules = config.bindings
        self.default = default_agent(config)

    def agent_for(self, place: Place) -> str:
        return next((rule.agent for rule in self.rules if matches(rule, place)), self.default)


def matches(rule: BindingSpec, place: Place) -> bool:
    """Every key the binding sets matches; `chat` names the chat or the thread."""
    return (
        (rule.platform is None or rule.platform == place.platform)
        and (rule.account is None or rule.account == place.account)
        and (rule.chat is None or rule.chat in (place.chat_id, place.thread_id))
        and (rule.chat_type is None or rule.chat_type == place.chat_type)
        and (rule.space is None or rule.space == place.space_id)
    )


def check_agents(config: Config) -> None:
    """ConfigErrors with file and line for what one key alone cannot tell: a binding to an agent or
    an account that does not exist, two default agents, an identity file that is not there."""
    path = config.home / "config.yaml"
    problems = [*_agent_problems(config), *_binding_problems(config)]
    if problems:
        raise ConfigErrors(
            [
                ConfigError(message, file=str(path), line=locate(path, key), key=key)
                for key, message in problems
            ]
        )


def _agent_problems(config: Config) -> Iterator[tuple[str, str]]:
    defaults = [name for name, spec in config.agents.items() if spec.default]
    for name in defaults[1:]:
        yield f"agents.{name}.default", f"only one agent can be the default (already {defaults[0]})"
    for name, spec in config.agents.items():
        if not AGENT_NAME.fullmatch(name):
            yield (
                f"agents.{name}",
                (
                    f"{name!r} cannot name an agent: use lowercase letters, "
                    "digits, - and _ (up to 32)"
                ),
            )
        if spec.soul is not None and not soul_path(config, name).is_file():
            yield f"agents.{name}.soul", f"no such file: {soul_path(config, name)}"
        named = [spec.model] if isinstance(spec.model, str) else []
        for key, wanted in [("model", n) for n in named] + [
            (f"models[{i}]", n) for i, n in enumerate(spec.models or ())
        ]:
            if wanted not in config.models:
                known = ", ".join(config.models) or "none"
                yield f"agents.{name}.{key}", f"no model named {wanted!r} in models: ({known})"


def _binding_problems(config: Config) -> Iterator[tuple[str, str]]:
    agents = agent_names(config)
    for i, rule in enumerate(config.bindings):
        if rule.agent not in agents:
            yield (
                f"bindings[{i}].agent",
                (f"no agent named {rule.agent!r} (agents: {', '.join(agents)})"),
            )
        platform = rule.platform
        if platform in CHAT_PLATFORMS and getattr(config, platform) is None:
            yield (
                f"bindings[{i}].platform",
                (f"{platform} is not configured (no `{platform}:` section)"),
            )
        elif platform is not None and rule.account is not None:
            known = list(platform_accounts(getattr(config, platform, None)))
            if rule.account not in known:
                yield (
                    f"bindings[{i}].account",
                    (
                        f"no {platform} account named {rule.account!r} "
                        f"(accounts: {', '.join(known) or 'none'})"
                    ),
                )
