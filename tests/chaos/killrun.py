"""The kill -9 chaos run: `gateway run` as a real subprocess against FakeTelegram, FakeSlack (Socket
Mode), FakeDiscord (REST + gateway websocket) and a scripted FakeLLM in this process, many
conversations at once, SIGKILL at seeded moments and a restart each time; then every promise is
checked from what the fakes recorded and what SQLite holds. Shared by tests/test_chaos.py and
bench/chaos.py.

A user message `c7t3 ...` gets the reply `reply c7t3 [users=N]` (N = user messages the model saw, so
a lost or doubled history shows), some replies long enough to be cut into several Telegram messages
whose lines are numbered `c7t3 L0042`; `/new` ends the session, which makes the daemon flush it to
memory (one tool call).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
import random
import re
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.sessions.commands import NEW_TEXT
from gateway.sessions.flush import FLUSH_MARK
from tests.chaos.models import HEADER, LINE, RespondingLLM, blocks, numbered_reply, text_of
from tests.chaos.platforms import DiscordUsers, Seen, SlackDelivery, Watcher
from tests.daemon_proc import DaemonProc
from tests.fakes.base import Delay
from tests.fakes.discord import TOKEN as DISCORD_TOKEN
from tests.fakes.discord import FakeDiscord
from tests.fakes.llm import ANTHROPIC_PATH, FakeLLM, Reply, ToolCall
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.fakes.telegram import TOKEN, FakeTelegram

TAG = re.compile(r"\bc(\d+)t(\d+)\b")
# a send the fake stored this long before SIGKILL must have been marked sent by then
IN_FLIGHT_GRACE_S = 1.0
CAUGHT_UP = re.compile(r"discord: caught up after .*?(\d+) submitted")
DISCORD_DM = 700_000_000_000_000_000  # + conversation: the Discord DM channel id
DISCORD_USER = 800_000_000_000_000_000  # + conversation: the Discord user id


@dataclass(frozen=True, slots=True)
class ChaosPlan:
    conversations: int = 20
    turns: int = 4  # steps per conversation; a `/new` is a step
    kills: int = 3
    seed: int = 12
    new_chance: float = 0.2  # a step (not the first) is `/new`
    long_chance: float = 0.25  # a reply is long enough to be split (3 Telegram messages)
    llm_delay_max: float = 0.04  # seconds the model "thinks" per turn (seeded per turn)
    # per flush call: widens the window in which a kill cuts a flush off
    flush_delay_max: float = 0.25
    first_chat: int = 50_000
    # conversation i is a DM on platforms[i % n]
    platforms: tuple[str, ...] = ("telegram", "discord", "slack")
    # of the kills, how many land the instant Discord stored a chunk (in flight)
    aimed_at_discord: int = 1
    # Discord conversations that hold a message back until the first kill and send it while no
    # daemon runs: only the restarted daemon's catch-up can answer it
    sent_while_dead: int = 2
    answer_timeout: float = 180.0
    ready_timeout: float = 120.0


@dataclass(frozen=True, slots=True)
class Step:
    conversation: int
    index: int
    kind: str  # "msg" or "new"
    tag: str
    # for "msg": the user messages the model should see (this one included)
    users: int = 0
    lines: int = 0  # for "msg": numbered lines in the reply (0: a one-line reply)


def platform_of(plan: ChaosPlan, conversation: int) -> str:
    return plan.platforms[conversation % len(plan.platforms)]


def on_slack(plan: ChaosPlan, conversation: int) -> bool:
    return platform_of(plan, conversation) == "slack"


def chat_of(plan: ChaosPlan, conversation: int) -> str:
    """The chat as the watcher names it: `telegram:<chat
    id>`, `slack:<DM channel>` or `discord:<DM channel>`."""
    platform = platform_of(plan, conversation)
    if platform == "slack":
        return f"slack:D{conversation}"
    if platform == "discord":
        return f"discord:{DISCORD_DM + conversation}"
    return f"telegram:{plan.first_chat + conversation}"


def reply_shape(seed: int, tag: str, plan: ChaosPlan) -> tuple[int, float]:
    """(numbered lines, model delay) for a turn: seeded by the tag, so a re-run answers the same."""
    rng = random.Random(f"{seed}:{tag}")
    lines = 120 if rng.random() < plan.long_chance else 0
    return lines, rng.uniform(0, plan.llm_delay_max)


def step_of(tag: str) -> int:
    """`c7t3` → 3."""
    found = TAG.search(tag)
    return int(found.group(2)) if found else -1


def is_flush(body: Mapping[str, Any]) -> bool:
    return any(
        FLUSH_MARK in text_of(m) for m in body.get("messages") or [] if m.get("role") == "user"
    )


def flush_session_tag(body: Mapping[str, Any]) -> str | None:
    """A flush's transcript starts with the session's
    first user message: its tag names the session."""
    for m in body.get("messages") or []:
        if m.get("role") == "user":
            found = TAG.search(text_of(m))
            return found.group(0) if found else None
    return None


def turn_tag(body: Mapping[str, Any]) -> str | None:
    messages = body.get("messages") or []
    if not messages:
        return None
    found = TAG.search(text_of(messages[-1]))
    return found.group(0) if found else None


def system_text(body: Mapping[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, str):
        return system
    return "".join(b.get("text", "") for b in system or [])


class ScriptedLLM(RespondingLLM):
    """The fake model for the chaos run: every request
    is answered by `answer` (deterministic per tag)."""

    def __init__(self, plan: ChaosPlan) -> None:
        super().__init__(self.answer)
        self.plan = plan

    def answer(self, body: dict[str, Any]) -> Any:
        plan = self.plan
        messages = body.get("messages") or []
        if is_flush(body):
            tag = flush_session_tag(body) or "unknown"
            last = messages[-1] if messages else {}
            if any(b.get("type") == "tool_result" for b in blocks(last)):
                return Reply("saved")
            delay = random.Random(f"{plan.seed}:flush:{tag}").uniform(0, plan.flush_delay_max)
            return Delay(
                delay,
                ToolCall(
                    "memory",
                    {
                        "action": "add",
                        "target": "memory",
                        "content": f"session {tag} was about fox facts",
                    },
                ),
            )
        turn = turn_tag(body)
        if turn is None:
            return Reply("(no tag)")
        tag = turn
        users = sum(1 for m in messages if m.get("role") == "user")
        lines, delay = reply_shape(plan.seed, tag, plan)
        return Delay(delay, Reply(numbered_reply(tag, users, lines)))


@dataclass
class Epoch:
    """One daemon life: where its share of the model's record starts, and when it ended."""

    started: float
    llm_from: int
    killed: float | None = None  # when SIGKILL was sent


@dataclass
class ChaosReport:
    plan: ChaosPlan
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def render(self) -> str:
        out = [
            (
                f"kill -9 chaos: {self.plan.conversations} conversations x {self.plan.turns} "
                f"steps, seed {self.plan.seed}, {self.seconds:.1f}s"
            )
        ]
        out += [f"  {k:<34} {v}" for k, v in self.counts.items()]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  PROBLEM: {p}" for p in self.problems]
        out += [f"  daemon error log: {e}" for e in self.log_errors[:20]]
        return "\n".join(out)


def daemon_config(
    home: Path,
    plan: ChaosPlan,
    tg: FakeTelegram,
    slack: FakeSlack,
    discord: FakeDiscord,
    llm: FakeLLM,
) -> None:
    def on(platform: str) -> list[int]:
        return [i for i in range(plan.conversations) if platform_of(plan, i) == platform]

    users = ", ".join(f"'{plan.first_chat + i}'" for i in on("telegram"))
    slack_users = ", ".join(f"'U{i}'" for i in on("slack"))
    discord_users = ", ".join(f"'{DISCORD_USER + i}'" for i in on("discord"))
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"""\
model:
  provider: anthropic
  name: claude-test
  base_url: {llm.base_url}
  api_key: test-key
  max_retries: 0
  timeout_s: 30
web:
  enabled: false
telegram:
  token: '{TOKEN}'
  api_server: {tg.base_url}
  polling_timeout: 1
  allowed_users: [{users}]
slack:
  bot_token: '{BOT_TOKEN}'
  app_token: '{APP_TOKEN}'
  api_url: {slack.api_base_url}
  allowed_users: [{slack_users}]
discord:
  token: '{DISCORD_TOKEN}'
  api_base: {discord.base_url}/api/v10
  gateway_url: {discord.ws_url}
  command_sync: 'off'
  allowed_users: [{discord_users}]
session_reset:
  mode: none
memory:
  memory_char_limit: 1000000
  flush_min_messages: 1
  shared_writers: everyone  # the flushes of many people's sessions all write the shared notes here
delivery:
  replay_max_age_minutes: 600
daemon:
  drain_seconds: 10
  watchdog: false
""",
        encoding="utf-8",
    )


class KillRun:
    def __init__(self, plan: ChaosPlan, home: Path, *, log: Any = None) -> None:
        self.plan = plan
        self.home = home
        self.log = log or (lambda line: None)
        self.rng = random.Random(plan.seed)
        self.steps: list[Step] = []
        self.epochs: list[Epoch] = []
        self.daemon: DaemonProc | None = None
        self.procs: list[DaemonProc] = []
        self.exit_code: int | None = None
        # conversation → the step it sends only while the daemon is dead
        self.held: dict[int, int] = {}
        # held steps, ready to be sent
        self.parked: list[tuple[int, Step, str, asyncio.Future[None]]] = []
        # (tag, channel, message id, Discord calls before)
        self.dead_sends: list[tuple[str, str, str, int]] = []
        self.drivers_left = 0

    # ------------------------------------------------------------------ the run
    async def run(self) -> ChaosReport:
        started = time.monotonic()
        users = {
            f"U{i}": {
                "id": f"U{i}",
                "name": f"user{i}",
                "real_name": f"User {i}",
                "profile": {"display_name": f"User{i}", "real_name": f"User {i}"},
            }
            for i in range(self.plan.conversations)
            if on_slack(self.plan, i)
        }
        async with (
            FakeTelegram() as tg,
            FakeSlack(users=users) as slack,
            FakeDiscord(guilds=[]) as discord,
            ScriptedLLM(self.plan) as llm,
        ):
            self.tg, self.slack, self.discord, self.llm = tg, slack, discord, llm
            self.slack_out = SlackDelivery(slack)
            self.discord_users = DiscordUsers(discord, self._stored_discord, self._known_discord)
            daemon_config(self.home, self.plan, tg, slack, discord, llm)
            self.watcher = Watcher(tg, slack, discord)
            self.watcher.start()
            await self._start_daemon()
            plan_steps = self._plan_steps()
            total = len(plan_steps)
            self.held = self._hold_back(plan_steps)
            self.drivers_left = len(plan_steps_by_conv(plan_steps))
            drivers = [
                asyncio.create_task(self._converse(i, steps))
                for i, steps in plan_steps_by_conv(plan_steps)
            ]
            monkey = asyncio.create_task(self._monkey(total))
            try:
                try:
                    await asyncio.gather(*drivers)
                finally:
                    for task in (*drivers, monkey):
                        task.cancel()
                    await asyncio.gather(*drivers, monkey, return_exceptions=True)
                # the monkey may have been cancelled between a kill and the restart
                if (
                    self.daemon is None
                    or self.daemon.proc is None
                    or self.daemon.proc.returncode is not None
                ):
                    await self._start_daemon()
                await self._wait_flushes()
                assert self.daemon is not None
                self.exit_code = await self.daemon.stop()
            finally:
                await self.slack_out.stop()
                await self.discord_users.stop()
                for proc in self.procs:
                    await proc.kill()
                await self.watcher.stop()
            report = self.verify()
            report.counts["kills"] = sum(1 for e in self.epochs if e.killed is not None)
            report.counts["Slack events pushed again (no ack)"] = self.slack_out.redeliveries
            report.counts["Discord messages sent while no daemon was connected"] = (
                self.discord_users.sent_offline
            )
            report.counts["Discord first messages repeated (chat unknown)"] = (
                self.discord_users.repeated
            )
            report.counts["Discord creates deduped by nonce"] = len(discord.nonce_repeats)
            self._verify_sent_while_dead(report)
        report.seconds = time.monotonic() - started
        return report

    def _plan_steps(self) -> list[Step]:
        plan = self.plan
        for i in range(plan.conversations):
            users = 0
            for t in range(plan.turns):
                tag = f"c{i}t{t}"
                if (
                    t > 0
                    and users > 0
                    and self.rng.random() < plan.new_chance
                    and not on_slack(plan, i)
                ):
                    self.steps.append(Step(i, t, "new", tag))
                    users = 0
                    continue
                users += 1
                lines, _ = reply_shape(plan.seed, tag, plan)
                self.steps.append(Step(i, t, "msg", tag, users=users, lines=lines))
        return self.steps

    def _hold_back(self, steps: list[Step]) -> dict[int, int]:
        """The first `sent_while_dead` Discord conversations each keep their first message after the
        chat's first one (the bot knows the chat by then) until the first kill, which sends it while
        no daemon runs."""
        held: dict[int, int] = {}
        if not self.plan.kills:
            return held
        for step in steps:
            if len(held) >= self.plan.sent_while_dead:
                break
            if (
                step.kind == "msg"
                and step.index > 0
                and step.conversation not in held
                and platform_of(self.plan, step.conversation) == "discord"
            ):
                held[step.conversation] = step.index
        return held

    async def _start_daemon(self) -> None:
        for _ in range(3):
            # let the loop read whatever the dead daemon wrote before the boundary is taken
            await asyncio.sleep(0)
        self.watcher.catch_up()
        self.watcher.epoch = len(self.epochs)
        self.epochs.append(Epoch(time.monotonic(), len(self.llm.calls)))
        daemon = DaemonProc(self.home)
        self.daemon = daemon
        self.procs.append(daemon)
        await daemon.start()
        await daemon.wait_ready(self.plan.ready_timeout)
        self.log(
            f"daemon #{len(self.epochs)} ready ({time.monotonic() - self.epochs[-1].started:.1f}s)"
        )

    async def _monkey(self, total: int) -> None:
        """SIGKILL at seeded moments: after a seeded share of the answers, plus a seeded fraction of
        a second. An aimed kill then waits for the next chunk Discord stores and lands before
        Discord's answer leaves, so the restart must send a chunk Discord already has: the case its
        nonce is for. Aimed are the kills that follow the longest lives (Discord serves only ~2 s
        after a boot, once discord.py gave up waiting for guilds); the answers that came in while
        one waited push the later kills back by as many, so aiming does not bunch the seeded kills
        together."""
        plan = self.plan
        points = sorted(self.rng.uniform(0.05, 0.9) * total for _ in range(plan.kills))
        gaps = sorted(
            range(plan.kills), key=lambda k: points[k] - (points[k - 1] if k else 0.0), reverse=True
        )
        aimed = set(gaps[: plan.aimed_at_discord])
        shift = 0
        for k, point in enumerate(points):
            target = min(point + shift, 0.95 * total)  # never past the end: every kill still lands

            def due(first: bool = k == 0, target: float = target) -> bool:
                # the first kill waits for the held steps
                held_back = first and len(self.parked) < len(self.held)
                # nothing else can move
                stuck = bool(self.parked) and self.drivers_left == len(self.parked)
                return stuck or (
                    self.watcher.answered() >= target and not held_back and self._caught_up_dead()
                )

            await self.watcher.wait(due, self.plan.answer_timeout, f"progress before kill {k + 1}")
            await asyncio.sleep(self.rng.uniform(0, 0.05))
            daemon = self.daemon
            assert daemon is not None and daemon.proc is not None
            how = "at a seeded moment"
            if k in aimed and await self._kill_on_discord_post(daemon):
                # the kill time was taken as the signal went
                how = "the instant Discord stored a chunk"
                shift += max(0, self.watcher.answered() - round(target))
            else:
                self.epochs[-1].killed = time.monotonic()
            await daemon.kill()
            await self.discord_users.end_life()
            self.log(
                f"kill {k + 1}/{plan.kills} at {self.watcher.answered()}/{total} answers, {how}"
            )
            await self._send_while_dead()
            await self._start_daemon()

    def _caught_up_dead(self) -> bool:
        """The messages sent while no daemon ran are answered and the daemon that read them logged
        its catch-up: a kill before that would leave them to a later life or its count unlogged, and
        the checks less exact."""
        if not self.dead_sends:
            return True
        answered = all(self.watcher.headers[tag] for tag, *_ in self.dead_sends)
        reader = self.procs[self.discord_users.sent_dead[-1][0]]
        return answered and b"caught up after a restart" in reader.stderr

    async def _send_while_dead(self) -> None:
        """The held steps go out now, with no daemon connected: Discord delivers them to nobody."""
        parked, self.parked = self.parked, []
        for conversation, step, text, release in parked:
            channel = str(DISCORD_DM + conversation)
            calls = len(self.discord.calls)
            message_id = await self.discord_users.send_while_dead(
                channel, str(DISCORD_USER + conversation), text
            )
            self.dead_sends.append((step.tag, channel, message_id, calls))
            release.set_result(None)
        if parked:
            self.log(
                f"sent {len(parked)} Discord message(s) while "
                f"no daemon runs: {[p[1].tag for p in parked]}"
            )

    async def _kill_on_discord_post(self, daemon: DaemonProc, within: float = 30.0) -> bool:
        """SIGKILL from inside the fake's handler, right after it stored a chunk; False if none came
        in time."""
        fired = asyncio.Event()

        def kill(_: object) -> None:
            if not fired.is_set() and daemon.proc is not None and daemon.proc.returncode is None:
                self.epochs[-1].killed = time.monotonic()
                daemon.proc.kill()
                fired.set()

        self.discord.on_posted = kill
        try:
            await asyncio.wait_for(fired.wait(), within)
        except TimeoutError:
            return False
        finally:
            self.discord.on_posted = None
        return True

    async def _converse(self, conversation: int, steps: list[Step]) -> None:
        try:
            await self._converse_steps(conversation, steps)
        finally:
            self.drivers_left -= 1
            self.watcher.poke()

    async def _converse_steps(self, conversation: int, steps: list[Step]) -> None:
        name = chat_of(self.plan, conversation)
        news = 0
        for step in steps:
            if step.kind == "new":
                news += 1
                self._say(conversation, step, "/new")
                await self.watcher.wait(
                    lambda n=news: self.watcher.news[name] >= n,
                    self.plan.answer_timeout,
                    f"the answer to /new #{news} in {name}",
                )
                continue
            text = f"{step.tag} tell me about foxes"
            if self.held.get(conversation) == step.index:
                release = asyncio.get_running_loop().create_future()
                self.parked.append((conversation, step, text, release))
                self.watcher.poke()
                await release  # the monkey sends it between a kill and the restart
            else:
                self._say(conversation, step, text)
            await self.watcher.wait(
                lambda s=step: (
                    self.watcher.headers[s.tag] >= 1 and len(self.watcher.lines[s.tag]) >= s.lines
                ),
                self.plan.answer_timeout,
                f"the answer to {step.tag}",
            )

    def _say(self, conversation: int, step: Step, text: str) -> None:
        platform = platform_of(self.plan, conversation)
        if platform == "slack":
            # a real ts: the gateway dates the message by it (an old one would get the offline note)
            self.slack_out.send(
                f"D{conversation}",
                f"U{conversation}",
                text,
                f"{int(time.time())}.{conversation:04d}{step.index:02d}",
            )
        elif platform == "discord":
            self.discord_users.send(
                str(DISCORD_DM + conversation), str(DISCORD_USER + conversation), text
            )
        else:
            chat = self.plan.first_chat + conversation
            self.tg.inject_message(
                chat, text, user_id=chat, username=f"user{chat}", first_name=f"U{chat}"
            )

    def _stored_discord(self, message_id: str) -> bool:
        with _db(self.home) as db:
            return (
                db.execute(
                    "SELECT 1 FROM inbound WHERE platform = 'discord' AND platform_message_id = ?",
                    (message_id,),
                ).fetchone()
                is not None
            )

    def _known_discord(self, channel: str) -> bool:
        with _db(self.home) as db:
            return (
                db.execute(
                    "SELECT 1 FROM inbound WHERE platform = 'discord' AND chat_id = ? LIMIT 1",
                    (channel,),
                ).fetchone()
                is not None
            )

    async def _wait_flushes(self) -> None:
        deadline = time.monotonic() + self.plan.answer_timeout
        while time.monotonic() < deadline:
            with _db(self.home) as db:
                left = db.execute(
                    "SELECT COUNT(*) FROM sessions WHERE flush_state IN ('pending', 'running')"
                ).fetchone()[0]
            if not left:
                return
            await asyncio.sleep(0.1)
        raise AssertionError("flushes still pending at the end of the run")

    # ------------------------------------------------------------------ the checks
    def epoch_of_call(self, index: int) -> int:
        return bisect.bisect_right([e.llm_from for e in self.epochs], index) - 1

    def verify(self) -> ChaosReport:
        report = ChaosReport(self.plan)
        problems = report.problems
        if self.exit_code != 0:
            problems.append(f"the last daemon exited {self.exit_code} after SIGTERM")
        self._verify_delivery(report)
        self._verify_discord_stored(report)
        self._verify_llm_and_prompts(report)
        for proc in self.procs:
            for rec in proc.log_records():
                if rec.get("level") in ("ERROR", "CRITICAL"):
                    report.log_errors.append(str(rec.get("message") or rec.get("msg") or rec)[:300])
        report.counts["daemon error log lines"] = len(report.log_errors)
        return report

    def _verify_delivery(self, report: ChaosReport) -> None:
        by_chat: dict[str, list[Seen]] = defaultdict(list)
        for s in self.watcher.seen:
            by_chat[s.chat].append(s)
        msgs = [s for s in self.steps if s.kind == "msg"]
        news = [s for s in self.steps if s.kind == "new"]
        tally: Counter[str] = Counter()
        for conv in range(self.plan.conversations):
            chat = chat_of(self.plan, conv)
            self._verify_chat(conv, chat, by_chat.get(chat, []), report, tally)
        conversations = range(self.plan.conversations)
        report.counts.update(
            {
                "conversations": self.plan.conversations,
                "user messages": len(msgs),
                "/new commands": len(news),
                "answers (headers seen)": sum(1 for s in msgs if self.watcher.headers[s.tag] >= 1),
                "Slack conversations": sum(1 for i in conversations if on_slack(self.plan, i)),
                "Discord conversations": sum(
                    1 for i in conversations if platform_of(self.plan, i) == "discord"
                ),
                "chunks delivered": tally["chunks"],
                "chunks resent (in flight at a kill)": tally["in flight"],
                "Discord chunks delivered": tally["discord chunks"],
                "Discord chunks posted twice": tally["discord doubles"],
                "restarts": len(self.epochs) - 1,
            }
        )

    def _verify_chat(
        self, conv: int, chat: str, received: list[Seen], report: ChaosReport, tally: Counter[str]
    ) -> None:
        """One conversation's chat: every chunk of every answer once and in order, and every /new
        answered once (a chunk in flight at a kill may come twice: counted, not a problem)."""
        problems = report.problems
        occurrences, unexpected = _occurrences(received)
        tally["chunks"] += len(received)
        tally["discord chunks"] += len(received) if chat.startswith("discord:") else 0
        if unexpected:
            problems.append(f"chat {chat}: unexpected messages {unexpected}")
        expected = self._expected_chunks(conv, received, problems)
        tally["in flight"] += self._check_new_answers(conv, chat, received, problems)
        for key in expected - set(occurrences):
            problems.append(
                f"chat {chat}: missing c{conv}t{key[0]} "
                f"{'header' if key[1] < 0 else f'line {key[1]}'}"
            )
        # a chunk seen twice is one pair, however many lines
        doubled: dict[int, tuple[Seen, Seen]] = {}
        for key, seen in occurrences.items():
            if key[0] >= 0 and key not in expected:
                problems.append(f"chat {chat}: chunk for an unknown step {key}")
            for first, again in itertools.pairwise(seen):
                doubled[again.index] = (first, again)
        tally["discord doubles"] += len(doubled) if chat.startswith("discord:") else 0
        for first, again in doubled.values():
            tally["in flight"] += self._check_double(chat, first, again, received, report)
        # per-chat order: first occurrences must follow the conversation's order
        firsts = sorted((seen[0].index, key) for key, seen in occurrences.items() if key[0] >= 0)
        order = [key for _, key in firsts]
        if order != sorted(order):
            problems.append(f"chat {chat}: answers out of order: {order[:12]}...")

    def _expected_chunks(
        self, conv: int, received: list[Seen], problems: list[str]
    ) -> set[tuple[int, int]]:
        """The (step, line) keys of every answer the conversation's messages ask for; a header
        that counts other than the step's user messages is a problem."""
        expected: set[tuple[int, int]] = set()
        for step in (s for s in self.steps if s.kind == "msg" and s.conversation == conv):
            expected.add((step.index, -1))
            expected.update((step.index, j) for j in range(step.lines))
            headers = [x for x in received if f"reply to {step.tag} [users=" in x.text]
            for h in headers:
                got = HEADER.search(h.text)
                if got and int(got.group(2)) != step.users:
                    problems.append(
                        f"{step.tag}: the model saw {got.group(2)} user messages, expected "
                        f"{step.users} (history lost or doubled)"
                    )
        return expected

    def _check_new_answers(
        self, conv: int, chat: str, received: list[Seen], problems: list[str]
    ) -> int:
        """Each /new answered once; the extra answers a kill explains, counted."""
        sent = sum(1 for s in self.steps if s.kind == "new" and s.conversation == conv)
        answers = [x for x in received if x.text == NEW_TEXT]
        if len(answers) < sent:
            problems.append(f"chat {chat}: {sent} /new sent, {len(answers)} answered")
            return 0
        explained = sum(1 for x in answers if self._in_flight_at_kill(x, received))
        if len(answers) - sent > explained:
            problems.append(f"chat {chat}: {sent} /new sent, {len(answers)} answers")
            return 0
        return len(answers) - sent

    def _check_double(
        self, chat: str, first: Seen, again: Seen, received: list[Seen], report: ChaosReport
    ) -> int:
        """A chunk seen twice: 1 if a kill explains it (noted), else a problem and 0."""
        if not self._in_flight_at_kill(first, received):
            why = " despite its nonce" if chat.startswith("discord:") else ""
            report.problems.append(
                f"chat {chat}: duplicated{why} {first.text[:60]!r} "
                f"(daemon lives {first.epoch} and {again.epoch})"
            )
            return 0
        gap = (self.epochs[first.epoch].killed or 0.0) - first.at
        # its request was already on the wire
        when = (
            f"{gap * 1000:.0f} ms before"
            if gap >= 0
            else f"{-gap * 1000:.0f} ms after the signal of"
        )
        report.notes.append(
            f"chat {chat}: {first.text[:30]!r}... stored {when} kill "
            f"{first.epoch + 1}, sent again after it"
        )
        return 1

    def _verify_discord_stored(self, report: ChaosReport) -> None:
        """Strict: every Discord message sent once in a chat the bot knew was stored (live or by a
        catch-up), once."""
        with _db(self.home) as db:
            stored = {
                (r[0], r[1])
                for r in db.execute(
                    "SELECT chat_id, platform_message_id FROM inbound WHERE platform = 'discord'"
                )
            }
        lost = [key for key in self.discord_users.sent_once if key not in stored]
        report.problems += [
            f"discord:{c}: message {m} was never stored (no catch-up found it)" for c, m in lost
        ]
        # missed, or queued behind a missed one
        report.counts["Discord messages submitted by a catch-up first"] = sum(self._caught_up())

    def _caught_up(self) -> list[int]:
        """Per daemon life, the Discord messages its catch-ups submitted (from its log)."""
        caught = []
        for proc in self.procs:
            n = 0
            for rec in proc.log_records():
                found = CAUGHT_UP.search(str(rec.get("message") or rec.get("msg") or ""))
                n += int(found.group(1)) if found else 0
            caught.append(n)
        return caught

    def _verify_sent_while_dead(self, report: ChaosReport) -> None:
        """Each message sent between a kill and its restart was answered once, after a catch-up read
        it from the channel's history; and the catch-ups of the lives from then on submitted at
        least as many."""
        problems = report.problems
        fine = 0
        for tag, channel, message_id, calls_before in self.dead_sends:
            answers = self.watcher.headers[tag]
            read = any(
                c.name == "GET /channels/{cid}/messages"
                and c.path.endswith(f"/channels/{channel}/messages")
                and int(c.query.get("after") or message_id) < int(message_id)
                for c in self.discord.calls[calls_before:]
            )
            if answers != 1:
                problems.append(
                    f"discord:{channel}: {tag}, sent while no daemon ran, answered {answers} times"
                )
            if not read:
                problems.append(
                    f"discord:{channel}: {tag}, sent while no daemon ran, never read by a catch-up"
                )
            fine += answers == 1 and read
        caught = self._caught_up()
        for life in range(len(caught)):
            sent = sum(1 for later, _, _ in self.discord_users.sent_dead if later >= life)
            if sum(caught[life:]) < sent:
                problems.append(
                    f"daemon lives from {life + 1} on: {sent} Discord messages sent while no "
                    f"daemon ran, their catch-ups submitted {sum(caught[life:])}"
                )
        report.counts["Discord messages sent between kill+restart"] = len(self.dead_sends)
        report.counts["  of them answered once, read by a catch-up"] = fine

    def _in_flight_at_kill(self, first: Seen, received: list[Seen]) -> bool:
        """The at-least-once window: a chunk the platform stored just before SIGKILL, before SQLite
        marked it sent, goes out again after the restart. Only the last chunk a chat got in that
        daemon life, stored moments before the kill, can be one; anything else sent twice is a bug.
        Discord has no such window: the resend carries the chunk's nonce and Discord hands back the
        message it already posted."""
        if first.chat.startswith("discord:"):
            return False
        killed = self.epochs[first.epoch].killed if first.epoch < len(self.epochs) else None
        if killed is None or first.at < killed - IN_FLIGHT_GRACE_S:
            return False
        same_life = [s for s in received if s.epoch == first.epoch]
        return bool(same_life) and same_life[-1] is first

    def _verify_llm_and_prompts(self, report: ChaosReport) -> None:
        problems = report.problems
        with _db(self.home) as db:
            sessions = {r["id"]: dict(r) for r in db.execute("SELECT * FROM sessions")}
            inbound = [dict(r) for r in db.execute("SELECT * FROM inbound")]
            outbound = [dict(r) for r in db.execute("SELECT * FROM outbound")]
        tag_session = _check_rows(inbound, outbound, problems)
        runs = self._count_requests(sessions, tag_session, problems)
        for (tag, epoch), n in runs.turns.items():
            if n > 1:
                problems.append(f"turn {tag} ran {n} times in daemon life {epoch}")
        for (tag, epoch), n in runs.flushes.items():
            if n > 1:
                problems.append(f"the flush of session {tag} ran {n} times in daemon life {epoch}")
        per_turn = Counter({t: 0 for t, _ in runs.turns})
        for (t, _), n in runs.turns.items():
            per_turn[t] += n
        flush_tags = {t for t, _ in runs.flushes}
        flush_reruns = sum(
            1 for tag in flush_tags if sum(n for (t, _), n in runs.flushes.items() if t == tag) > 1
        )
        ended = _check_sessions(sessions, problems)
        self._check_memory(flush_tags, problems)
        report.counts.update(
            {
                "sessions": len(sessions),
                "LLM requests": runs.requests,
                "turns re-run after a kill": sum(1 for n in per_turn.values() if n > 1),
                "prompt mismatches": runs.prompt_mismatches,
                "flushes (sessions ended by /new)": len(ended),
                "flushes done": sum(1 for s in ended if s["flush_state"] == "done"),
                "flushes re-run after a kill": flush_reruns,
                "max flush attempts": max((s["flush_attempts"] for s in ended), default=0),
            }
        )

    def _count_requests(
        self, sessions: dict[int, dict[str, Any]], tag_session: dict[str, int], problems: list[str]
    ) -> _Runs:
        """The model requests by (turn or session tag, daemon life); each one's system prompt must
        be its session's stored bytes."""
        runs = _Runs()
        for index, call in enumerate(self.llm.calls):
            if call.path != ANTHROPIC_PATH or not isinstance(call.body, dict):
                continue
            runs.requests += 1
            body, epoch = call.body, self.epoch_of_call(index)
            if is_flush(body):
                tag = flush_session_tag(body)
                last = (body.get("messages") or [{}])[-1]
                if not any(b.get("type") == "tool_result" for b in blocks(last)):
                    runs.flushes[(tag or "?", epoch)] += 1
            else:
                tag = turn_tag(body)
                runs.turns[(tag or "?", epoch)] += 1
            sid = tag_session.get(tag or "")
            if sid is None:
                problems.append(f"request for {tag}: no answered inbound row names its session")
                continue
            if system_text(body) != sessions[sid]["system_prompt"]:
                runs.prompt_mismatches += 1
                problems.append(
                    f"request for {tag}: system prompt differs from session {sid}'s stored bytes"
                )
        return runs

    def _check_memory(self, flush_tags: set[str], problems: list[str]) -> None:
        """Each flushed session's fact is in MEMORY.md once."""
        memory = self.home / "memories" / "MEMORY.md"
        facts = memory.read_text(encoding="utf-8") if memory.exists() else ""
        for tag in flush_tags:
            n = facts.count(f"session {tag} was about")
            if n != 1:
                problems.append(f"memory holds the fact of session {tag} {n} times")


@dataclass
class _Runs:
    """Model requests counted by (tag, daemon life)."""

    turns: Counter[tuple[str, int]] = field(default_factory=Counter)
    flushes: Counter[tuple[str, int]] = field(default_factory=Counter)
    requests: int = 0
    prompt_mismatches: int = 0


def _check_rows(
    inbound: list[dict[str, Any]], outbound: list[dict[str, Any]], problems: list[str]
) -> dict[str, int]:
    """Every inbound row answered and every outbound chunk sent; the session of each tag."""
    tag_session: dict[str, int] = {}
    for row in inbound:
        found = TAG.search(row["text"])
        if found and row["session_id"] is not None:
            tag_session[found.group(0)] = row["session_id"]
        if row["status"] != "answered":
            problems.append(f"inbound {row['text'][:30]!r} left {row['status']}")
    for row in outbound:
        if row["status"] != "sent":
            problems.append(
                f"outbound {row['turn_id']} chunk {row['chunk_index']} left {row['status']}"
                f" ({row['last_error']})"
            )
    return tag_session


def _check_sessions(
    sessions: dict[int, dict[str, Any]], problems: list[str]
) -> list[dict[str, Any]]:
    """The sessions /new ended (each flushed), none with its prompt rebuilt."""
    ended = [s for s in sessions.values() if s["end_reason"] == "command"]
    for s in ended:
        if s["flush_state"] not in ("done", "nothing"):
            problems.append(
                f"session {s['id']} ended by /new: flush {s['flush_state']} ({s['flush_error']})"
            )
    rebuilt = [s["id"] for s in sessions.values() if s["prompt_rebuilds"]]
    if rebuilt:
        problems.append(f"sessions whose prompt was rebuilt: {rebuilt}")
    return ended


def _occurrences(
    received: list[Seen],
) -> tuple[dict[tuple[int, int], list[Seen]], list[str]]:
    """Every chunk of every answer a chat received, by (step index, line) (a header is line -1),
    and the start of each message that is neither a chunk nor /new's answer."""
    occurrences: dict[tuple[int, int], list[Seen]] = defaultdict(list)
    unexpected: list[str] = []
    for s in received:
        keys = [(step_of(tag), -1) for tag, _ in HEADER.findall(s.text)]
        keys += [(step_of(tag), int(line)) for tag, line in LINE.findall(s.text)]
        if s.text == NEW_TEXT:
            continue
        if not keys:
            unexpected.append(s.text[:120])
        for key in keys:
            occurrences[key].append(s)
    return occurrences, unexpected


def plan_steps_by_conv(steps: list[Step]) -> list[tuple[int, list[Step]]]:
    grouped: dict[int, list[Step]] = defaultdict(list)
    for s in steps:
        grouped[s.conversation].append(s)
    return sorted(grouped.items())


class _db:
    """A read-only look at the daemon's database (WAL lets it read beside the running daemon)."""

    def __init__(self, home: Path) -> None:
        self.conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
        self.conn.row_factory = sqlite3.Row

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def dump(report: ChaosReport) -> str:
    return json.dumps({"counts": report.counts, "problems": report.problems}, indent=2)
