"""The `gateway` command: run the daemon, chat in the terminal, check config, show prompts.

The only place that maps errors to exit codes (78 = bad config, so systemd does not restart-loop) and
configures logging.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.config
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway.config import Config, default_home, environ, load_config
from gateway.errors import ConfigError, GatewayError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_RESTART = 75
EXIT_CONFIG = 78

log = logging.getLogger("gateway")


def setup_logging(level: str = "INFO", fmt: str = "auto") -> None:
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"human": {"format": "%(asctime)s %(levelname)-7s %(name)s: %(message)s"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
                                "formatter": "human"}},
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {"aiogram": {"level": "WARNING"}, "discord": {"level": "WARNING"},
                    "httpx2": {"level": "WARNING"}, "apscheduler": {"level": "WARNING"}},
    })


def _home(args: argparse.Namespace) -> Path:
    return Path(args.home).expanduser() if args.home else default_home()


def _config(args: argparse.Namespace) -> Config:
    return load_config(_home(args))


def cmd_config_check(args: argparse.Namespace) -> int:
    try:
        _config(args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG
    print("ok")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from gateway.daemon import build_gateway, check_web_binding, platform_adapters, run_daemon
    config = _config(args)
    setup_logging(args.log_level or config.logging.level, config.logging.format)
    check_web_binding(config)
    gateway = build_gateway(config, env=environ(), adapters=platform_adapters(config))
    asyncio.run(run_daemon(gateway))
    return EXIT_OK


def cmd_chat(args: argparse.Namespace) -> int:
    from adapters.console import ConsoleAdapter
    from gateway.daemon import build_gateway
    config = _config(args)
    setup_logging(args.log_level or "WARNING")
    console = ConsoleAdapter(prompt="you> ")
    gateway = build_gateway(config, env=environ(), adapters=[console])

    async def main() -> None:
        await console.start(gateway.sessions.submit)
        try:
            await gateway.outbox.deliver_pending()
            await console.run()
            await gateway.sessions.wait_idle()
        finally:
            await gateway.llm.close()
            gateway.store.close()

    asyncio.run(main())
    return EXIT_OK


def cmd_prompt(args: argparse.Namespace) -> int:
    from gateway.daemon import build_gateway
    config = _config(args)
    setup_logging("WARNING")
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
                                           provider=gateway.llm.provider, tool_names=gateway.tools.names(),
                                           today=gateway.clock().date())
        sys.stdout.write((built.tiers_view() if args.tiers else built.text) + "\n")
        return EXIT_OK
    finally:
        gateway.store.close()


def cmd_pairing(args: argparse.Namespace) -> int:
    """Works beside a running daemon: both use the same database and the same pairing key file."""
    from gateway.access import Rules, platform_rules
    from gateway.pairing import PairingBook, load_key, render_listing
    from gateway.store import Store, utcnow
    config = _config(args)
    store = Store(config.db_path)
    try:
        book = PairingBook(store, load_key(config.home))
        if args.pairing_command == "list":
            print(render_listing(book, utcnow()))
            return EXIT_OK
        if args.pairing_command == "approve":
            approval = book.approve(args.code, by="cli", now=utcnow())
            ok = approval.status == "approved"
            print(approval.describe(), file=sys.stdout if ok else sys.stderr)
            return EXIT_OK if ok else EXIT_ERROR
        platform, _, user_id = args.who.partition(":")
        if not platform or not user_id:
            print(f"expected PLATFORM:ID (e.g. telegram:123); got {args.who!r}", file=sys.stderr)
            return EXIT_ERROR
        revoked = book.revoke(platform, user_id)
        print(f"revoked {platform}:{user_id}" if revoked else f"{platform}:{user_id} was not approved by pairing")
        if user_id in platform_rules(config).get(platform, Rules()).user_ids:
            print(f"note: {user_id} is still in {platform}.allowed_users in config.yaml; remove it there too")
        return EXIT_OK if revoked else EXIT_ERROR
    finally:
        store.close()


def cmd_sessions(args: argparse.Namespace) -> int:
    from gateway.lifecycle import Policies
    from gateway.session_report import find_session, list_sessions, show_session
    from gateway.store import Store
    config = _config(args)
    store = Store(config.db_path)
    try:
        policies = Policies(config.session_reset, config.sessions.timezone)
        if args.sessions_command == "list":
            active = True if args.active else False if args.ended else None
            print(list_sessions(store, policies, active=active, limit=args.limit))
            return EXIT_OK
        row = find_session(store, args.key_or_id)
        if row is None:
            print(f"no session {args.key_or_id!r}", file=sys.stderr)
            return EXIT_ERROR
        print(show_session(store, policies, row))
        return EXIT_OK
    finally:
        store.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="One LLM agent on your chat platforms.")
    parser.add_argument("--home", help="gateway home (default: $GATEWAY_HOME or ~/.agent-gateway)")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the daemon (web chat + configured platforms)").set_defaults(func=cmd_run)
    sub.add_parser("chat", help="talk to the agent in this terminal (stdin lines → replies)").set_defaults(
        func=cmd_chat)
    cfg = sub.add_parser("config", help="configuration commands")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True)
    cfg_sub.add_parser("check", help="validate config.yaml; print ok or every error with its line").set_defaults(
        func=cmd_config_check)
    pr = sub.add_parser("prompt", help="print the system prompt a new session would get, or a stored one")
    pr.add_argument("--platform", default="cli", choices=["telegram", "discord", "slack", "web", "cli", "cron"])
    pr.add_argument("--chat-type", default="dm", choices=["dm", "group", "channel"])
    pr.add_argument("--model", help="model name to build for (default: the configured one)")
    pr.add_argument("--tiers", action="store_true", help="show tier boundaries and each block's source")
    pr.add_argument("--session", help="print the stored prompt bytes of a session (key or id)")
    pr.set_defaults(func=cmd_prompt)
    se = sub.add_parser("sessions", help="sessions with their reset policy, deadline, end reason and flush state")
    se_sub = se.add_subparsers(dest="sessions_command", required=True)
    ls = se_sub.add_parser("list", help="sessions, newest first")
    which = ls.add_mutually_exclusive_group()
    which.add_argument("--active", action="store_true", help="only sessions still open")
    which.add_argument("--ended", action="store_true", help="only ended sessions")
    ls.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    ls.set_defaults(func=cmd_sessions)
    sh = se_sub.add_parser("show", help="one session in full (a session id, or a key for its latest session)")
    sh.add_argument("key_or_id")
    sh.set_defaults(func=cmd_sessions)
    pa = sub.add_parser("pairing", help="pairing codes: list requests, approve a code, revoke a user")
    pa_sub = pa.add_subparsers(dest="pairing_command", required=True)
    pa_sub.add_parser("list", help="pending requests, approved users, lockouts").set_defaults(func=cmd_pairing)
    ap = pa_sub.add_parser("approve", help="approve the user who was given CODE")
    ap.add_argument("code")
    ap.set_defaults(func=cmd_pairing)
    rv = pa_sub.add_parser("revoke", help="remove a user approved by pairing")
    rv.add_argument("who", metavar="PLATFORM:ID")
    rv.set_defaults(func=cmd_pairing)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"config error:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    except GatewayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
