"""gateway pairing list|approve|revoke: who may talk to the agent, decided from the terminal."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gateway.cli.context import EXIT_ERROR, EXIT_OK, config_of

if TYPE_CHECKING:
    from gateway.store.database import Store


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pa = sub.add_parser(
        "pairing", help="pairing codes: list requests, approve a code, revoke a user"
    )
    pa_sub = pa.add_subparsers(dest="pairing_command", required=True)
    pa_sub.add_parser("list", help="pending requests, approved users, lockouts").set_defaults(
        func=cmd_pairing
    )
    ap = pa_sub.add_parser("approve", help="approve the user who was given CODE")
    ap.add_argument("code")
    ap.set_defaults(func=cmd_pairing)
    rv = pa_sub.add_parser("revoke", help="remove a user approved by pairing")
    rv.add_argument("who", metavar="PLATFORM:ID")
    rv.set_defaults(func=cmd_pairing)


def cmd_pairing(args: argparse.Namespace) -> int:
    """Works beside a running daemon: both use the same database and the same pairing key file."""
    from gateway.access.gate import platform_rules
    from gateway.access.pairing import PairingBook, load_key, render_listing
    from gateway.store.database import Store
    from gateway.store.rows import utcnow

    config = config_of(args)
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
        revoked = False
        for who_platform, who_id in _linked(store, platform, user_id):  # one approval per person
            if book.revoke(who_platform, who_id, now=utcnow()):
                revoked = True
                print(
                    f"revoked {who_platform}:{who_id}; the running "
                    "daemon ends their sessions (flushed) and jobs"
                )
        if not revoked:
            print(f"{platform}:{user_id} was not approved by pairing")
        lists = [r for (p, _), r in platform_rules(config).items() if p == platform]
        if any(user_id in r.user_ids for r in lists):
            print(
                f"note: {user_id} is still in {platform}.allowed_users "
                "in config.yaml; remove it there too"
            )
        return EXIT_OK if revoked else EXIT_ERROR
    finally:
        store.close()


def _linked(store: Store, platform: str, user_id: str) -> list[tuple[str, str]]:
    """This user and every identity linked to theirs (gateway/knowledge/people.py)."""
    from gateway.knowledge.people import PeopleBook, identity_of

    person = PeopleBook(store).find(identity_of(platform, user_id))
    found = [(platform, user_id)]
    if person is not None:
        found += [
            (i.platform, i.user_id)
            for i in person.identities
            if (i.platform, i.user_id) != (platform, user_id)
        ]
    return found
