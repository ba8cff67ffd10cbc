"""The bad-input corpus (tests/corpus/cases.yaml): each case goes through the real code path for its
kind and must end in its expected outcome (a clear error or a correct reply), never a crash or a
lost message."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from adapters.slack.adapter import SlackAdapter
from adapters.telegram.adapter import TelegramAdapter
from gateway.agent.tools.registry import ToolContext
from gateway.cli import main as cli
from gateway.config.settings import load_config
from gateway.events import Inbound, SubmitOutcome, SubmitResult
from gateway.knowledge.memory import MemoryRights
from gateway.ops.daemon import Daemon
from gateway.ops.http_limits import serve as serve_http
from gateway.ops.wiring import Gateway, build_gateway, platform_adapters
from tests.chaos.crashpoints import VirtualTime
from tests.daemon_proc import WebChatClient
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.slack import (
    APP_TOKEN,
    BOT_TOKEN,
    FakeSlack,
    event_callback,
    signed_request_headers,
)
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.helpers import write_config

CORPUS = Path(__file__).parent / "corpus"
CASES: list[dict[str, Any]] = yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))
ALICE, GROUP = 1001, -100500
SIGNING_SECRET = "corpus-signing-secret"
WAIT_S = 120.0  # a 100,000-character message is seconds of CPU: tens of them on a busy machine
WEBHOOK_SECRET = "corpus-webhook-secret"


def nested_markdown() -> str:
    quote = "".join("> " for _ in range(40))
    items = "\n".join(
        "  " * i + f"- level {i} **bold _italic ~~strike `code`~~_**" for i in range(60)
    )
    return f"{quote}deep quote\n\n{items}\n\n" + "*" * 200 + "[" * 100 + "]" * 100


GENERATORS: dict[str, Callable[[], Any]] = {
    "text_100k": lambda: ("lorem ipsum dolor sit amet " * 4000)[:100_000],
    "emoji_5000": lambda: "\U0001f600" * 5000,
    "word_10k": lambda: "a" * 10_000,
    "nested_markdown": nested_markdown,
    # 10 MB of comments: valid YAML, so only the size rule can refuse it
    "config_10mb": lambda: ("# " + "x" * 98 + "\n") * 100_000,
    "config_deep": lambda: "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "web_frame_too_long": lambda: json.dumps({"text": "x" * 100_001}),
    "huge_document": lambda: {
        "text": "what is in this file?",
        "extra": {
            "document": {
                "file_id": "F" * 300,
                "file_unique_id": "U1",
                "file_name": "report-" + "x" * 5000 + ".pdf",
                "mime_type": "application/" + "y" * 1000,
                "file_size": 10**15,
            }
        },
    },
}


def case_ids() -> list[str]:
    return [c["id"] for c in CASES]


def test_the_corpus_has_at_least_forty_cases_with_unique_ids() -> None:
    ids = case_ids()
    assert len(ids) >= 40 and len(set(ids)) == len(ids)
    assert all("expect" in c and c["kind"] in RUNNERS for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=case_ids())
async def test_case(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await RUNNERS[case["kind"]](case, tmp_path, capsys)


def generated(case: Mapping[str, Any]) -> Any:
    return GENERATORS[case["generate"]]() if "generate" in case else None


# ------------------------------------------------------------------------------------------ configs
async def run_config(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    data = generated(case)
    raw = data.encode() if data is not None else (CORPUS / case["file"]).read_bytes()
    (home / "config.yaml").write_bytes(raw)
    code = cli.main(["--home", str(home), "config", "check"])  # a hang ends at the test's timeout
    out = capsys.readouterr()
    said = out.out + out.err
    expect = case["expect"]
    assert code == expect["exit"], said
    for part in expect["says"]:
        assert part in said, f"{part!r} not in {said!r}"
    assert "Traceback" not in said, said


# -------------------------------------------------------------------------------- Telegram messages
@dataclass
class TelegramRun:
    tg: FakeTelegram
    llm: FakeLLM
    gw: Gateway

    def model_texts(self) -> list[str]:
        """The last user text of every chat request the model got."""
        out = []
        for body in self.llm.anthropic_requests():
            last = body["messages"][-1]
            blocks = (
                last["content"]
                if isinstance(last["content"], list)
                else [{"type": "text", "text": last["content"]}]
            )
            out.append("".join(b.get("text", "") for b in blocks if b.get("type") == "text"))
        return out

    def settled(self) -> bool:
        busy = self.gw.store.all("SELECT id FROM inbound WHERE status IN ('pending', 'running')")
        unsent = self.gw.store.all("SELECT id FROM outbound WHERE status = 'pending'")
        return not busy and not unsent

    async def answered(self, text: str, timeout: float = WAIT_S) -> None:
        """Wait until the message whose model text is `text` was answered and everything is sent."""
        await self.tg.wait_until(
            lambda: self.settled() and any(t.endswith(text) for t in self.model_texts()),
            timeout,
            lambda: f"{text!r} not answered",
        )


@contextlib.asynccontextmanager
async def telegram_gateway(home: Path, extra: str = "") -> AsyncIterator[TelegramRun]:
    time_ = VirtualTime()
    home.mkdir(parents=True, exist_ok=True)
    async with FakeTelegram(clock=time_.monotonic) as tg, FakeLLM() as llm:
        write_config(
            home,
            provider="anthropic",
            base_url=llm.base_url,
            extra=(
                "web:\n  enabled: false\ntelegram:\n  token: "
                f"'{TOKEN}'\n  api_server: {tg.base_url}\n"
                f"  polling_timeout: 1\n  allowed_users: ['{ALICE}']\n{extra}"
            ),
        )
        config = load_config(home, env={})
        assert config.telegram is not None
        adapter = TelegramAdapter(config.telegram, submit_retry_delays=())
        gw = build_gateway(
            config,
            env={},
            adapters=[adapter],
            probe_ollama=False,
            sleep=time_.sleep,
            monotonic=time_.monotonic,
        )
        daemon = Daemon(gw, install_signals=False)
        await daemon.start()
        try:
            yield TelegramRun(tg, llm, gw)
        finally:
            await daemon.stop()


def answer_texts(run: TelegramRun, before: int) -> list[str]:
    return [m.text for m in run.tg.sent_messages()[before:]]


async def run_message(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expect = case["expect"]
    async with telegram_gateway(tmp_path / "home") as run:
        tg = run.tg
        group = case.get("chat") == "group"
        chat = GROUP if group else ALICE
        data = generated(case)
        if case.get("model_says") is not None:
            run.llm.script(Reply(case["model_says"]))
        if "update" in case:
            # the fake's next id, so its own updates stay after this one
            update_id = tg._update_ids()
            raw = (
                (CORPUS / case["update"])
                .read_bytes()
                .replace(b'"update_id": 0', b'"update_id": %d' % update_id)
            )
            tg.fail("getUpdates", Fault(200, raw, {"Content-Type": "application/json"}))
        elif isinstance(data, dict):
            tg.inject_message(chat, data["text"], extra=data["extra"])
        else:
            text = data if data is not None else case["text"]
            tg.inject_message(
                chat,
                text,
                chat_type="group" if group else "private",
                chat_title="Corpus" if group else None,
            )
        if expect["outcome"] == "ignored":
            await run_ignored(run, case)
            return
        await tg.wait_until(
            lambda: run.settled() and len(tg.sent_messages()) > 0,
            WAIT_S,
            lambda: f"no answer; sent {tg.sent_texts()}",
        )
        sent = answer_texts(run, 0)
        statuses = [r[0] for r in run.gw.store.all("SELECT status FROM inbound")]
        assert statuses == ["answered"], statuses
        if expect["outcome"] == "reply":
            assert len(run.model_texts()) >= 1
            last = run.model_texts()[0]
            if "model_sees" in expect:
                assert last == expect["model_sees"]
            if "model_sees_contains" in expect:
                assert expect["model_sees_contains"] in last
        else:  # a command's notice: the model never saw it
            assert run.model_texts() == []
        assert len(sent) >= expect.get("min_chunks", 1), sent
        for part in expect.get("user_sees_contains", ()):
            assert part in "".join(sent), f"{part!r} not in {sent!r}"
        outbound = {r[0] for r in run.gw.store.all("SELECT status FROM outbound")}
        assert outbound == {"sent"}, outbound
        if case.get("then"):
            # the session is still usable, and its history did not break the next request
            before = len(tg.sent_messages())
            tg.inject_message(chat, case["then"])
            await run.answered(case["then"])
            assert answer_texts(run, before) == [f"echo: {case['then']} [users=2]"]


async def run_ignored(run: TelegramRun, case: dict[str, Any]) -> None:
    """Nothing happens for the case; a sentinel sent after it is answered normally (the intake did
    not stall)."""
    run.tg.inject_message(ALICE, "sentinel")
    await run.answered("sentinel")
    assert run.model_texts() == ["sentinel"]
    assert run.tg.sent_texts() == ["echo: sentinel [users=1]"]


# ------------------------------------------------------------------------------------- the web chat
async def run_web_message(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with FakeLLM() as llm:
        write_config(home, provider="anthropic", base_url=llm.base_url, extra="web:\n  port: 0\n")
        config = load_config(home, env={})
        daemon = Daemon(
            build_gateway(config, env={}, probe_ollama=False, adapters=platform_adapters(config)),
            install_signals=False,
        )
        await daemon.start()
        try:
            async with WebChatClient(daemon.web_port or 0, home=home) as tab:
                assert tab.ws is not None
                await tab.ws.send_str(generated(case) or case["frame"])
                expect = case["expect"]
                if expect["outcome"] == "error":
                    frame = await tab.next("error")
                    assert frame["text"].startswith(expect["says"]), frame
                    assert daemon.gw.store.all("SELECT id FROM inbound") == []
                else:
                    await tab.next("ack")
                    reply = await tab.next("message")
                    assert reply["kind"] == "reply"
                    last = llm.anthropic_requests()[-1]["messages"][-1]["content"]
                    assert (
                        "".join(b["text"] for b in last if b["type"] == "text")
                        == expect["model_sees"]
                    )
                await tab.say("still there?")  # the tab and the session keep working
                assert (await tab.next("message"))["text"].startswith("echo: still there?")
        finally:
            await daemon.stop()


# ------------------------------------------------------------------------------- context and memory
async def run_context(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, work = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    work.mkdir()
    (work / "AGENTS.md").write_bytes((CORPUS / case["file"]).read_bytes())
    write_config(home, extra=f"web:\n  enabled: false\nagent:\n  workdir: {work}\n")
    gw = build_gateway(load_config(home, env={}), env={}, probe_ollama=False)
    try:
        built = gw.prompts.build_full(
            platform="cli",
            chat_type="dm",
            model="m",
            provider="anthropic",
            tool_names=gw.tools.names(),
            today=gw.clock().date(),
        )
    finally:
        gw.store.close()
    block = next(b for b in built.blocks if b.name == "context_file")
    expect = case["expect"]
    assert ("(blocked)" in block.source) == (expect["prompt"] == "blocked"), block
    for part in expect["says"]:
        assert part in block.text, block.text
    if expect["prompt"] == "blocked":
        original = (CORPUS / case["file"]).read_text(encoding="utf-8", errors="replace")
        # the payload never reaches the model
        assert original.strip().splitlines()[-1] not in built.text


async def run_memory(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    write_config(home, extra="web:\n  enabled: false\n")
    gw = build_gateway(load_config(home, env={}), env={}, probe_ollama=False)
    try:
        ctx = ToolContext(
            session_id=1,
            platform="cli",
            chat_type="dm",
            user_id="u",
            home=home,
            db_path=home / "state.db",
            memory=MemoryRights(person_id=1, shared=True),
        )
        result = await gw.tools.call(
            "memory",
            json.dumps({"action": "add", "target": "memory", "content": case["entry"]}),
            ctx,
        )
        stored = gw.memory.shared().read()
    finally:
        gw.store.close()
    expect = case["expect"]
    assert result.is_error is not expect["saved"], result.text
    for part in expect["says"]:
        assert part in result.text, result.text
    assert (case["entry"].strip() in stored) is expect["saved"]


async def run_memory_file(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    (home / "memories").mkdir(parents=True)
    (home / "memories" / "MEMORY.md").write_bytes(case["latin1"].encode("latin-1"))
    async with telegram_gateway(home) as run:
        run.tg.inject_message(ALICE, "hello")
        await run.answered("hello")
        assert run.tg.sent_texts() == ["echo: hello [users=1]"]


# ---------------------------------------------------------------------------------- forged requests
class Recorder:
    def __init__(self) -> None:
        self.submitted: list[Inbound] = []

    async def __call__(self, inbound: Inbound) -> SubmitResult:
        self.submitted.append(inbound)
        return SubmitResult(SubmitOutcome.ACCEPTED)


async def run_slack_http(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with FakeSlack() as slack:
        write_config(
            home,
            extra=(
                f"slack:\n  bot_token: '{BOT_TOKEN}'\n  app_token: "
                f"'{APP_TOKEN}'\n  signing_secret: '{SIGNING_SECRET}'\n"
                "  mode: http\n  listen_port: 0\n  api_url: "
                f"{slack.api_base_url}\n  allowed_users: ['U1']\n"
            ),
        )
        config = load_config(home, env={})
        assert config.slack is not None
        adapter = SlackAdapter(config.slack, serve=serve_http)
        recorder = Recorder()
        await adapter.start(recorder)
        try:
            event = {
                "type": "message",
                "channel_type": "im",
                "channel": "D1",
                "user": "U1",
                "text": "hi",
                "ts": "1700000000.000100",
            }
            body = json.dumps(event_callback(event, event_id="EvCorpus"))
            signing = {
                "wrong_secret": ("not-the-secret", body, None),
                "stale": (SIGNING_SECRET, body, int(time.time()) - 600),
                "tampered": (SIGNING_SECRET, body.replace('"hi"', '"ho"'), None),
                "valid": (SIGNING_SECRET, body, None),
            }
            headers = (
                {}
                if case["signature"] == "missing"
                else signed_request_headers(*signing[case["signature"]])
            )
            async with aiohttp.ClientSession() as http:
                async with http.post(
                    f"http://127.0.0.1:{adapter.http_port}{config.slack.path}",
                    data=body,
                    headers={**headers, "Content-Type": "application/json"},
                ) as resp:
                    status = resp.status
            if case["expect"]["submitted"]:
                await slack.wait_until(lambda: bool(recorder.submitted), 10)
        finally:
            await adapter.stop()
    assert status == case["expect"]["status"]
    assert len(recorder.submitted) == case["expect"]["submitted"]


async def run_telegram_webhook(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    async with FakeTelegram() as tg:
        write_config(
            home,
            extra=(
                f"telegram:\n  token: '{TOKEN}'\n  api_server: {tg.base_url}\n  mode: webhook\n"
                "  webhook_url: https://bot.example.net/telegram/webhook\n "
                f" secret_token: '{WEBHOOK_SECRET}'\n"
                f"  listen_port: 0\n  allowed_users: ['{ALICE}']\n"
            ),
        )
        config = load_config(home, env={})
        assert config.telegram is not None
        adapter = TelegramAdapter(config.telegram, submit_retry_delays=(), serve=serve_http)
        recorder = Recorder()
        await adapter.start(recorder)
        try:
            update = {
                "update_id": 5,
                "message": {
                    "message_id": 9,
                    "date": 1700000000,
                    "text": "hi",
                    "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
                    "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
                },
            }
            body = case.get("body") or json.dumps(update)
            secret = {"missing": None, "wrong": "guess", "right": WEBHOOK_SECRET}[case["secret"]]
            headers = {"Content-Type": "application/json"}
            if secret is not None:
                headers["X-Telegram-Bot-Api-Secret-Token"] = secret
            async with aiohttp.ClientSession() as http:
                async with http.post(
                    f"http://127.0.0.1:{adapter.webhook_port}{config.telegram.path}",
                    data=body,
                    headers=headers,
                ) as resp:
                    status = resp.status
        finally:
            await adapter.stop()
    assert status == case["expect"]["status"]
    assert len(recorder.submitted) == case["expect"]["submitted"]


Runner = Callable[[dict[str, Any], Path, pytest.CaptureFixture[str]], Any]
RUNNERS: dict[str, Runner] = {
    "config": run_config,
    "message": run_message,
    "context": run_context,
    "memory": run_memory,
    "memory_file": run_memory_file,
    "slack_http": run_slack_http,
    "telegram_webhook": run_telegram_webhook,
    "web_message": run_web_message,
}
