"""gateway prompt: the system prompt a new session would get, or the stored bytes of one."""

from __future__ import annotations

import argparse
import sys

from gateway.cli.context import EXIT_ERROR, EXIT_OK, config_of, setup_logging
from gateway.config.settings import environ


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pr = sub.add_parser("prompt", help="print the system prompt a new session would get, or a stored one")
    pr.add_argument("--platform", default="cli", choices=["telegram", "discord", "slack", "web", "cli", "cron"])
    pr.add_argument("--chat-type", default="dm", choices=["dm", "group", "channel"])
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
            row = gateway.store.active_session(args.session) or gateway.store.latest_session(args.session)
            if row is None and args.session.isdigit():
                row = gateway.store.session(int(args.session))
            if row is None or row.system_prompt is None:
                print(f"no stored prompt for session {args.session!r}", file=sys.stderr)
                return EXIT_ERROR
            sys.stdout.write(row.system_prompt + "\n")
            return EXIT_OK
        model = args.model or gateway.llm.model
        built = gateway.prompts.build_full(platform=args.platform, chat_type=args.chat_type, model=model,
                                           provider=gateway.llm.provider, tool_names=gateway.tool_names(args.platform),
                                           today=gateway.clock().date())
        sys.stdout.write((built.tiers_view() if args.tiers else built.text) + "\n")
        return EXIT_OK
    finally:
        gateway.store.close()
