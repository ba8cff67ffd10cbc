"""`gateway users`: people and their linked identities: list, show, link, unlink, forget, timezone.

Works beside a running daemon (the same database and memory files); what the daemon must act on (a
forgotten person's running turns) it learns from the access events recorded here.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

from gateway.cli.context import EXIT_ERROR, EXIT_OK, config_of
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.config.settings import Config
    from gateway.knowledge.forget import Forgetter
    from gateway.knowledge.memory import MemoryStore
    from gateway.knowledge.people import PeopleBook, Person
    from gateway.store.database import Store


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    us = sub.add_parser(
        "users", help="people: their linked identities, profiles, sessions; link, unlink, forget"
    )
    us_sub = us.add_subparsers(dest="users_command", required=True)
    us_sub.add_parser("list", help="every person with their identities").set_defaults(
        func=cmd_users
    )
    sh = us_sub.add_parser("show", help="one person: identities, profile, sessions and usage")
    sh.add_argument(
        "who", metavar="ID", help="a person id, or one of their identities (telegram:123)"
    )
    ln = us_sub.add_parser(
        "link", help="make two identities one person (one profile, one approval)"
    )
    ln.add_argument("a", metavar="A", help="an identity or person id; its person keeps its id")
    ln.add_argument("b", metavar="B", help="an identity or person id to join A")
    ul = us_sub.add_parser(
        "unlink", help="give an identity a person of its own (with an empty profile)"
    )
    ul.add_argument("identity", metavar="A")
    fg = us_sub.add_parser(
        "forget", help="delete a person's profile, conversations, search rows and media"
    )
    fg.add_argument("who", metavar="ID")
    fg.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    tz = us_sub.add_parser(
        "timezone", help="show or set a person's own time zone (their scheduled jobs' times)"
    )
    tz.add_argument(
        "who", metavar="ID", help="a person id, or one of their identities (telegram:123)"
    )
    tz.add_argument("zone", metavar="ZONE", nargs="?", help="an IANA name such as Europe/Berlin")
    tz.add_argument(
        "--clear", action="store_true", help="forget it: the gateway's zone is used again"
    )
    for parser in (sh, ln, ul, fg, tz):
        parser.set_defaults(func=cmd_users)


def cmd_users(args: argparse.Namespace) -> int:
    return run(args, config_of(args))


def run(
    args: argparse.Namespace,
    config: Config,
    *,
    stdin: TextIO | None = None,
    out: TextIO | None = None,
) -> int:
    from gateway.knowledge.forget import Forgetter
    from gateway.knowledge.memory import MemoryStore
    from gateway.knowledge.people import PeopleBook, identity_of, parse_identity
    from gateway.store.database import Store
    from gateway.store.rows import utcnow

    stdin = stdin or sys.stdin
    out = out or sys.stdout
    store = Store(config.db_path)
    try:
        people = PeopleBook(store)
        memory = MemoryStore(
            config.home / "memories",
            config.memory.memory_char_limit,
            config.memory.user_char_limit,
            config.memory.chat_char_limit,
        )
        command = args.users_command
        if command == "list":
            print(render_list(people.all()), file=out)
            return EXIT_OK
        if command == "unlink":
            platform, user_id = parse_identity(args.identity)
            fresh = people.unlink(identity_of(platform, user_id), now=utcnow())
            print(
                f"unlinked: {args.identity} is now {fresh.label()}, with an empty profile", file=out
            )
            return EXIT_OK
        if command == "link":
            return _link(people, memory, args.a, args.b, out)
        if command == "timezone":
            return _timezone(
                people, _person(people, args.who, create=True), args.zone, clear=args.clear, out=out
            )
        person = _person(people, args.who)
        if command == "show":
            print(render_person(store, memory, person), file=out)
            return EXIT_OK
        return _forget(
            Forgetter(people, memory, config.home), person, yes=args.yes, stdin=stdin, out=out
        )
    finally:
        store.close()


def _person(people: PeopleBook, text: str, *, create: bool = False) -> Person:
    from gateway.knowledge.people import parse_identity
    from gateway.store.rows import utcnow

    found = people.lookup(text)
    if found is None and create and not text.strip().isdigit():
        found = people.resolve(*parse_identity(text), now=utcnow())
    if found is None:
        raise GatewayError(f"no person {text!r} (see `gateway users list`)")
    return found


def _link(people: PeopleBook, memory: MemoryStore, a: str, b: str, out: TextIO) -> int:
    keep, other = _person(people, a, create=True), _person(people, b, create=True)
    if keep.id == other.id:
        print(f"already one person: {keep.label()}", file=out)
        return EXIT_OK
    merged = people.link(keep, other, memory, by="cli")
    print(f"linked: {merged.label()}; one profile, one session search, one approval", file=out)
    return EXIT_OK


def _timezone(
    people: PeopleBook, person: Person, zone: str | None, *, clear: bool, out: TextIO
) -> int:
    if zone is None and not clear:
        print(
            f"{person.label()}: "
            + (person.timezone or "no time zone of their own (the gateway's is used)"),
            file=out,
        )
        return EXIT_OK
    if zone is not None and clear:
        raise GatewayError("give a ZONE or --clear, not both")
    if zone is not None:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise GatewayError(
                f"unknown time zone {zone!r}: use an IANA name such as Europe/Berlin or "
                "America/New_York"
            ) from None
    people.set_timezone(person.id, zone)
    now = zone or "cleared (the gateway's is used)"
    print(
        f"{person.label()}: time zone {now}; jobs made "
        "from now on use it, existing jobs keep theirs",
        file=out,
    )
    return EXIT_OK


def _forget(forgetter: Forgetter, person: Person, *, yes: bool, stdin: TextIO, out: TextIO) -> int:
    from gateway.store.rows import utcnow

    plan = forgetter.plan(person)
    print(f"This deletes {plan.describe()}. It cannot be undone.", file=out)
    if not yes:
        if not stdin.isatty():
            print("not confirmed: run it in a terminal, or pass --yes", file=sys.stderr)
            return EXIT_ERROR
        print(f"Type the person id ({person.id}) to confirm: ", end="", file=out, flush=True)
        if stdin.readline().strip() != str(person.id):
            print("not confirmed; nothing was deleted", file=out)
            return EXIT_ERROR
    forgetter.forget(plan, now=utcnow())
    print(f"forgotten: {plan.describe()}", file=out)
    return EXIT_OK


def render_list(people: list[Person]) -> str:
    if not people:
        return "No people yet: a person is recorded the first time they write to the agent."
    lines = []
    for p in people:
        name = f" {p.name}" if p.name else ""
        lines.append(f"{p.id:>5}{name}  {', '.join(sorted(p.ids))}")
    return "\n".join(lines)


def render_person(store: Store, memory: MemoryStore, person: Person) -> str:
    lines = [
        f"Person {person.id}"
        + (f" ({person.name})" if person.name else "")
        + f", since {person.created_at[:10]}",
        "Identities:",
    ]
    lines += [
        f"  {i.identity}" + (f" ({i.user_name})" if i.user_name else "") + f"  [{i.linked_by}]"
        for i in person.identities
    ]
    lines.append("Time zone: " + (person.timezone or "the gateway's (none of their own)"))
    profile = memory.profile(person.id)
    used, limit = profile.usage()
    lines.append(f"Profile ({profile.path}, {used}/{limit} chars):")
    lines += [f"  - {e}" for e in profile.entries()] or ["  (empty)"]
    lines += _sessions(store, person)
    return "\n".join(lines)


def _sessions(store: Store, person: Person) -> list[str]:
    from gateway.knowledge.forget import accounts

    rows = []
    for platform, user_id in accounts(person):
        where, args = (
            ("s.platform = ?", (platform,))
            if user_id is None
            else ("s.platform = ? AND s.user_id = ?", (platform, user_id))
        )
        rows += store.all(
            f"SELECT s.id, s.key, s.created_at, s.ended_at, s.input_tokens, s.output_tokens,"
            f" (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS n FROM sessions s"
            f" WHERE {where}",
            args,
        )
    rows.sort(key=lambda r: r["id"], reverse=True)
    tokens_in, tokens_out = (
        sum(r["input_tokens"] for r in rows),
        sum(r["output_tokens"] for r in rows),
    )
    lines = [f"Sessions: {len(rows)}; usage {tokens_in:,} tokens in, {tokens_out:,} out"]
    for r in rows[:20]:
        state = "active" if r["ended_at"] is None else f"ended {r['ended_at'][:16]}"
        lines.append(
            f"  {r['id']:>6}  {r['key']}  started "
            f"{r['created_at'][:16]}, {state}, {r['n']} messages"
        )
    if len(rows) > 20:
        lines.append(f"  … and {len(rows) - 20} older (gateway sessions list)")
    return lines
