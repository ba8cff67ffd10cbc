"""Attacks on the in-chat `/link` (issue #27's round): a code outliving its issuer's access, two
accounts racing for one code, a confirmation for another code than the one warned about, and a code
that expired between the warning and the yes. Through the real gate, linker and SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gateway.access.gate import AccessGate
from gateway.access.linking import Linker
from gateway.access.pairing import PairingBook, load_key
from gateway.events import Inbound
from gateway.ops.wiring import Gateway
from tests.fakeclock import FakeClock
from tests.fakes.llm import FakeLLM
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config

WARNED = "This would make this account and"
WRONG = "No link request has that code"


@asynccontextmanager
async def linking(home: Path, llm: FakeLLM) -> AsyncIterator[tuple[Gateway, Linker, FakeClock]]:
    write_config(
        home,
        base_url=llm.base_url,
        extra="web:\n  enabled: false\n"
        "telegram:\n  token: t\n  allowed_users: ['1']\n"
        "discord:\n  token: d\n  allowed_users: ['8', '9']\n"
        "access:\n  admins: ['telegram:1']\n",
    )
    gw = gateway_for(home, [RecordingAdapter("telegram"), RecordingAdapter("discord")])
    clock = FakeClock()
    gate = gw.sessions.gate
    assert isinstance(gate, AccessGate) and gw.roles is not None
    try:
        yield gw, Linker(gate, gw.roles, gw.memory, clock=clock.now), clock
    finally:
        await gw.outbox.wait_background()
        await gw.sessions.cancel_all()
        await gw.llm.close()
        gw.store.close()


def from_discord(user: str, text: str) -> Inbound:
    return inbound(text, platform="discord", chat_id=f"d{user}", user_id=user)


def redeem(gw: Gateway, linker: Linker, user: str, code: str, *, confirmed: bool) -> str:
    message = from_discord(user, f"/link {code}{' yes' if confirmed else ''}")
    assert isinstance(gw.sessions.gate, AccessGate)
    allowed = gw.sessions.gate.is_allowed(message)
    return linker.redeem(message, code, allowed=allowed, confirmed=confirmed)


async def test_a_code_does_not_outlive_its_issuers_access(home: Path, fake_llm: FakeLLM) -> None:
    """Telegram 77 (let in by a pairing code) asks for a link code, then the owner revokes it. The
    code, redeemed by an allowed Discord account within its ten minutes, must not link the revoked
    account back in through the Discord account's approval."""
    async with linking(home, fake_llm) as (gw, linker, clock):
        pairing = PairingBook(gw.store, load_key(home))
        issued = pairing.issue(
            platform="telegram", user_id="77", user_name="Zed", chat_id="77", now=clock.now()
        )
        assert issued.code is not None
        assert pairing.approve(issued.code, by="test", now=clock.now()).status == "approved"
        code = linker.issue(inbound("/link", platform="telegram", chat_id="77", user_id="77"))
        assert pairing.revoke("telegram", "77", now=clock.now())
        assert isinstance(gw.sessions.gate, AccessGate)
        revoked = inbound("hello?", platform="telegram", chat_id="77", user_id="77")
        assert not gw.sessions.gate.is_allowed(revoked)
        told = redeem(gw, linker, "8", code, confirmed=False)
        if told.startswith(WARNED):
            told = redeem(gw, linker, "8", code, confirmed=True)
        assert told.startswith("The account that asked for this code no longer has access"), told
        zed = gw.people.find("telegram:77")
        assert zed is None or len(zed.identities) == 1
        assert not gw.sessions.gate.is_allowed(revoked)


async def test_two_accounts_racing_for_one_code_link_one(home: Path, fake_llm: FakeLLM) -> None:
    async with linking(home, fake_llm) as (gw, linker, _):
        code = linker.issue(inbound("/link", platform="telegram", chat_id="1", user_id="1"))
        assert redeem(gw, linker, "8", code, confirmed=False).startswith(WARNED)
        assert redeem(gw, linker, "9", code, confirmed=False).startswith(WARNED)
        linked = redeem(gw, linker, "8", code, confirmed=True)
        assert linked.startswith("Linked: this account and telegram:1")
        assert redeem(gw, linker, "9", code, confirmed=True).startswith(WRONG)
        person = gw.people.find("telegram:1")
        assert person is not None
        assert sorted(i.identity for i in person.identities) == ["discord:8", "telegram:1"]
        late = gw.people.find("discord:9")
        assert late is None or late.id != person.id


async def test_a_yes_for_another_code_or_after_the_expiry_links_nothing(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with linking(home, fake_llm) as (gw, linker, clock):
        first = linker.issue(inbound("/link", platform="telegram", chat_id="1", user_id="1"))
        assert redeem(gw, linker, "8", first, confirmed=False).startswith(WARNED)
        await clock.advance(10 * 60)  # the code expires between the warning and the yes
        assert redeem(gw, linker, "8", first, confirmed=True).startswith(WRONG)
        second = linker.issue(inbound("/link", platform="telegram", chat_id="1", user_id="1"))
        third = linker.issue(inbound("/link", platform="discord", chat_id="d9", user_id="9"))
        assert redeem(gw, linker, "8", second, confirmed=False).startswith(WARNED)
        other = redeem(gw, linker, "8", third, confirmed=True)
        assert other.startswith(WARNED)  # the warning was about another code
        assert len(gw.people.find("telegram:1").identities) == 1  # type: ignore[union-attr]
