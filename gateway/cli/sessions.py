"""gateway sessions list|show: sessions with their
reset policy, deadline, end reason and flush state.
"""

from __future__ import annotations

import argparse
import sys

from gateway.cli.context import EXIT_ERROR, EXIT_OK, config_of


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    se = sub.add_parser(
        "sessions", help="sessions with their reset policy, deadline, end reason and flush state"
    )
    se_sub = se.add_subparsers(dest="sessions_command", required=True)
    ls = se_sub.add_parser("list", help="sessions, newest first")
    which = ls.add_mutually_exclusive_group()
    which.add_argument("--active", action="store_true", help="only sessions still open")
    which.add_argument("--ended", action="store_true", help="only ended sessions")
    ls.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    ls.set_defaults(func=cmd_sessions)
    sh = se_sub.add_parser(
        "show", help="one session in full (a session id, or a key for its latest session)"
    )
    sh.add_argument("key_or_id")
    sh.set_defaults(func=cmd_sessions)


def cmd_sessions(args: argparse.Namespace) -> int:
    from gateway.sessions.lifecycle import Policies
    from gateway.sessions.report import find_session, list_sessions, show_session
    from gateway.store.database import Store

    config = config_of(args)
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
