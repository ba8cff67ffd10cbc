"""Approvals and questions in the core: a real MCP server whose `delete_file` is annotated
destructive, the real gateway graph, the fake LLM, and contract fake adapters (one with buttons, the
console without). What a person sees (the request, its buttons, the message once answered), what the
model is told, the rows in SQLite, and how often the tool really ran (the server writes every run to
a file)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from adapters.console import ConsoleAdapter
from gateway.events import ChatRef, OutboundMessage, SubmitOutcome
from gateway.ops.wiring import Gateway
from gateway.store.rows import iso
from tests.approvals_support import (
    DELETE,
    ButtonAdapter,
    mcp_yaml,
    result_of,
    rows,
    runs,
    tap,
    tool_results,
)
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, llm_url, write_config
from tests.lifecycle_support import FakeClock

WEB = ChatRef("web", "dm", "tab1")


def setup(home: Path, fake: FakeLLM, tmp_path: Path, extra: str = "", **mcp: Any) -> None:
    write_config(home, base_url=llm_url(fake, "anthropic"), extra=mcp_yaml(tmp_path, **mcp) + extra)


@asynccontextmanager
async def gateway(
    home: Path, adapter: RecordingAdapter, clock: FakeClock | None = None
) -> AsyncIterator[Gateway]:
    gw = gateway_for(home, [adapter], clock=clock or FakeClock())
    assert gw.mcp is not None
    await gw.mcp.start()
    await gw.sessions.replay()
    try:
        yield gw
    finally:
        gw.sessions.stop_accepting()  # a turn still waiting for a person waits on in the next life
        await gw.sessions.wait_idle()
        await gw.close_tools()
        await gw.llm.close()
        gw.store.close()


async def ask(gw: Gateway, text: str, chat: ChatRef = WEB, user: str = "tab1") -> None:
    result = await gw.sessions.submit(
        inbound(text, platform=chat.platform, chat_id=chat.chat_id, user_id=user)
    )
    assert result.outcome is SubmitOutcome.ACCEPTED


async def answered(gw: Gateway, adapter: RecordingAdapter, count: int) -> list[str]:
    await adapter.wait_for(count)
    await gw.sessions.wait_idle()
    return adapter.texts()


async def test_a_destructive_tool_waits_and_allow_once_runs_it_exactly_once(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    setup(home, fake_llm, tmp_path)
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/report.txt"}), Reply("Deleted report.txt."))
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        await ask(gw, "delete the report")
        mid, request = await adapter.wait_choices()
        assert "mcp_fake_delete_file" in request.text and "`/srv/report.txt`" in request.text
        # buttons, no fallback
        assert "expires in 10 minutes" in request.text and "/approve" not in request.text
        assert request.choices is not None
        assert [(c.label, c.value) for c in request.choices.options] == [
            ("Allow once", "once"),
            ("Allow for this session", "session"),
            ("Deny", "deny"),
        ]
        assert runs(tmp_path) == [] and rows(gw)[0]["state"] == "pending"

        refused = await gw.sessions.submit(
            tap(request.choices, "once", chat=WEB, user_id="someone-else")
        )
        assert refused.outcome is SubmitOutcome.REFUSED and "Only" in refused.notice
        assert rows(gw)[0]["state"] == "pending" and adapter.closed == {}

        allowed = await gw.sessions.submit(tap(request.choices, "once", chat=WEB, user_id="tab1"))
        assert allowed.outcome is SubmitOutcome.ACCEPTED and allowed.notice == ""
        assert (await answered(gw, adapter, 2))[-1] == "Deleted report.txt."
        again = await gw.sessions.submit(tap(request.choices, "once", chat=WEB, user_id="tab1"))
        assert again.outcome is SubmitOutcome.REFUSED
        assert again.notice.startswith("Already answered")
        closed = await adapter.wait_closed(mid)
        await gw.sessions.wait_idle()
    assert closed.endswith("✅ Allowed once by you.") and "mcp_fake_delete_file" in closed
    assert runs(tmp_path) == ["delete_file /srv/report.txt"]
    (result,) = tool_results(fake_llm.anthropic_requests()[1])
    assert "deleted /srv/report.txt" in str(result["content"])
    (row,) = rows_of(home)
    assert (row["state"], row["decision"], row["decided_by"]) == ("done", "once", "you")


def rows_of(home: Path) -> list[dict[str, Any]]:
    from gateway.store.database import Store

    store = Store(home / "state.db")
    try:
        return [dict(r) for r in store.all("SELECT * FROM approvals ORDER BY id")]
    finally:
        store.close()


@pytest.mark.parametrize("how", ["tap", "command"])
async def test_deny_runs_nothing_and_the_model_says_so(
    home: Path, fake_llm: FakeLLM, tmp_path: Path, how: str
) -> None:
    setup(home, fake_llm, tmp_path)
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/a"}), Reply("OK, I did not delete it."))
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        await ask(gw, "delete a")
        mid, request = await adapter.wait_choices()
        assert request.choices is not None
        if how == "tap":
            await gw.sessions.submit(tap(request.choices, "deny", chat=WEB, user_id="tab1"))
        else:
            code = rows(gw)[0]["code"]
            await ask(gw, f"/deny {code}")
        texts = await answered(gw, adapter, 3 if how == "command" else 2)
        closed = await adapter.wait_closed(mid)
    assert texts[-1] == "OK, I did not delete it."
    assert closed.endswith("🚫 Denied by you. Nothing was run.")
    assert runs(tmp_path) == []
    (result,) = tool_results(fake_llm.anthropic_requests()[1])
    assert result["is_error"] is True and "denied" in str(result["content"])


async def test_an_expired_request_runs_nothing(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    setup(home, fake_llm, tmp_path, extra="tools:\n  approval:\n    timeout_minutes: 5\n")
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/a"}), Reply("Nobody said yes, so I left it."))
    adapter, clock = ButtonAdapter(), FakeClock()
    async with gateway(home, adapter, clock) as gw:
        assert gw.waits is not None
        await ask(gw, "delete a")
        mid, request = await adapter.wait_choices()
        assert "expires in 5 minutes" in request.text
        clock.advance(minutes=4, seconds=59)
        assert gw.waits.expire_due() == 0
        clock.advance(seconds=1)
        assert gw.waits.expire_due() == 1
        texts = await answered(gw, adapter, 2)
        closed = await adapter.wait_closed(mid)
        assert request.choices is not None
        late = await gw.sessions.submit(tap(request.choices, "once", chat=WEB, user_id="tab1"))
    assert texts[-1] == "Nobody said yes, so I left it."
    assert closed.endswith("⌛ Expired: nobody answered within 5 minutes. Nothing was run.")
    assert late.outcome is SubmitOutcome.REFUSED and "Expired" in late.notice
    assert runs(tmp_path) == []
    assert "Nobody answered within 5 minutes" in str(result_of(fake_llm)["content"])


async def test_a_restart_while_pending_then_allow_completes_the_turn_once(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    setup(home, fake_llm, tmp_path)
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/b"}), Reply("Deleted b."))
    first, clock = ButtonAdapter(), FakeClock()
    async with gateway(home, first, clock) as gw:
        await ask(gw, "delete b")
        _, request = await first.wait_choices()
    assert request.choices is not None and runs(tmp_path) == []
    clock.advance(minutes=3)
    second = ButtonAdapter()
    async with gateway(home, second, clock) as gw:
        assert gw.waits is not None
        (opened,) = gw.waits.open.values()
        assert opened.timer is not None and not opened.timer.done()  # re-armed, 7 minutes left
        allowed = await gw.sessions.submit(tap(request.choices, "once", chat=WEB, user_id="tab1"))
        assert allowed.outcome is SubmitOutcome.ACCEPTED
        texts = await answered(gw, second, 1)
        assert await second.wait_closed("web-1") if second.sent and second.sent[0].choices else True
    assert texts == ["Deleted b."]
    assert runs(tmp_path) == ["delete_file /srv/b"]
    # the model was not asked again for the stopped step
    assert len(fake_llm.anthropic_requests()) == 2
    assert [r["state"] for r in rows_of(home)] == ["done"]


class HeldButtons(ButtonAdapter):
    """Its platform takes the request (the person can see it) but answers the send only once
    `release` is set: the turn is between "request sent" and "waiting" meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def send(self, message: OutboundMessage) -> str:
        sent_as = await super().send(message)
        if message.choices is not None:
            await self.release.wait()
        return sent_as


async def test_a_turn_reaching_its_wait_as_the_drain_begins_waits_on_after_the_restart(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """The drain must not wait for a person: a turn still sending its request when the drain
    begins stops as soon as it would wait (a hang here is the bug), the request stays pending, and
    the next start completes the turn on the tap."""
    setup(home, fake_llm, tmp_path)
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/late"}), Reply("Deleted late."))
    first, clock = HeldButtons(), FakeClock()
    async with gateway(home, first, clock) as gw:
        await ask(gw, "delete late")
        _, request = await first.wait_choices()  # on the platform, its send not yet answered
        gw.sessions.stop_accepting()
        first.release.set()
        await gw.sessions.wait_idle()
        assert [r["state"] for r in rows(gw)] == ["pending"] and runs(tmp_path) == []
    assert request.choices is not None
    second = ButtonAdapter()
    async with gateway(home, second, clock) as gw:
        allowed = await gw.sessions.submit(tap(request.choices, "once", chat=WEB, user_id="tab1"))
        assert allowed.outcome is SubmitOutcome.ACCEPTED
        assert await answered(gw, second, 1) == ["Deleted late."]
    assert runs(tmp_path) == ["delete_file /srv/late"]
    assert [r["state"] for r in rows_of(home)] == ["done"]


async def test_ask_with_two_options_returns_the_tapped_one(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    setup(home, fake_llm, tmp_path)
    fake_llm.script(
        ToolCall("ask", {"question": "Which report?", "options": ["March", "April"]}),
        Reply("Sending the April report."),
    )
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        await ask(gw, "send the report")
        mid, request = await adapter.wait_choices()
        assert request.text.startswith("❓ **Which report?**\n1. March\n2. April")
        assert request.choices is not None
        assert [c.label for c in request.choices.options] == ["March", "April", "Something else"]
        await gw.sessions.submit(tap(request.choices, "2", chat=WEB, user_id="tab1"))
        texts = await answered(gw, adapter, 2)
        closed = await adapter.wait_closed(mid)
    assert texts[-1] == "Sending the April report."
    assert closed.endswith("💬 you answered: April")
    (result,) = tool_results(fake_llm.anthropic_requests()[1])
    assert result["content"] == "The user answered: April"


async def test_something_else_takes_the_next_message_as_the_answer(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    setup(home, fake_llm, tmp_path)
    fake_llm.script(
        ToolCall("ask", {"question": "Which report?", "options": ["March", "April"]}),
        Reply("Sending the one from May."),
    )
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        await ask(gw, "send the report")
        _, request = await adapter.wait_choices()
        assert request.choices is not None
        other = await gw.sessions.submit(tap(request.choices, "other", chat=WEB, user_id="tab1"))
        assert other.notice.startswith("Write your answer")
        result = await gw.sessions.submit(
            inbound("the one from May", platform="web", chat_id="tab1", user_id="tab1")
        )
        assert result.reason == "answer"
        texts = await answered(gw, adapter, 2)
    assert texts[-1] == "Sending the one from May."
    assert result_of(fake_llm)["content"] == "The user answered: the one from May"
    assert len(fake_llm.anthropic_requests()) == 2  # the answer was no turn of its own


async def test_without_buttons_the_request_is_text_and_approve_code_answers_it(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    setup(home, fake_llm, tmp_path)
    fake_llm.script(
        ToolCall(DELETE, {"path": "/srv/c"}),
        Reply("Deleted c."),
        ToolCall(DELETE, {"path": "/srv/d"}),
        Reply("Deleted d too."),
    )
    console = RecordingAdapter("cli")
    cli = ChatRef("cli", "dm", "c1")
    async with gateway(home, console) as gw:
        await ask(gw, "delete c", cli, "u1")
        await console.wait_for(1)
        code = rows(gw)[0]["code"]
        request = console.sent[0]
        # a console prints it as text: the fallback is in the text
        assert request.choices is not None
        assert f"/approve {code}" in request.text and f"/deny {code}" in request.text
        assert len(code) == 6  # pairing codes have 8
        await ask(gw, f"/approve {code.lower()} session", cli, "u1")
        texts = await answered(gw, console, 3)
        assert texts[1:] == ["✅ Allowed for this session.", "Deleted c."]
        await ask(gw, "delete d", cli, "u1")  # the same tool again in this session: no question
        texts = await answered(gw, console, 4)
    assert texts[-1] == "Deleted d too."
    assert runs(tmp_path) == ["delete_file /srv/c", "delete_file /srv/d"]
    assert len(rows_of(home)) == 1


async def test_stop_cancels_a_pending_request(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    setup(home, fake_llm, tmp_path)
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/e"}), Reply("never sent"))
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        await ask(gw, "delete e")
        mid, request = await adapter.wait_choices()
        await ask(gw, "/stop")
        await adapter.wait_for(2)
        closed = await adapter.wait_closed(mid)
        assert request.choices is not None
        late = await gw.sessions.submit(tap(request.choices, "once", chat=WEB, user_id="tab1"))
        await gw.sessions.wait_idle()
        texts = adapter.texts()
    assert texts[-1] == "Stopped. The request waiting for an answer is cancelled; nothing was run."
    assert closed.endswith("⏹ Cancelled (/stop). Nothing was run.")
    assert late.outcome is SubmitOutcome.REFUSED
    assert runs(tmp_path) == [] and len(fake_llm.anthropic_requests()) == 1
    assert [r["state"] for r in rows_of(home)] == ["cancelled"]


async def test_a_turn_stopped_while_it_waits_still_says_when_the_person_wrote(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """The session's last_user_at is stored with a turn's last write (no write of its own at the
    start); a turn /stop ends while it waits for a person stores no answer, and its mark says when
    the person wrote (idle timers count from it)."""
    setup(home, fake_llm, tmp_path)
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/e"}), Reply("never sent"))
    adapter = ButtonAdapter()
    clock = FakeClock()
    async with gateway(home, adapter, clock) as gw:
        wrote = clock()
        await ask(gw, "delete e")
        await adapter.wait_choices()
        clock.advance(seconds=30)
        await ask(gw, "/stop")
        await adapter.wait_for(2)
        await gw.sessions.wait_idle()
        stored = gw.store.one("SELECT last_user_at FROM sessions WHERE ended_at IS NULL")
    assert stored is not None and stored[0] == iso(wrote)


async def test_which_calls_wait(home: Path, fake_llm: FakeLLM, tmp_path: Path) -> None:
    """read_file says readOnlyHint (and destructiveHint: read-only wins), rename_file says nothing:
    both run unasked, until tools.approval.require names rename_file."""
    setup(home, fake_llm, tmp_path, extra="tools:\n  approval:\n    require: ['mcp_*_rename_*']\n")
    fake_llm.script(
        ToolCall("mcp_fake_read_file", {"path": "/srv/f"}),
        ToolCall("mcp_fake_rename_file", {"path": "/srv/f", "to": "/srv/g"}),
        Reply("Done."),
    )
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        await ask(gw, "read then rename f")
        _, request = await adapter.wait_choices()
        assert "mcp_fake_rename_file" in request.text
        assert request.choices is not None
        await gw.sessions.submit(tap(request.choices, "once", chat=WEB, user_id="tab1"))
        await answered(gw, adapter, 2)
    assert runs(tmp_path) == ["rename_file /srv/f /srv/g"]


async def test_a_server_configured_never_is_not_asked_about(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    setup(home, fake_llm, tmp_path, approval="never")
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/h"}), Reply("Deleted h."))
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        await ask(gw, "delete h")
        assert (await answered(gw, adapter, 1)) == ["Deleted h."]
    assert runs(tmp_path) == ["delete_file /srv/h"]


async def test_secrets_are_masked_and_long_values_shortened(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    setup(home, fake_llm, tmp_path, approval="always")
    fake_llm.script(
        ToolCall("mcp_fake_rename_file", {"path": "x" * 500, "to": "sk-ant-" + "a" * 40}),
        Reply("ok"),
    )
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        await ask(gw, "rename")
        _, request = await adapter.wait_choices()
    assert "x" * 200 + "… (300 more characters)" in request.text
    assert "a" * 40 not in request.text


async def test_an_ordinary_turn_pays_no_sql_for_approvals(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """Checkpoints are written only when a turn stops: a turn whose calls need nobody's yes runs
    exactly the statements it runs without approvals wired at all."""
    setup(home, fake_llm, tmp_path)
    adapter = ButtonAdapter()
    statements: list[str] = []
    async with gateway(home, adapter) as gw:
        for n in range(3):
            fake_llm.script(ToolCall("mcp_fake_echo", {"text": f"hi {n}"}), Reply(f"said hi {n}"))
            # approvals unwired: the registry's check, the outbox's hook, the manager's glue
            if n == 2:
                gw.tools.holds, gw.outbox.choices, gw.sessions.waiting = None, [], None
            gw.store.conn.set_trace_callback(statements.append if n else None)
            await ask(gw, f"say hi {n}")
            await answered(gw, adapter, n + 1)
            gw.store.conn.set_trace_callback(None)
            if n == 1:
                wired, statements = statements, []
    assert [s.split()[0] for s in wired] == [s.split()[0] for s in statements]
    assert not any("approvals" in s for s in wired)


async def test_the_console_prints_the_request_and_takes_approve_code(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """`gateway chat` waits for each line's answer before reading the next: a request is such an
    answer, so the person can type `/approve CODE` next."""
    setup(home, fake_llm, tmp_path)
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/k"}), Reply("Deleted k."))
    out = io.StringIO()
    console = ConsoleAdapter(stdout=out)
    async with gateway(home, console) as gw:  # type: ignore[arg-type]
        await console.start(gw.sessions.submit)
        await console.say("delete k", timeout=30)
        code = rows(gw)[0]["code"]
        assert f"Reply /approve {code} to allow it once" in out.getvalue()
        await console.say(f"/approve {code}", timeout=30)
        await gw.sessions.wait_idle()
    printed = out.getvalue()
    assert "✅ Allowed once." in printed and printed.rstrip().endswith("Deleted k.")
    assert runs(tmp_path) == ["delete_file /srv/k"] and console.failed == 0


async def test_a_tool_that_always_asks_shows_exactly_its_own_text(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """The seam the shell tool (issue #31) uses: `always_ask(name, describe)`; the request shows
    describe's text, and the call runs through the registry like any other once allowed."""
    setup(home, fake_llm, tmp_path)
    fake_llm.script(ToolCall("mcp_fake_echo", {"text": "rm -rf build/"}), Reply("Ran it."))
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        assert gw.waits is not None and gw.waits.policy is not None
        gw.waits.policy.always_ask(
            "mcp_fake_echo", lambda args: f"Run this command?\n```\n{args['text']}\n```"
        )
        await ask(gw, "clean the build")
        _, request = await adapter.wait_choices()
        assert request.text == (
            "🔐 **Approval needed**\nRun this command?\n```\nrm -rf build/\n```"
            "\n\nThis request expires in 10 minutes."
        )
        assert request.choices is not None
        await gw.sessions.submit(tap(request.choices, "once", chat=WEB, user_id="tab1"))
        assert (await answered(gw, adapter, 2))[-1] == "Ran it."
    assert "echo: rm -rf build/" in str(result_of(fake_llm)["content"])


async def test_forget_takes_the_requests_their_turns_waited_on(
    home: Path, fake_llm: FakeLLM
) -> None:
    """`gateway users forget`: a request keeps the call's arguments and its message the question."""
    from tests.test_people_attacks import forget
    from tests.test_people_attacks import gateway as people

    fake_llm.script(
        ToolCall("ask", {"question": "Which of my insulin pens?", "options": ["Blue", "Red"]})
    )
    async with people(home, fake_llm) as (gw, tg):
        await gw.sessions.submit(
            inbound("which pen", platform="telegram", chat_id="2", user_id="2")
        )
        await tg.wait_for(1)
        assert len(rows(gw)) == 1
        forget(home, "telegram:2")
        assert gw.store.all("SELECT id FROM approvals") == []
        assert gw.store.all("SELECT id FROM outbound WHERE text LIKE '%insulin%'") == []


async def test_through_tool_search_the_real_name_waits_and_is_granted_for_the_session(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """With the MCP tools behind tool search, a call made through tool_call is checked by its real
    name: a `require` glob and the server's destructiveHint both hold it; "Allow for this session"
    lets that real tool run unasked afterwards, and the request shows the real name."""
    setup(
        home,
        fake_llm,
        tmp_path,
        extra="tools:\n  search: 'on'\n  approval:\n    require: ['mcp_*_rename_*']\n",
    )
    rename = "mcp_fake_rename_file"
    fake_llm.script(
        ToolCall("tool_call", {"name": rename, "arguments": {"path": "/srv/a", "to": "/srv/b"}}),
        ToolCall("tool_call", {"name": DELETE, "arguments": {"path": "/srv/x"}}),
        ToolCall("tool_call", {"name": rename, "arguments": {"path": "/srv/b", "to": "/srv/c"}}),
        Reply("Renamed twice, left x alone."),
    )
    adapter = ButtonAdapter()
    async with gateway(home, adapter) as gw:
        await ask(gw, "rename a to b, delete x, rename b to c")
        _, first = await adapter.wait_choices()
        assert rename in first.text and "`/srv/a`" in first.text and "tool_call" not in first.text
        assert first.choices is not None
        await gw.sessions.submit(tap(first.choices, "session", chat=WEB, user_id="tab1"))
        _, second = await adapter.wait_choices(2)
        assert DELETE in second.text and second.choices is not None
        await gw.sessions.submit(tap(second.choices, "deny", chat=WEB, user_id="tab1"))
        texts = await answered(gw, adapter, 3)
    assert texts[-1] == "Renamed twice, left x alone."
    assert runs(tmp_path) == ["rename_file /srv/a /srv/b", "rename_file /srv/b /srv/c"]
    assert [(r["tool"], r["state"], r["decision"]) for r in rows_of(home)] == [
        (rename, "done", "session"),
        (DELETE, "denied", "deny"),
    ]
    results = tool_results(fake_llm.anthropic_requests()[-1])
    assert [r["tool_use_id"] for r in results] == [
        c["id"]
        for m in fake_llm.anthropic_requests()[-1]["messages"]
        if isinstance(m["content"], list)
        for c in m["content"]
        if c.get("type") == "tool_use"
    ]
    assert "denied" in str(results[1]["content"]) and "renamed" in str(results[2]["content"])


def test_a_request_for_each_call_offers_no_session_in_buttons_or_words() -> None:
    """The shell's requests (options EACH_CALL) show Allow once and Deny, and a surface without
    buttons is told only `/approve CODE` and `/deny CODE`; other approvals keep all three."""
    from gateway.approvals.request import EACH_CALL, choices, fallback_text

    assert [c.label for c in choices("approval", "t", EACH_CALL).options] == ["Allow once", "Deny"]
    assert len(choices("approval", "t", ()).options) == 3
    words = fallback_text("approval", "ABC234", EACH_CALL)
    assert "/approve ABC234`" in words and "/deny ABC234" in words and "session" not in words
    assert "/approve ABC234 session" in fallback_text("approval", "ABC234")
