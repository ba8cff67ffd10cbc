"""Approvals and questions on Slack end to end, over both transports: real slack-bolt against the
fake Web API, Socket Mode (an `interactive` envelope acked within 3 s) and the signed HTTP Request
URL (a form-encoded `payload`, signed, one post); Block Kit buttons, ephemeral answers through the
action's response_url; the whole daemon, a real MCP server whose `delete_file` is annotated
destructive and records each run, and the fake LLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_slack import ALICE, BOB, CHANNEL, DM, USERS, Running, dm, mention, running
from tests.approvals_support import DELETE, mcp_yaml, result_of, runs
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.slack import BOT_USER_ID, SIGNING_SECRET, FakeSlack, SlackMessage, event_callback
from tests.fakes.slack_events import Delivery, EventsApi, SocketModeEvents

APPROVAL_BUTTONS = ["Allow once", "Allow for this session", "Deny"]


class Slack:
    """Slack's side over one transport: messages in, clicks in."""

    def __init__(self, fake: FakeSlack, run: Running, mode: str) -> None:
        self.fake, self.run, self.mode = fake, run, mode
        url = f"http://127.0.0.1:{run.adapter.http_port}/slack/events"
        self.http: EventsApi | None = None
        if mode == "http":
            self.http = EventsApi(url, SIGNING_SECRET, retry_delays=(0.0, 0.0, 0.0))
        self.socket = SocketModeEvents(self.fake, retry_delays=(0.0, 0.0, 0.0))

    async def say(self, event: dict[str, Any], event_id: str) -> None:
        if self.http is not None:
            await self.http.deliver(event_callback(event, event_id=event_id))
        else:
            await self.socket.deliver(event, event_id=event_id)

    async def click(self, payload: dict[str, Any]) -> Delivery:
        found = await (self.http or self.socket).interact(payload)
        assert found.outcome == "ok", found  # acked within Slack's 3 s
        return found


async def request_in(fake: FakeSlack, channel: str) -> SlackMessage:
    await fake.wait_until(lambda: any(m.buttons() for m in fake.posted(channel)))
    return next(m for m in fake.posted(channel) if m.buttons())


async def edited_away(fake: FakeSlack, channel: str, ts: str) -> SlackMessage:
    def closed() -> bool:
        message = _current(fake, channel, ts)
        return not message.buttons() and bool(message.edits)

    await fake.wait_until(closed)
    return _current(fake, channel, ts)


def _current(fake: FakeSlack, channel: str, ts: str) -> SlackMessage:
    return next(m for m in fake.posted(channel) if m.ts == ts)


async def answer_in(fake: FakeSlack, channel: str, count: int) -> str:
    """The count-th message of the bot that is no request (requests start with 🔐 or ❓)."""

    def answers() -> list[str]:
        return [m.text for m in fake.posted(channel) if not m.text.startswith(("🔐", "❓"))]

    await fake.wait_until(lambda: len(answers()) >= count)
    return answers()[count - 1]


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_only_the_asker_can_allow_and_allow_once_runs_once(
    home: Path, fake_llm: FakeLLM, mode: str, tmp_path: Path
) -> None:
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/report.txt"}), Reply("Deleted the report."))
    async with (
        FakeSlack(users=USERS) as fake,
        running(home, fake_llm, fake, mcp_yaml(tmp_path), mode=mode) as run,
    ):
        slack = Slack(fake, run, mode)
        await slack.say(mention(f"<@{BOT_USER_ID}> delete the report"), "EvAsk")
        request = await request_in(fake, CHANNEL)
        assert request.buttons() == APPROVAL_BUTTONS
        assert "mcp_fake_delete_file" in request.text and "`/srv/report.txt`" in request.text
        styles = [b.get("style") for b in request.blocks[1]["elements"]]
        assert styles == ["primary", None, "danger"]

        await slack.click(
            fake.block_actions(CHANNEL, request.ts, "Allow once", user_id=BOB, user_name="bob")
        )
        await fake.wait_until(lambda: bool(fake.ephemeral_for(BOB)))
        assert fake.ephemeral_for(BOB) == ["Only Alice (who asked) or an admin can answer this."]
        assert _current(fake, CHANNEL, request.ts).buttons() == APPROVAL_BUTTONS
        assert runs(tmp_path) == []

        await slack.click(fake.block_actions(CHANNEL, request.ts, "Allow once"))
        assert await answer_in(fake, CHANNEL, 1) == "Deleted the report."
        shown = await edited_away(fake, CHANNEL, request.ts)
        assert shown.text.endswith("✅ Allowed once by Alice.")
        # An old client still showing the buttons clicks again: nothing runs twice, the clicker
        # hears why.
        button = request.blocks[1]["elements"][0]
        await slack.click(fake.action_payload(CHANNEL, request.ts, button))
        await fake.wait_until(lambda: bool(fake.ephemeral_for(ALICE)))
        assert fake.ephemeral_for(ALICE)[0].startswith("Already answered. ✅ Allowed once by Alice")
        await run.gw.sessions.wait_idle()
    assert runs(tmp_path) == ["delete_file /srv/report.txt"]


async def test_deny_runs_nothing_and_the_model_says_so(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/a"}), Reply("All right, /srv/a stays."))
    async with (
        FakeSlack(users=USERS) as fake,
        running(home, fake_llm, fake, mcp_yaml(tmp_path)) as run,
    ):
        slack = Slack(fake, run, "socket")
        await slack.say(dm("delete /srv/a"), "EvA")
        request = await request_in(fake, DM)
        await slack.click(fake.block_actions(DM, request.ts, "Deny"))
        assert await answer_in(fake, DM, 1) == "All right, /srv/a stays."
        shown = await edited_away(fake, DM, request.ts)
    assert shown.text.endswith("🚫 Denied by Alice. Nothing was run.")
    assert runs(tmp_path) == [] and fake.ephemeral_for(ALICE) == []
    assert "denied" in str(result_of(fake_llm)["content"])


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_a_restart_while_pending_then_allow_completes_the_turn_once(
    home: Path, fake_llm: FakeLLM, mode: str, tmp_path: Path
) -> None:
    fake_llm.script(ToolCall(DELETE, {"path": "/srv/b"}), Reply("Deleted /srv/b."))
    async with FakeSlack(users=USERS) as fake:
        async with running(home, fake_llm, fake, mcp_yaml(tmp_path), mode=mode) as run:
            await Slack(fake, run, mode).say(dm("delete /srv/b"), "EvB")
            request = await request_in(fake, DM)
        async with running(home, fake_llm, fake, mcp_yaml(tmp_path), mode=mode) as run:
            await Slack(fake, run, mode).click(fake.block_actions(DM, request.ts, "Allow once"))
            assert await answer_in(fake, DM, 1) == "Deleted /srv/b."
            await edited_away(fake, DM, request.ts)
        assert len([m for m in fake.posted(DM) if m.text.startswith("🔐")]) == 1  # asked once
    assert runs(tmp_path) == ["delete_file /srv/b"]
    assert len(fake_llm.anthropic_requests()) == 2


async def test_an_expired_request_runs_nothing(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """The request's own timer, on the injected clock: moving it past the 10 minutes expires the
    request."""
    fake_llm.script(
        ToolCall(DELETE, {"path": "/srv/c"}), Reply("Nobody allowed it, so /srv/c stays.")
    )
    async with (
        FakeSlack(users=USERS) as fake,
        running(home, fake_llm, fake, mcp_yaml(tmp_path)) as run,
    ):
        await Slack(fake, run, "socket").say(dm("delete /srv/c"), "EvC")
        request = await request_in(fake, DM)
        await run.clock.advance(599)
        assert await fake_llm_calls(fake_llm) == 1 and not _current(fake, DM, request.ts).edits
        await run.clock.advance(1)
        assert await answer_in(fake, DM, 1) == "Nobody allowed it, so /srv/c stays."
        shown = await edited_away(fake, DM, request.ts)
    assert shown.text.endswith("⌛ Expired: nobody answered within 10 minutes. Nothing was run.")
    assert runs(tmp_path) == []


async def fake_llm_calls(llm: FakeLLM) -> int:
    return len(llm.anthropic_requests())


async def test_ask_with_two_options_returns_the_clicked_one(
    home: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script(
        ToolCall("ask", {"question": "Tea or coffee?", "options": ["Tea", "Coffee"]}),
        Reply("Coffee it is."),
    )
    async with (
        FakeSlack(users=USERS) as fake,
        running(home, fake_llm, fake, mcp_yaml(tmp_path)) as run,
    ):
        slack = Slack(fake, run, "socket")
        await slack.say(dm("make me a drink"), "EvD")
        request = await request_in(fake, DM)
        assert request.buttons() == ["Tea", "Coffee", "Something else"]
        await slack.click(fake.block_actions(DM, request.ts, "Coffee"))
        assert await answer_in(fake, DM, 1) == "Coffee it is."
        shown = await edited_away(fake, DM, request.ts)
    assert shown.text.endswith("💬 Alice answered: Coffee")
    assert result_of(fake_llm)["content"] == "The user answered: Coffee"
