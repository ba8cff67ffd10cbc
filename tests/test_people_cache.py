"""Who a turn's sender is, and who is an admin, are read once and kept (gateway/knowledge/people.py
PeopleBook, gateway/access/roles.py Roles.sole_person): a known person's turn reads no people,
identity or approval rows, however long the allowlist, and what is kept follows every change: made
here (/link, an in-chat approval), or from the terminal on another connection (`gateway users
link|unlink|forget`, `gateway pairing approve|revoke`)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gateway.access.pairing import PairingBook, load_key
from gateway.cli import users
from gateway.cli.main import build_parser, main
from gateway.config.settings import load_config
from gateway.knowledge.people import PeopleBook
from gateway.ops.wiring import Gateway
from gateway.store.rows import utcnow
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config

LISTED = [str(1000 + i) for i in range(300)]


@asynccontextmanager
async def gateway(
    home: Path, llm: FakeLLM, telegram: str
) -> AsyncIterator[tuple[Gateway, dict[str, RecordingAdapter]]]:
    write_config(
        home,
        base_url=llm.base_url,
        extra=f"web:\n  enabled: false\ntelegram:\n  token: t\n{telegram}discord:\n  token: d\n",
    )
    adapters = {p: RecordingAdapter(p) for p in ("telegram", "discord")}
    gw = gateway_for(home, list(adapters.values()))
    try:
        yield gw, adapters
    finally:
        await gw.outbox.wait_background()
        await gw.llm.close()
        gw.store.close()


async def say(gw: Gateway, adapter: RecordingAdapter, user: str, text: str = "hi") -> str:
    before = len(adapter.sent)
    await gw.sessions.submit(
        inbound(text, platform=adapter.platform, chat_id=user, user_id=user, user_name="Ada")
    )
    await adapter.wait_for(before + 1)
    await gw.sessions.wait_idle()
    return adapter.texts(user)[-1]


async def traced(
    gw: Gateway, adapter: RecordingAdapter, user: str, text: str
) -> tuple[str, list[str]]:
    """`say`, with every SQL statement the gateway's connection ran meanwhile."""
    statements: list[str] = []
    gw.store.conn.set_trace_callback(statements.append)
    try:
        return await say(gw, adapter, user, text), statements
    finally:
        gw.store.conn.set_trace_callback(None)


def cli(home: Path, *argv: str) -> str:
    """A `gateway` command from the terminal: its own connection to state.db."""
    out = io.StringIO()
    if argv[0] == "users":
        args = build_parser().parse_args(["--home", str(home), *argv])
        assert users.run(args, load_config(home, env={}), stdin=io.StringIO(), out=out) == 0
    else:
        assert main(["--home", str(home), *argv]) == 0
    return out.getvalue()


async def test_a_known_persons_turn_reads_no_people_rows(home: Path, fake_llm: FakeLLM) -> None:
    """300 listed users and no access.admins: who is an admin is worked out from the whole
    allowlist, once."""
    async with gateway(home, fake_llm, f"  allowed_users: [{', '.join(LISTED)}]\n") as (
        gw,
        adapters,
    ):
        # the first turn: the person is made, the allowlist read
        await say(gw, adapters["telegram"], "1000")
        answer, statements = await traced(gw, adapters["telegram"], "1000", "again")
        assert answer.startswith("echo: again")
        assert statements  # the turn itself did its writes
        touched = [
            s for s in statements if any(t in s for t in ("identities", "people", "approved_users"))
        ]
        assert touched == []
        assert gw.roles is not None
        ada = gw.people.find("telegram:1000")
        # 300 people allowed: no sole person, no admin
        assert ada is not None and not gw.roles.is_admin(ada)


async def test_a_new_persons_turn_does_not_read_the_whole_allowlist(
    home: Path, fake_llm: FakeLLM
) -> None:
    """Each new sender is a new person, so who is an admin is worked out again; with 300 listed
    users that must stop at the second person found, not look up all 300 (10,000 listed users made
    every new sender's turn cost ~0.3 s of the event loop)."""
    async with gateway(home, fake_llm, f"  allowed_users: [{', '.join(LISTED)}]\n") as (
        gw,
        adapters,
    ):
        await say(gw, adapters["telegram"], "1000")
        answer, statements = await traced(gw, adapters["telegram"], "1299", "first words")
        assert answer.startswith("echo: first words")
        lookups = [s for s in statements if "FROM identities WHERE identity" in s]
        assert 1 <= len(lookups) <= 6
        assert gw.roles is not None and not gw.roles.is_admin(gw.people.find("telegram:1299"))


async def test_kept_people_follow_links_and_erasures_made_elsewhere(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with gateway(home, fake_llm, "  allowed_users: ['1']\n") as (gw, adapters):
        await say(gw, adapters["telegram"], "1")
        ada = gw.people.find("telegram:1")
        assert ada is not None and gw.people.find("discord:77") is None  # both answers now kept
        # The Discord account is a stranger: it gets a pairing code.
        assert "pairing code" in await say(gw, adapters["discord"], "77")

        cli(home, "users", "link", "telegram:1", "discord:77")
        linked = gw.people.find("discord:77")
        assert (
            linked is not None
            and linked.id == ada.id
            and linked.ids == {"telegram:1", "discord:77"}
        )
        # one approval
        assert (await say(gw, adapters["discord"], "77", "now?")).startswith("echo: now?")

        cli(home, "users", "unlink", "discord:77")
        alone = gw.people.find("discord:77")
        assert alone is not None and alone.id != ada.id
        assert gw.people.find("telegram:1") == gw.people.get(ada.id)
        assert gw.people.get(ada.id) is not None and gw.people.get(ada.id).ids == {"telegram:1"}  # type: ignore[union-attr]

        cli(home, "users", "forget", "telegram:1", "--yes")
        assert gw.people.find("telegram:1") is None and gw.people.get(ada.id) is None

        # A link made here (the /link flow writes through the same book) is seen at once too.
        bo, cy = (gw.people.resolve("telegram", u, now=utcnow()) for u in ("5", "6"))
        gw.people.link(bo, cy, gw.memory, by="test")
        found = gw.people.find("telegram:6")
        assert found is not None and found.id == bo.id


async def test_who_is_admin_follows_approvals_here_and_elsewhere(
    home: Path, fake_llm: FakeLLM
) -> None:
    """No access.admins: the one person let in is the admin; with a second one, nobody is."""
    async with gateway(home, fake_llm, "") as (gw, _):
        roles = gw.roles
        assert roles is not None
        pairing = roles.pairing

        def code(user: str) -> str:
            issued = pairing.issue(
                platform="telegram", user_id=user, user_name=None, chat_id=user, now=utcnow()
            )
            assert issued.code is not None
            return issued.code

        ada = gw.people.resolve("telegram", "1", now=utcnow())
        assert not roles.is_admin(ada)  # nobody let in yet
        # in this process
        assert pairing.approve(code("1"), by="test", now=utcnow()).status == "approved"
        assert roles.is_admin(ada)
        cli(home, "pairing", "approve", code("2"))  # from the terminal
        assert not roles.is_admin(ada)
        cli(home, "pairing", "revoke", "telegram:2")
        assert roles.is_admin(ada)
        # The dashboard approves through a book of its own
        # on the daemon's connection: seen all the same.
        dashboard = PairingBook(gw.store, load_key(home))
        assert dashboard.approve(code("3"), by="dashboard", now=utcnow()).status == "approved"
        assert not roles.is_admin(ada)
        dashboard.revoke("telegram", "3")
        assert roles.is_admin(ada)
        pairing.revoke("telegram", "1")
        assert not roles.is_admin(ada)


async def test_a_time_zone_saved_through_another_book_is_seen_by_all(
    home: Path, fake_llm: FakeLLM
) -> None:
    """The scheduler keeps a PeopleBook of its own on the same connection: what it writes, the
    roles' book sees."""
    async with gateway(home, fake_llm, "  allowed_users: ['1']\n") as (gw, adapters):
        await say(gw, adapters["telegram"], "1")
        ada = gw.people.find("telegram:1")
        assert ada is not None and ada.timezone is None
        PeopleBook(gw.store).set_timezone(ada.id, "America/New_York")
        again = gw.people.find("telegram:1")
        assert again is not None and again.timezone == "America/New_York"


# ------------------------------------------------------ each change reaches the very next turn
def _memory_write(target: str, content: str) -> ToolCall:
    return ToolCall("memory", {"action": "add", "target": target, "content": content})


def _tool_result(fake_llm: FakeLLM) -> str:
    """What the memory tool told the model in the turn just run (the last request's tool result)."""
    blocks = fake_llm.anthropic_requests()[-1]["messages"][-1]["content"]
    return "".join(str(b.get("content")) for b in blocks if b.get("type") == "tool_result")


async def test_a_role_change_made_elsewhere_reaches_the_next_turn(
    home: Path, fake_llm: FakeLLM
) -> None:
    """No access.admins: the one person let in is the admin (may write the shared notes). A second
    person approved from the terminal makes nobody the admin by elimination: the first person's next
    turn is refused."""
    async with gateway(home, fake_llm, "  allowed_users: ['1']\n") as (gw, adapters):
        tg = adapters["telegram"]
        fake_llm.script(_memory_write("memory", "The office wifi is Gull"), Reply("saved"))
        assert await say(gw, tg, "1", "note the wifi") == "saved"
        assert "The office wifi is Gull" in (home / "memories" / "MEMORY.md").read_text()
        assert gw.roles is not None
        issued = gw.roles.pairing.issue(
            platform="telegram", user_id="2", user_name=None, chat_id="2", now=utcnow()
        )
        assert issued.code is not None
        cli(home, "pairing", "approve", issued.code)
        fake_llm.script(_memory_write("memory", "The printer is Tern"), Reply("refused"))
        assert await say(gw, tg, "1", "note the printer") == "refused"
        assert "only admins may change them" in _tool_result(fake_llm)
        assert "Tern" not in (home / "memories" / "MEMORY.md").read_text()


async def test_a_link_made_elsewhere_reaches_the_next_turn(home: Path, fake_llm: FakeLLM) -> None:
    """Linked from the terminal, the Discord account's next turn acts as the same person: let in by
    the Telegram account's listing, and what it saves to "user" lands in that one person's
    profile."""
    async with gateway(home, fake_llm, "  allowed_users: ['1']\n") as (gw, adapters):
        await say(gw, adapters["telegram"], "1")
        ada = gw.people.find("telegram:1")
        assert ada is not None
        assert "pairing code" in await say(gw, adapters["discord"], "77")
        cli(home, "users", "link", "telegram:1", "discord:77")
        fake_llm.script(_memory_write("user", "Rows on Sundays"), Reply("noted"))
        assert await say(gw, adapters["discord"], "77", "I row on Sundays") == "noted"
        assert "Rows on Sundays" in (home / "memories" / "people" / f"{ada.id}.md").read_text()


async def test_a_forget_made_elsewhere_reaches_the_next_turn(home: Path, fake_llm: FakeLLM) -> None:
    """Forgotten from the terminal, a listed user's next turn is a new person's: their old profile
    is not written to again, a new one is."""
    async with gateway(home, fake_llm, "  allowed_users: ['1']\n") as (gw, adapters):
        tg = adapters["telegram"]
        fake_llm.script(_memory_write("user", "Allergic to kiwi"), Reply("noted"))
        await say(gw, tg, "1", "I am allergic to kiwi")
        ada = gw.people.find("telegram:1")
        assert ada is not None and (home / "memories" / "people" / f"{ada.id}.md").exists()
        cli(home, "users", "forget", "telegram:1", "--yes")
        fake_llm.script(_memory_write("user", "Likes plums"), Reply("noted"))
        assert await say(gw, tg, "1", "I like plums") == "noted"
        fresh = gw.people.find("telegram:1")
        assert fresh is not None and fresh.id != ada.id
        assert not (home / "memories" / "people" / f"{ada.id}.md").exists()
        profile = home / "memories" / "people" / f"{fresh.id}.md"
        assert profile.read_text().count("Likes plums") == 1


async def test_a_revoke_made_elsewhere_reaches_the_next_message(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with gateway(home, fake_llm, "") as (gw, adapters):
        tg = adapters["telegram"]
        assert gw.roles is not None
        issued = gw.roles.pairing.issue(
            platform="telegram", user_id="5", user_name=None, chat_id="5", now=utcnow()
        )
        assert issued.code is not None
        cli(home, "pairing", "approve", issued.code)
        assert (await say(gw, tg, "5", "let in?")).startswith("echo: let in?")
        cli(home, "pairing", "revoke", "telegram:5")
        before = len(fake_llm.anthropic_requests())
        assert "echo" not in await say(gw, tg, "5", "still there?")
        assert len(fake_llm.anthropic_requests()) == before  # no turn: the model never saw it
