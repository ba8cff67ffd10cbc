"""gateway prompt: the system prompt a new session would get (of an agent; for a person: with their
profile), or the stored bytes of one. gateway agents list: the agents of this home, the bindings
that route traffic to them, and the bot accounts with where their direct messages go and how the
running daemon sees them."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gateway.cli.context import EXIT_ERROR, EXIT_OK, config_of, environ, known_secret, setup_logging
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.agents.runtime import AgentRuntime
    from gateway.config.settings import Config
    from gateway.knowledge.memory import MemoryView
    from gateway.ops.wiring import Gateway

PLATFORMS = ["telegram", "discord", "slack", "web", "cli", "cron"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pr = sub.add_parser(
        "prompt", help="print the system prompt a new session would get, or a stored one"
    )
    pr.add_argument(
        "--platform",
        choices=PLATFORMS,
        help="default: cli, or with --person the platform of the identity given (else their first)",
    )
    pr.add_argument("--chat-type", default="dm", choices=["dm", "group", "channel"])
    pr.add_argument(
        "--agent",
        default="main",
        help="the agent whose prompt it is (default: main; see gateway agents list)",
    )
    pr.add_argument(
        "--person",
        metavar="ID",
        help="as a new session of this person would get it, with their profile: "
        "a person id or one of their identities (telegram:123; see gateway users list)",
    )
    pr.add_argument(
        "--chat", metavar="CHAT_ID", help="with --chat-type group or channel: that chat's notes too"
    )
    pr.add_argument("--model", help="model name to build for (default: the configured one)")
    pr.add_argument(
        "--tiers", action="store_true", help="show tier boundaries and each block's source"
    )
    pr.add_argument("--session", help="print the stored prompt bytes of a session (key or id)")
    pr.set_defaults(func=cmd_prompt)
    _register_agents(sub)


def cmd_prompt(args: argparse.Namespace) -> int:
    from gateway.ops.wiring import build_gateway

    config = config_of(args)
    setup_logging(args, config, environ(), level="WARNING")
    gateway = build_gateway(config, env=environ(), probe_ollama=False)
    try:
        if args.session:
            return _stored(gateway, args.session)
        try:
            agent = _agent(gateway, args.agent)
            platform, view = _whose(gateway, args)
        except GatewayError as exc:
            print(exc, file=sys.stderr)
            return EXIT_ERROR
        model = args.model or agent.llm.model
        tools = [s.name for s in agent.catalog.current(platform)]
        built = agent.prompts.build_full(
            platform=platform,
            chat_type=args.chat_type,
            model=model,
            provider=agent.llm.provider,
            tool_names=tools,
            today=gateway.clock().date(),
            view=view,
        )
        sys.stdout.write((built.tiers_view() if args.tiers else built.text) + "\n")
        return EXIT_OK
    finally:
        gateway.store.close()


def _agent(gateway: Gateway, name: str) -> AgentRuntime:
    roster = gateway.roster
    assert roster is not None
    if name not in roster.names:
        raise GatewayError(f"no agent named {name!r} (agents: {', '.join(roster.names)})")
    return roster.get(name)


def _stored(gateway: Gateway, session: str) -> int:
    row = gateway.store.active_session(session) or gateway.store.latest_session(session)
    if row is None and session.isdigit():
        row = gateway.store.session(int(session))
    if row is None or row.system_prompt is None:
        print(f"no stored prompt for session {session!r}", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(row.system_prompt + "\n")
    return EXIT_OK


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a new session would be (gateway.knowledge.people.OwnedSession), as a real message would
    key it."""

    key: str
    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None
    user_id: str | None


def _whose(gateway: Gateway, args: argparse.Namespace) -> tuple[str, MemoryView]:
    """The platform and the memory a new session there would show: the shared notes only by default;
    with --person, as a new session of theirs would find it (the same roles and session key as their
    next message)."""
    from gateway.events import ChatRef, Inbound
    from gateway.knowledge.memory import NO_VIEW, MemoryView

    if args.chat is not None and args.chat_type == "dm":
        raise GatewayError("--chat names a group or channel: add --chat-type group (or channel)")
    platform, user_id = args.platform or "cli", None
    if args.person is not None:
        platform, user_id = _account(gateway, args.person, args.platform)
    roles = gateway.roles
    if roles is None or (user_id is None and args.chat is None):
        return platform, NO_VIEW
    dm = args.chat_type == "dm"
    chat = ChatRef(platform, args.chat_type, (user_id or "") if dm else args.chat or "-")
    asker = Inbound(chat, user_id or "-", "", "", datetime.now(UTC), agent=args.agent)
    key = gateway.sessions.key_for(asker)
    view = roles.view_at(_Place(key, platform, chat.chat_type, chat.chat_id, None, user_id))
    if user_id is not None and view.person_id is None:
        print(
            f"note: a {chat.platform} {chat.chat_type} is one session for everyone in it "
            "(sessions.group_per_user is off): no personal profile in this prompt",
            file=sys.stderr,
        )
    return platform, view if args.chat else MemoryView(view.person_id, None)


def _account(gateway: Gateway, who: str, platform: str | None) -> tuple[str, str]:
    """(platform, user id) of the person's account a new session would be on: on `platform` when
    given, else the identity named, else their first; the local owner's on the web chat (or the
    console)."""
    from gateway.knowledge.people import LOCAL_OWNER, OWNER_PLATFORMS

    person = gateway.people.lookup(who)
    if person is None:
        raise GatewayError(f"no person {who!r} (see `gateway users list`)")
    wanted = platform or (who.partition(":")[0] if ":" in who else None)
    for identity in person.identities:
        if identity.identity == LOCAL_OWNER and (wanted is None or wanted in OWNER_PLATFORMS):
            return wanted or "web", identity.user_id
        if wanted is None or identity.platform == wanted:
            return identity.platform, identity.user_id
    raise GatewayError(f"{person.label()} has no identity on {wanted}")


def _register_agents(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ag = sub.add_parser(
        "agents", help="the agents, the bindings that route traffic to them, the bot accounts"
    )
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
    """What `gateway agents list` shows: `health` is the daemon's /status `adapters` (None: no
    daemon answers)."""
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
            accounts.append(
                {
                    "platform": platform,
                    "account": name,
                    "adapter": key,
                    "dm_agent": dm,
                    "health": state,
                }
            )
    return {
        "agents": [_agent_row(config, name) for name in agent_names(config)],
        "default": default_agent(config),
        "bindings": [
            {k: v for k, v in asdict(b).items() if v is not None} for b in config.bindings
        ],
        "accounts": accounts,
        "daemon": health is not None,
    }


def _agent_row(config: Config, name: str) -> dict[str, Any]:
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
    return {
        "name": name,
        "configured": spec is not None,
        "model": f"{model.provider}/{model.name}" if model is not None else "auto-detected",
        "own_model": spec is not None and spec.model is not None,
        "identity": identity,
        "memory": str(agent_memories(memories, name).relative_to(config.home)) + "/",
        "profiles": "shared" if name == "main" or (spec and spec.memory == "shared") else "own",
    }


def _health(config: Config) -> dict[str, Any] | None:
    """The running daemon's adapters (GET /status); None when none answers."""
    if not config.web.enabled:
        return None
    from gateway.telemetry.logs import redact_tree, redactor_for
    from gateway.telemetry.status_client import fetch_status

    try:
        data = fetch_status(config.web.host, config.web.port, secret=known_secret(config))
    except OSError:
        return None
    redacted = redact_tree(data, redactor_for(config, environ()))
    adapters: dict[str, Any] = redacted.get("adapters") or {}
    return adapters


def render(data: dict[str, Any]) -> str:
    lines = [f"Agents ({len(data['agents'])}):"]
    for agent in data["agents"]:
        default = " (default)" if agent["name"] == data["default"] else ""
        model = agent["model"] + ("" if agent["own_model"] else " (the gateway's)")
        lines.append(
            f"  {agent['name']}{default}: model {model}; identity {agent['identity']}; "
            f"memory {agent['memory']} (profiles: {agent['profiles']})"
        )
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
