"""Two agents in one gateway never cross: schedules, `session_search`, skills, pairing and tool
search each stay with their agent or bot account, and a scheduled job's post goes out through the
account it was made on. One Telegram platform, two bot accounts (`default` → main, `family` → the
agent `home`), through the real graph with the fake LLM over its wire and a recording adapter per
account (tool search: the real MCP server of tests/test_tool_search.py)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.access.gate import AccessGate
from gateway.access.pairing import ALPHABET, CODE_LENGTH
from gateway.cli.main import main
from gateway.events import ChatRef, Inbound, SubmitOutcome, SubmitResult
from gateway.ops.wiring import Gateway
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, llm_url, write_config
from tests.jobs_support import fire_jobs, job_rows, settle
from tests.lifecycle_support import FakeClock

CONFIG = """\
telegram:
  token: '1:aa'
  allowed_users: ['7']
  accounts:
    family: {token: '2:bb'}
agents:
  home: {identity: You are Hearth.}
bindings:
  - {agent: home, platform: telegram, account: family}
schedule: {timezone: Europe/Berlin}
"""


class Bot(RecordingAdapter):
    """One Telegram bot account as the gateway sees it."""

    def __init__(self, account: str) -> None:
        super().__init__("telegram")
        self.account = account


class Two:
    """The gateway with its two bots; `say` is a user's message to one of them."""

    def __init__(self, gw: Gateway, bots: dict[str, Bot], clock: FakeClock) -> None:
        self.gw, self.bots, self.clock, self._ids = gw, bots, clock, 0

    async def say(self, account: str, text: str, *, user: str = "7") -> SubmitResult:
        self._ids += 1
        inbound = Inbound(
            chat=ChatRef("telegram", "dm", user, account=account),
            user_id=user,
            text=text,
            message_id=f"m{self._ids}",
            received_at=datetime.now(UTC),
            user_name="Ann",
        )
        result = await self.gw.sessions.submit(inbound)
        await settle(self.gw)
        return result

    def texts(self, account: str) -> list[str]:
        return self.bots[account].texts()


@asynccontextmanager
async def two_agents(home: Path, fake_llm: FakeLLM, config: str = CONFIG) -> AsyncIterator[Two]:
    write_config(home, base_url=llm_url(fake_llm, "anthropic"), extra=config)
    bots = {name: Bot(name) for name in ("default", "family")}
    clock = FakeClock()
    gw = gateway_for(home, list(bots.values()), clock=clock)
    assert gw.lifecycle is not None and gw.jobs is not None
    await gw.lifecycle.start()
    await gw.jobs.start()
    try:
        yield Two(gw, bots, clock)
    finally:
        await settle(gw)
        await gw.jobs.stop(0)
        await gw.sessions.cancel_all()
        await gw.lifecycle.stop(0)
        await gw.llm.close()
        gw.store.close()


def system_text(fake_llm: FakeLLM) -> str:
    """The system prompt of the last request the model was sent."""
    return "".join(block["text"] for block in fake_llm.anthropic_requests()[-1]["system"])


def last_tool_result(fake_llm: FakeLLM) -> str:
    """The text of the last tool result the model was sent."""
    messages = fake_llm.anthropic_requests()[-1]["messages"]
    blocks = [
        b
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    content = blocks[-1]["content"]
    return content if isinstance(content, str) else " ".join(c.get("text", "") for c in content)


async def test_a_job_stays_with_its_agent_and_posts_through_its_account(
    home: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    async with two_agents(home, fake_llm) as two:
        fake_llm.script(
            ToolCall(
                "schedule",
                {
                    "action": "create",
                    "when": "2031-01-06T10:30",
                    "prompt": "Remind Ann to water the plants.",
                    "name": "plants",
                },
            ),
            Reply("I'll remind you at 10:30."),
        )
        await two.say("family", "remind me to water the plants at 10:30")
        [job] = job_rows(two.gw)
        assert (job["agent"], job["account"], job["platform"]) == ("home", "family", "telegram")

        fake_llm.script(ToolCall("schedule", {"action": "list"}), Reply("Nothing scheduled."))
        await two.say("default", "what have you scheduled?")
        assert "plants" not in last_tool_result(fake_llm)  # main does not see home's job
        fake_llm.script(
            ToolCall("schedule", {"action": "cancel", "job_id": job["id"]}), Reply("Could not.")
        )
        await two.say("default", "cancel it")
        assert job_rows(two.gw)[0]["state"] == job["state"]  # nor can it cancel it

        fake_llm.script(ToolCall("schedule", {"action": "list"}), Reply("The plants, at 10:30."))
        await two.say("family", "what have you scheduled?")
        assert "plants" in last_tool_result(fake_llm)

        fake_llm.script(Reply("Time to water the plants!"))
        two.clock.advance(minutes=30)
        assert await fire_jobs(two.gw)
        posted = f"⏰ plants (job #{job['id']})\n\nTime to water the plants!"
        assert two.texts("family")[-1] == posted and posted not in two.texts("default")
        assert "You are Hearth." in system_text(fake_llm)  # the run is the agent `home`'s turn
        cron = two.gw.store.one("SELECT agent, account FROM sessions WHERE platform = 'cron'")
        assert cron is not None and tuple(cron) == ("home", "family")
    assert main(["--home", str(home), "jobs", "list", "--all"]) == 0  # the owner sees whose it is
    assert "; owner telegram:7; agent home via telegram@family" in capsys.readouterr().out


async def test_the_job_limit_counts_a_persons_jobs_with_each_agent(
    home: Path, fake_llm: FakeLLM
) -> None:
    """A person sees and cancels only the jobs of the agent they talk to, so the limit that agent
    names ("already has 1 active jobs ... action=list shows them") counts those only."""
    config = CONFIG.replace(
        "schedule: {timezone: Europe/Berlin}",
        "schedule: {timezone: Europe/Berlin, max_jobs_per_person: 1}",
    )
    create = {"action": "create", "when": "2031-01-06T10:30", "prompt": "Water the plants."}
    async with two_agents(home, fake_llm, config) as two:
        for account in ("family", "default", "default"):
            fake_llm.script(ToolCall("schedule", create), Reply("Done."))
            await two.say(account, "remind me at 10:30")
        last = last_tool_result(fake_llm)
        assert last.startswith("Not scheduled: this person already has 1 active jobs")
        assert [(j["agent"], j["account"]) for j in job_rows(two.gw)] == [
            ("home", "family"),
            ("main", "default"),
        ]


async def test_session_search_finds_only_its_own_agents_conversations(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with two_agents(home, fake_llm) as two:
        fake_llm.script(Reply("Kiwi is a fine name."))
        await two.say("family", "my parrot is called Kiwi")
        await two.say("family", "/new")

        fake_llm.script(ToolCall("session_search", {"query": "parrot"}), Reply("I don't know."))
        await two.say("default", "what is my parrot called?")
        found = last_tool_result(fake_llm)
        assert "Kiwi" not in found and "No past conversations match" in found

        fake_llm.script(ToolCall("session_search", {"query": "parrot"}), Reply("Kiwi."))
        await two.say("family", "what is my parrot called?")
        assert "Kiwi" in last_tool_result(fake_llm)


async def test_each_agent_has_its_own_skills(home: Path, fake_llm: FakeLLM) -> None:
    async with two_agents(home, fake_llm) as two:
        fake_llm.script(
            ToolCall(
                "skill_manage",
                {
                    "action": "create",
                    "name": "watering",
                    "description": "How Ann's plants are watered.",
                    "content": "Water the fern on Mondays.",
                },
            ),
            Reply("Saved."),
        )
        await two.say("family", "remember how to water the plants")
        skills = home / "memories" / "agents" / "home" / "skills"
        assert [p.parent.name for p in skills.rglob("SKILL.md")] == ["watering"]
        assert not list((home / "skills").rglob("SKILL.md"))

        fake_llm.script(Reply("Hello."))
        await two.say("family", "/new")
        await two.say("family", "hello")
        assert "watering" in system_text(fake_llm)
        await two.say("default", "hello")
        assert "watering" not in system_text(fake_llm)


CODE = re.compile(rf"\b([{ALPHABET}]{{{CODE_LENGTH}}})\b")


async def test_a_user_paired_with_one_bot_is_a_stranger_to_the_other(
    home: Path, fake_llm: FakeLLM
) -> None:
    async with two_agents(home, fake_llm) as two:
        result = await two.say("family", "hi", user="8")
        assert result == SubmitResult(SubmitOutcome.REFUSED, "pairing code sent")
        assert two.texts("default") == []  # the code came through the bot asked
        [message] = two.bots["family"].sent
        code = CODE.search(message.plain)
        assert code is not None
        gate = two.gw.sessions.gate
        assert isinstance(gate, AccessGate)
        approval = gate.pairing.approve(code.group(1), by="cli", now=datetime.now(UTC))
        assert approval.status == "approved"
        assert gate.pairing.is_approved("telegram", "8", "family")
        assert not gate.pairing.is_approved("telegram", "8")

        fake_llm.script(Reply("Hello, 8."))
        assert (await two.say("family", "hello", user="8")).outcome is SubmitOutcome.ACCEPTED
        assert two.texts("family")[-1] == "Hello, 8."
        result = await two.say("default", "hello", user="8")
        assert result == SubmitResult(SubmitOutcome.REFUSED, "pairing code sent")


async def test_with_memory_shared_a_profile_is_one_for_both_agents(
    home: Path, fake_llm: FakeLLM
) -> None:
    shared = CONFIG.replace(
        "home: {identity: You are Hearth.}", "home: {identity: You are Hearth., memory: shared}"
    )
    async with two_agents(home, fake_llm, shared) as two:
        save = {"action": "add", "target": "user", "content": "Ann's fern is called Fred."}
        fake_llm.script(ToolCall("memory", save), Reply("Noted."))
        await two.say("family", "remember: my fern is Fred")
        profiles = [p.relative_to(home).as_posix() for p in home.rglob("people/*.md")]
        assert profiles == ["memories/people/1.md"]  # the home's profiles, not the agent's own
        fake_llm.script(Reply("Fred."))
        await two.say("default", "what is my fern called?")
        assert "Ann's fern is called Fred." in system_text(fake_llm)  # main reads it too


async def test_tool_search_finds_only_the_tools_its_agent_may_use(
    home: Path, fake_llm: FakeLLM
) -> None:
    """The agent `ledger` may use the weather tools of the MCP server and nothing else of it: its
    sessions' deferred catalog holds those only, so tool_search cannot find (nor tool_call run)
    the mail tool the agent `main` finds in the same gateway."""
    from tests.test_tool_search import WEATHER, configure, running, tool_results

    configure(
        home,
        fake_llm,
        extra="""\
        agents:
          ledger:
            identity: You are Ledger.
            tools: [memory, 'mcp_fake_weather_*']
        bindings:
          - {agent: ledger, platform: cli, chat: books}
        """,
    )
    mail = "mcp_fake_send_email"
    search = ToolCall("tool_search", {"query": "send an e-mail message", "limit": 10})
    call = ToolCall("tool_call", {"name": mail, "arguments": {"to": "x@example.com"}})
    fake_llm.script(search, Reply("main searched"), search, call, Reply("ledger searched"))
    async with running(home) as (gw, _):
        for chat in ("c1", "books"):
            await gw.sessions.submit(inbound("who can send mail?", chat_id=chat))
            await settle(gw)
        rows = gw.store.all(
            "SELECT s.agent, l.specs FROM sessions s JOIN tool_lists l"
            " ON l.id = s.tool_list_id ORDER BY s.id"
        )
    requests = fake_llm.anthropic_requests()
    main_found, ledger_found, ledger_called = (
        str(tool_results(requests[n])[-1]["content"]) for n in (1, 3, 4)
    )
    assert mail in main_found
    assert mail not in ledger_found and "You are Ledger." in system_text(fake_llm)
    assert ledger_called.startswith(f"Unknown tool '{mail}': use tool_search")
    assert [t["name"] for t in requests[-1]["tools"]] == ["memory", "tool_search", "tool_call"]
    deferred = {r["agent"]: [t["name"] for t in json.loads(r["specs"])["deferred"]] for r in rows}
    assert len(deferred["main"]) == 60 and mail in deferred["main"]
    assert sorted(deferred["ledger"]) == ["mcp_fake_weather_alerts", WEATHER]
