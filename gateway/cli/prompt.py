"""gateway prompt: the system prompt a new session would get (for a person: with their profile), or the stored bytes
of one."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gateway.cli.context import EXIT_ERROR, EXIT_OK, config_of, environ, setup_logging
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.knowledge.memory import MemoryView
    from gateway.ops.wiring import Gateway

PLATFORMS = ["telegram", "discord", "slack", "web", "cli", "cron"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pr = sub.add_parser("prompt", help="print the system prompt a new session would get, or a stored one")
    pr.add_argument("--platform", choices=PLATFORMS,
                    help="default: cli, or with --person the platform of the identity given (else their first)")
    pr.add_argument("--chat-type", default="dm", choices=["dm", "group", "channel"])
    pr.add_argument("--person", metavar="ID", help="as a new session of this person would get it, with their profile: "
                    "a person id or one of their identities (telegram:123; see gateway users list)")
    pr.add_argument("--chat", metavar="CHAT_ID", help="with --chat-type group or channel: that chat's notes too")
    pr.add_argument("--model", help="model name to build for (default: the configured one)")
    pr.add_argument("--tiers", action="store_true", help="show tier boundaries and each block's source")
    pr.add_argument("--session", help="print the stored prompt bytes of a session (key or id)")
    pr.set_defaults(func=cmd_prompt)


def cmd_prompt(args: argparse.Namespace) -> int:
    from gateway.ops.wiring import build_gateway
    config = config_of(args)
    setup_logging(args, config, environ(), level="WARNING")
    gateway = build_gateway(config, env=environ(), probe_ollama=False)
    try:
        if args.session:
            return _stored(gateway, args.session)
        try:
            platform, view = _whose(gateway, args)
        except GatewayError as exc:
            print(exc, file=sys.stderr)
            return EXIT_ERROR
        model = args.model or gateway.llm.model
        built = gateway.prompts.build_full(platform=platform, chat_type=args.chat_type, model=model,
                                           provider=gateway.llm.provider, tool_names=gateway.tool_names(platform),
                                           today=gateway.clock().date(), view=view)
        sys.stdout.write((built.tiers_view() if args.tiers else built.text) + "\n")
        return EXIT_OK
    finally:
        gateway.store.close()


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
    """Where a new session would be (gateway.knowledge.people.OwnedSession), as a real message would key it."""

    key: str
    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None
    user_id: str | None


def _whose(gateway: Gateway, args: argparse.Namespace) -> tuple[str, MemoryView]:
    """The platform and the memory a new session there would show: the shared notes only by default; with
    --person, as a new session of theirs would find it (the same roles and session key as their next message)."""
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
    key = gateway.sessions.key_for(Inbound(chat, user_id or "-", "", "", datetime.now(UTC)))
    view = roles.view_at(_Place(key, platform, chat.chat_type, chat.chat_id, None, user_id))
    if user_id is not None and view.person_id is None:
        print(f"note: a {chat.platform} {chat.chat_type} is one session for everyone in it (sessions.group_per_user "
              "is off): no personal profile in this prompt", file=sys.stderr)
    return platform, view if args.chat else MemoryView(view.person_id, None)


def _account(gateway: Gateway, who: str, platform: str | None) -> tuple[str, str]:
    """(platform, user id) of the person's account a new session would be on: on `platform` when given, else
    the identity named, else their first; the local owner's on the web chat (or the console)."""
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
