"""gateway agents list: the agents of this home, the bindings that route traffic to them, and the bot accounts
with where their direct messages go and how the running daemon sees them."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from gateway.cli.context import EXIT_OK, config_of
from gateway.config.settings import Config, environ


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ag = sub.add_parser("agents", help="the agents, the bindings that route traffic to them, the bot accounts")
    ag_sub = ag.add_subparsers(dest="agents_command", required=True)
    ls = ag_sub.add_parser("list", help="agents, bindings and accounts, with each account's health")
    ls.add_argument("--json", action="store_true", help="the same as JSON")
    ls.set_defaults(func=cmd_agents_list)


def cmd_agents_list(args: argparse.Namespace) -> int:
    config = config_of(args)
    data = listing(config, _health(config))
    print(json.dumps(data, indent=2) if args.json else render(data))
    return EXIT_OK


def listing(config: Config, health: dict[str, Any] | None) -> dict[str, Any]:
    """What `gateway agents list` shows: `health` is the daemon's /status `adapters` (None: no daemon)."""
    from gateway.config.agents import Bindings, Place, agent_names, default_agent
    from gateway.config.platforms import platform_accounts
    from gateway.events import adapter_key
    bindings = Bindings(config)
    accounts = []
    for platform in ("telegram", "discord", "slack", "web"):
        if platform == "web":
            names = ["default"] if config.web.enabled else []
        else:
            names = list(platform_accounts(getattr(config, platform)))
        for name in names:
            key = adapter_key(platform, name)
            dm = bindings.agent_for(Place(platform, name, "", "dm"))
            state = None if health is None else health.get(key, {"state": "not running"})
            accounts.append({"platform": platform, "account": name, "adapter": key, "dm_agent": dm,
                             "health": state})
    return {"agents": [_agent(config, name) for name in agent_names(config)],
            "default": default_agent(config),
            "bindings": [{k: v for k, v in asdict(b).items() if v is not None} for b in config.bindings],
            "accounts": accounts, "daemon": health is not None}


def _agent(config: Config, name: str) -> dict[str, Any]:
    from gateway.config.agents import agent_config, soul_path
    from gateway.knowledge.memory import agent_memories
    spec = config.agents.get(name)
    model = agent_config(config, name).model
    memories = config.home / "memories"
    if spec is not None and spec.identity is not None:
        identity = f"agents.{name}.identity"
    else:
        soul = soul_path(config, name)
        identity = str(soul) if soul.is_file() else "built-in (no SOUL.md)"
    return {"name": name, "configured": spec is not None,
            "model": f"{model.provider}/{model.name}" if model is not None else "auto-detected",
            "own_model": spec is not None and spec.model is not None, "identity": identity,
            "memory": str(agent_memories(memories, name).relative_to(config.home)) + "/",
            "profiles": "shared" if name == "main" or (spec is not None and spec.memory == "shared") else "own"}


def _health(config: Config) -> dict[str, Any] | None:
    """The running daemon's adapters (GET /status); None when none answers."""
    if not config.web.enabled:
        return None
    from gateway.cli.service import _known_secret
    from gateway.ops.status import fetch_status
    from gateway.telemetry.logs import redact_tree, redactor_for
    try:
        data = fetch_status(config.web.host, config.web.port, secret=_known_secret(config))
    except OSError:
        return None
    adapters: dict[str, Any] = redact_tree(data, redactor_for(config, environ())).get("adapters") or {}
    return adapters


def render(data: dict[str, Any]) -> str:
    lines = [f"Agents ({len(data['agents'])}):"]
    for agent in data["agents"]:
        default = " (default)" if agent["name"] == data["default"] else ""
        model = agent["model"] + ("" if agent["own_model"] else " (the gateway's)")
        lines.append(f"  {agent['name']}{default}: model {model}; identity {agent['identity']}; memory "
                     f"{agent['memory']} (profiles: {agent['profiles']})")
    lines.append("Bindings (first match wins):")
    for n, binding in enumerate(data["bindings"], 1):
        where = ", ".join(f"{k} {v}" for k, v in binding.items() if k != "agent") or "everything"
        lines.append(f"  {n}. {where} → {binding['agent']}")
    lines.append(f"  anything else → {data['default']}")
    lines.append("Accounts:" + ("" if data["daemon"] else " (no daemon answers: health unknown)"))
    for account in data["accounts"]:
        health = account["health"]
        state = "" if health is None else f"; {_state(health)}"
        lines.append(f"  {account['adapter']}: direct messages → {account['dm_agent']}{state}")
    return "\n".join(lines)


def _state(health: dict[str, Any]) -> str:
    text = str(health.get("state", "unknown"))
    if health.get("connected_since"):
        text += f" since {health['connected_since']}"
    if health.get("last_error") and text != "running":
        text += f" (last error: {health['last_error']})"
    return text
