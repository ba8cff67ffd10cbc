"""`gateway users` and the daemon acting on access changes made from the terminal: list, show, link,
unlink, forget (profile, transcripts, search rows, media, jobs; with a confirmation), the welcome
after a CLI approval and the end of a revoked person's sessions and jobs."""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.access.pairing import ALPHABET, CODE_LENGTH
from gateway.cli import users
from gateway.cli.main import build_parser, main
from gateway.config.settings import load_config
from gateway.events import ChatRef
from gateway.ops.access_watch import AccessWatch
from gateway.ops.wiring import Gateway
from gateway.scheduling.jobstore import JobStore, NewJob
from gateway.store.rows import utcnow
from tests.fakes.llm import FakeLLM
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config

CODE_RE = re.compile(rf"\b([{ALPHABET}]{{{CODE_LENGTH}}})\b")


@asynccontextmanager
async def gateway(
    home: Path, llm: FakeLLM
) -> AsyncIterator[tuple[Gateway, dict[str, RecordingAdapter]]]:
    write_config(
        home,
        base_url=llm.base_url,
        extra="web:\n  enabled: false\n"
        "telegram:\n  token: t\n  allowed_users: ['1', '2']\n"
        "memory:\n  flush_min_messages: 0\n",
    )
    adapters = {p: RecordingAdapter(p) for p in ("telegram", "discord")}
    gw = gateway_for(home, list(adapters.values()))
    try:
        yield gw, adapters
    finally:
        await gw.outbox.wait_background()
        await gw.sessions.cancel_all()
        if gw.lifecycle is not None and (gw.lifecycle.started or gw.lifecycle.flusher.running):
            await gw.lifecycle.stop(0)
        await gw.llm.close()
        gw.store.close()


async def _say(gw: Gateway, adapter: RecordingAdapter, text: str, **kw: Any) -> None:
    before = len(adapter.sent)
    await gw.sessions.submit(inbound(text, platform=adapter.platform, **kw))
    await adapter.wait_for(before + 1)
    await gw.sessions.wait_idle()


def _users(home: Path, *argv: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    args = build_parser().parse_args(["--home", str(home), "users", *argv])
    code = users.run(args, load_config(home, env={}), stdin=io.StringIO(stdin), out=out)
    return code, out.getvalue()


def _job(gw: Gateway, user_id: str) -> int:
    row = JobStore(gw.store).add_job(
        NewJob(
            name="tea",
            prompt="remind me of tea",
            kind="once",
            spec="2099-01-01T09:00:00+00:00",
            timezone="UTC",
            chat=ChatRef("telegram", "dm", user_id),
            user_id=user_id,
            user_name=None,
            username=None,
            space_id=None,
            roles=(),
            next_run_at=datetime(2099, 1, 1, 9, tzinfo=UTC),
        ),
        now=utcnow(),
        limit=50,
    )
    assert row is not None
    return row.id


async def test_list_show_link_unlink(home: Path, fake_llm: FakeLLM) -> None:
    async with gateway(home, fake_llm) as (gw, adapters):
        await _say(gw, adapters["telegram"], "hi", chat_id="1", user_id="1", user_name="Ada")
        gw.memory.profile(gw.people.resolve("telegram", "1", now=utcnow()).id).add("Likes tea")
    code, out = _users(home, "list")
    assert code == 0 and re.search(r"^\s+1 Ada  telegram:1$", out, re.MULTILINE)
    code, out = _users(home, "link", "telegram:1", "discord:77")
    assert code == 0 and out.startswith("linked: person 1 Ada (discord:77, telegram:1)")
    code, out = _users(home, "show", "discord:77")
    assert code == 0
    assert (
        "  telegram:1 (Ada)  [seen]" in out
        and "  discord:77  [cli]" in out
        and "  - Likes tea" in out
    )
    assert (
        re.search(r"Sessions: 1; usage [\d,]+ tokens in", out) and "telegram:dm:1  started" in out
    )
    code, out = _users(home, "unlink", "discord:77")
    # ids never reused
    assert code == 0 and out.startswith(
        "unlinked: discord:77 is now person 3 (discord:77), with an empty profile"
    )
    assert main(["--home", str(home), "users", "show", "99"]) == 1  # no such person: a clear error


async def test_forget_removes_the_person_everywhere(home: Path, fake_llm: FakeLLM) -> None:
    async with gateway(home, fake_llm) as (gw, adapters):
        tg = adapters["telegram"]
        await _say(gw, tg, "my secret word is zanzibar", chat_id="1", user_id="1")
        await _say(
            gw,
            tg,
            "zanzibar in the topic",
            chat_type="group",
            chat_id="-100",
            thread_id="7",
            user_id="1",
        )
        await _say(gw, tg, "zanzibar too, says two", chat_id="2", user_id="2")
        one = gw.people.resolve("telegram", "1", now=utcnow())
        gw.memory.profile(one.id).add("Secret word fan")
        own = gw.store.active_session("telegram:dm:1")
        assert own is not None
        media = home / "media" / str(own.id)
        media.mkdir(parents=True)
        (media / "1-0.jpg").write_bytes(b"jpeg")
        for chat in ("1", "2", "-100"):  # 'told once' marks: their DM's go, the others' chats' stay
            gw.store.execute(
                "INSERT INTO media_notices VALUES ('telegram', ?, 'vision', '2026-01-01')", (chat,)
            )
        job = _job(gw, "1")
    code, out = _users(home, "forget", "telegram:1")  # not a terminal, no --yes: nothing happens
    assert code == 1 and "It cannot be undone." in out
    code, out = _users(home, "forget", "1", stdin="1\n")
    assert code == 1  # stdin is not a terminal: confirmation needs --yes
    code, out = _users(home, "forget", "telegram:1", "--yes")
    assert code == 0 and out.splitlines()[-1].startswith(
        "forgotten: person 1 (telegram:1): 1 session(s)"
    )
    async with gateway(home, fake_llm) as (gw, _):
        store = gw.store
        assert gw.people.find("telegram:1") is None
        assert not gw.memory.profile(one.id).path.exists() and not media.exists()
        assert store.all("SELECT id FROM sessions WHERE key = 'telegram:dm:1'") == []
        assert store.all("SELECT id FROM inbound WHERE user_id = '1'") == []
        assert store.all("SELECT id FROM jobs WHERE id = ?", (job,)) == []
        hits = [
            r[0]
            for r in store.all(
                "SELECT m.content FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
                " WHERE messages_fts MATCH 'zanzibar'"
            )
        ]
        # only B's
        assert sorted(hits) == ["echo: zanzibar too, says two [users=1]", "zanzibar too, says two"]
        redacted = store.all("SELECT content FROM messages WHERE user_id = '1'")
        # the shared topic
        assert [r[0] for r in redacted] == ["[deleted: this person asked to be forgotten]"]
        assert store.all("SELECT id FROM outbound WHERE chat_id = '1'") == []
        assert [r[0] for r in store.all("SELECT kind FROM access_events")] == ["forgotten"]
        assert [r[0] for r in store.all("SELECT chat_id FROM media_notices ORDER BY chat_id")] == [
            "-100",
            "2",
        ]


async def test_a_cli_approval_is_welcomed_by_the_daemon_once(home: Path, fake_llm: FakeLLM) -> None:
    async with gateway(home, fake_llm) as (gw, adapters):
        tg = adapters["telegram"]
        await gw.sessions.submit(inbound("hello?", platform="telegram", chat_id="55", user_id="55"))
        await tg.wait_for(1)
        code = CODE_RE.search(tg.sent[0].plain)
        assert code is not None
        # only records it
        assert main(["--home", str(home), "pairing", "approve", code.group(1)]) == 0
        watch = AccessWatch(
            store=gw.store, outbox=gw.outbox, sessions=gw.sessions, memory=gw.memory, clock=gw.clock
        )
        assert watch.handle() == 1
        await gw.outbox.wait_background()
        assert (
            tg.texts("55")[-1]
            == "You're approved: I can talk with you now. Send me a message to start."
        )
        assert watch.handle() == 0  # handled once
        await gw.outbox.wait_background()
        assert len(tg.texts("55")) == 2


async def test_revoking_ends_the_persons_sessions_and_jobs(home: Path, fake_llm: FakeLLM) -> None:
    async with gateway(home, fake_llm) as (gw, adapters):
        assert gw.lifecycle is not None
        await gw.lifecycle.start()
        tg = adapters["telegram"]
        gw.store.execute(
            "INSERT INTO approved_users (platform, user_id, user_name, approved_at,"
            " approved_by) VALUES ('discord', '8', NULL, '2026-01-01', 'cli')"
        )
        await _say(gw, adapters["discord"], "hi from discord", chat_id="d8", user_id="8")
        # a stranger: gets a pairing code
        await _say(gw, tg, "hi from telegram", chat_id="3", user_id="3")
        job = _job(gw, "1")
        gw.people.link(
            gw.people.resolve("discord", "8", now=utcnow()),
            gw.people.resolve("telegram", "1", now=utcnow()),
            gw.memory,
            by="test",
        )
        await _say(gw, tg, "hi from telegram", chat_id="1", user_id="1")
        assert main(["--home", str(home), "pairing", "revoke", "discord:8"]) == 0
        watch = AccessWatch(
            store=gw.store, outbox=gw.outbox, sessions=gw.sessions, memory=gw.memory, clock=gw.clock
        )
        assert watch.handle() == 2  # both linked identities
        assert gw.store.active_session("discord:dm:d8") is None
        assert gw.store.active_session("telegram:dm:1") is None
        ended = gw.store.latest_session("discord:dm:d8")
        assert (
            ended is not None
            and ended.end_reason == "revoked"
            and ended.flush_state in ("pending", "running", "done", "nothing")
        )
        state = JobStore(gw.store).job(job)
        assert state is not None and state.state == "stopped"
        await gw.lifecycle.flusher.wait_idle()


@pytest.mark.parametrize("when", [timedelta(0)])
def test_the_users_command_is_registered(when: timedelta) -> None:
    assert build_parser().parse_args(["users", "forget", "3", "--yes"]).yes is True


async def test_a_scheduled_jobs_run_speaks_for_its_maker(home: Path, fake_llm: FakeLLM) -> None:
    """A job's run session (platform cron) shows its maker's profile when the job was made in a DM,
    and no profile when its answer goes to a group; its tools act for the maker."""
    async with gateway(home, fake_llm) as (gw, _):
        roles = gw.roles
        assert roles is not None
        maker = gw.people.resolve("telegram", "1", now=utcnow())
        in_dm = _job(gw, "1")
        store = JobStore(gw.store)
        in_group = store.add_job(
            NewJob(
                name=None,
                prompt="standup",
                kind="once",
                spec="2099-01-01T09:00:00+00:00",
                timezone="UTC",
                chat=ChatRef("telegram", "group", "-100"),
                user_id="1",
                user_name=None,
                username=None,
                space_id=None,
                roles=(),
                next_run_at=datetime(2099, 1, 1, 9, tzinfo=UTC),
            ),
            now=utcnow(),
            limit=50,
        )
        assert in_group is not None
        runs = [
            gw.store.create_session(
                key=f"cron:job{j}:run1",
                platform="cron",
                chat_type=t,
                chat_id=f"job{j}",
                thread_id=None,
                user_id="1",
                parent_id=None,
                model="m",
                provider="p",
                now=utcnow(),
            )
            for j, t in ((in_dm, "dm"), (in_group.id, "group"))
        ]
        assert roles.view(runs[0]).person_id == maker.id
        group_view = roles.view(runs[1])
        assert group_view.person_id is None and group_view.chat == "telegram:-100"
        ctx = roles.asker(runs[0], "1")
        assert (
            ctx.person is not None
            and ctx.person.id == maker.id
            and ctx.memory.person_id == maker.id
        )
        assert ctx.platform == "telegram" and ctx.session_id == runs[0].id
