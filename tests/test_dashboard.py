"""The dashboard's data, read through its routes on a running daemon (behind the web guard):
adapters' health, sessions with tokens and cache, the messages / cache series, the flush log with
its reasons (redacted), pairing requests approved and denied by the owner, scheduled jobs, and the
live updates over server-sent events."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config.settings import load_config
from gateway.events import ChatRef
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from gateway.scheduling.jobstore import JobStore, NewJob
from gateway.store.database import Store
from gateway.store.rows import iso
from gateway.webui.series import series
from tests.daemon_proc import WebChatClient
from tests.fakeclock import START, FakeClock
from tests.fakes.base import Fault
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, inbound, write_config
from tests.store_locks import LockHolder

SECRET_IN_ERROR = "sk-ant-api03-leakedleakedleakedleaked"


@dataclass
class Running:
    daemon: Daemon
    home: Path
    telegram: RecordingAdapter
    clock: FakeClock

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.daemon.web_port}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {load_web_secret(self.home)}"}

    async def state(self, window: str = "24h") -> dict[str, Any]:
        async with aiohttp.ClientSession() as http:
            async with http.get(
                f"{self.base}/dashboard/api/state?window={window}", headers=self.auth
            ) as resp:
                assert resp.status == 200, await resp.text()
                data: dict[str, Any] = await resp.json()
                return data

    async def post(self, action: str, body: Any, *, raw: bool = False) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as http:
            kwargs: dict[str, Any] = {"data": body} if raw else {"json": body}
            async with http.post(
                f"{self.base}/dashboard/api/pairing/{action}", headers=self.auth, **kwargs
            ) as resp:
                return resp.status, (
                    await resp.json()
                    if resp.content_type == "application/json"
                    else await resp.text()
                )


@pytest.fixture
async def running(home: Path, fake_llm: FakeLLM) -> AsyncIterator[Running]:
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra="web:\n  port: 0\nmemory:\n  flush_min_messages: 2\n",
    )
    config = load_config(home, env={})
    # the web adapter stamps messages with the wall clock, as in production
    clock = FakeClock(datetime.now(UTC))
    telegram = RecordingAdapter("telegram")
    gateway = build_gateway(
        config,
        env={},
        adapters=[*platform_adapters(config), telegram],
        probe_ollama=False,
        clock=clock.now,
    )
    daemon = Daemon(gateway, install_signals=False)
    await daemon.start()
    assert gateway.lifecycle is not None

    async def no_wait(seconds: float) -> None:  # the flush's retry backoff
        return None

    gateway.lifecycle.flusher.sleep = no_wait
    try:
        yield Running(daemon, home, telegram, clock)
    finally:
        await daemon.stop()


async def chat(run: Running, *texts: str, client: str = "tab1") -> None:
    async with WebChatClient(run.daemon.web_port or 0, client, home=run.home) as tab:
        for text in texts:
            ack = await tab.say(text)
            assert ack["outcome"] == "accepted"
            await tab.next("message")


async def test_the_day_so_far(running: Running, fake_llm: FakeLLM) -> None:
    fake_llm.cache = True  # the 2nd turn reads the 1st one's prefix from the emulated prompt cache
    await chat(running, "hello", "and again")
    gw = running.daemon.gw
    assert gw.lifecycle is not None
    fake_llm.script(
        ToolCall("memory", {"action": "add", "target": "user", "content": "Says hello twice."}),
        Reply("(saved)"),
    )
    await chat(running, "/new")
    await gw.lifecycle.flusher.wait_idle()
    fake_llm.script(
        Reply("three"),
        *[Fault(500, {"error": {"message": f"upstream said {SECRET_IN_ERROR}"}})] * 3,
    )
    await chat(running, "third", "/new")
    await gw.lifecycle.flusher.wait_idle()
    await chat(running, "still here?", client="tab2")

    state = await running.state()
    assert state["model"] == {
        "name": "anthropic/claude-test",
        "source": "configured",
        "problem": None,
    }
    assert state["ready"] is True
    web = next(a for a in state["adapters"] if a["platform"] == "web")
    assert (web["state"], web["reconnects"], web["last_error"]) == ("running", 0, None)

    sessions = state["sessions"]
    # tab1 ended its session with /new
    assert sessions["per_platform"] == {"web": 1} and sessions["active"] == 1
    tab2 = next(s for s in sessions["recent"] if s["user_id"] == "tab2")
    assert (tab2["platform"], tab2["chat_type"], tab2["messages"]) == ("web", "dm", 2)
    used = fake_llm.usages[-1]
    assert tab2["input_tokens"] == used.input_tokens and tab2["output_tokens"] == used.output_tokens

    flushes = state["flushes"]
    assert flushes["counts"] == {"done": 1, "failed": 1}
    failed, done = flushes["log"][0], flushes["log"][1]
    assert (done["state"], done["end_reason"], done["error"]) == ("done", "command", None)
    assert failed["state"] == "failed" and failed["attempts"] == 3
    assert (
        failed["error"].startswith("LLMUnavailable: claude-test")
        and SECRET_IN_ERROR not in failed["error"]
    )
    # only the view is redacted
    assert SECRET_IN_ERROR in (gw.store.session(failed["session"]).flush_error or "")

    buckets = state["series"]["buckets"]
    assert (
        state["series"]["window"] == "24h"
        and len(buckets) == 24
        and state["series"]["step_s"] == 3600
    )
    used_buckets = [b for b in buckets if b["messages"] or b["calls"]]
    # the last hour (or two, at :00)
    assert used_buckets and buckets.index(used_buckets[0]) >= len(buckets) - 2
    # every stored message, commands included
    assert sum(b["messages"].get("web", 0) for b in buckets) == 6
    calls = fake_llm.usages  # 4 turns, 1 flush that saved, 3 failed flush attempts (no usage)
    prompt = sum(u.input_tokens + u.cache_read + u.cache_creation for u in calls)
    assert (
        sum(b["calls"] for b in buckets) == len(calls)
        and sum(b["prompt_tokens"] for b in buckets) == prompt
    )
    read = sum(b["cache_read"] for b in buckets)
    assert read == sum(u.cache_read for u in calls) > 0
    for b in used_buckets:
        assert b["hit_ratio"] == pytest.approx(b["cache_read"] / b["prompt_tokens"], abs=1e-4)
    assert state["jobs"] is None  # nobody has scheduled anything: the page leaves the panel out


async def test_the_owner_approves_and_denies_pairing_requests(running: Running) -> None:
    submit = running.telegram.submit
    await submit(
        inbound("hi, it's Ada", platform="telegram", chat_id="501", user_id="501", user_name="Ada")
    )
    await submit(
        inbound("let me in", platform="telegram", chat_id="502", user_id="502", user_name="Mallory")
    )
    await running.telegram.wait_for(2)
    codes = {
        m.chat.chat_id: re.search(r"this bot: `?([A-Z0-9]{8})", m.plain).group(1)  # type: ignore[union-attr]
        for m in running.telegram.sent
    }
    pending = (await running.state())["pairing"]["pending"]
    assert [(p["platform"], p["user_id"], p["user_name"]) for p in pending] == [
        ("telegram", "501", "Ada"),
        ("telegram", "502", "Mallory"),
    ]
    # the page never sees a code
    assert not any(code in json.dumps(pending) for code in codes.values())

    status, answer = await running.post("approve", {"code": "WRONGCOD"})
    assert (status, answer["ok"]) == (200, False) and answer["text"].startswith(
        "No pending pairing request"
    )
    status, answer = await running.post("approve", {"code": codes["501"].lower()})
    assert (status, answer) == (
        200,
        {"ok": True, "text": "Approved telegram user 501 (Ada); they can talk to the agent now."},
    )
    # the daemon's next round of access changes (every 2 s) welcomes them
    running.daemon.access_watch.handle()
    await running.daemon.gw.outbox.wait_background()
    running.daemon.access_watch.handle()
    await running.daemon.gw.outbox.wait_background()
    welcomes = [m for m in running.telegram.sent if m.text.startswith("You're approved")]
    # once: not by the page and the daemon
    assert [m.chat for m in welcomes] == [ChatRef("telegram", "dm", "501")]

    status, answer = await running.post("deny", {"platform": "telegram", "user_id": "502"})
    assert status == 200 and answer["ok"] and answer["text"].startswith("Denied telegram:502")
    status, answer = await running.post("deny", {"platform": "telegram", "user_id": "502"})
    assert status == 404 and not answer["ok"]
    status, answer = await running.post("approve", {"code": codes["502"]})
    assert not answer["ok"]  # a denied request's code is dead

    pairing = (await running.state())["pairing"]
    assert pairing["pending"] == []
    assert [(a["platform"], a["user_id"], a["approved_by"]) for a in pairing["approved"]] == [
        ("telegram", "501", "web")
    ]
    # a form post: not the page's own JSON
    status, _ = await running.post("approve", "code=ABC", raw=True)
    assert status == 415


async def test_a_page_on_another_origin_cannot_approve_deny_or_upload_with_the_owners_cookie(
    running: Running,
) -> None:
    """Cross-site request forgery, as a page the owner visits would try it: the stranger knows their
    own code, and a page on another port of this host is the same *site*, so the browser sends the
    SameSite=Strict cookie along. What stops it is the Origin check, for every owner route (not only
    the WebSocket) and every body type a page may send without asking first (a form, text/plain,
    multipart)."""
    await running.telegram.submit(
        inbound("let me in", platform="telegram", chat_id="502", user_id="502", user_name="Mallory")
    )
    await running.telegram.wait_for(1)
    code = re.search(r"this bot: `?([A-Z0-9]{8})", running.telegram.sent[0].plain).group(1)  # type: ignore[union-attr]
    port = running.daemon.web_port
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        async with browser.get(f"{running.base}/?token={load_web_secret(running.home)}") as resp:
            assert resp.status == 200  # logged in: the cookie is in this browser
        for origin in (
            f"http://127.0.0.1:{(port or 0) + 1}",
            f"http://localhost:{port}",
            "http://evil.example",
            "null",
        ):
            attempts: list[tuple[str, dict[str, Any]]] = [
                ("approve", {"json": {"code": code}}),
                (
                    "approve",
                    {"data": f'{{"code": "{code}"}}', "headers": {"Content-Type": "text/plain"}},
                ),
                ("approve", {"data": {"code": code}}),
                ("deny", {"json": {"platform": "telegram", "user_id": "502"}}),
            ]
            for action, kwargs in attempts:
                headers = {"Origin": origin, **kwargs.pop("headers", {})}
                async with browser.post(
                    f"{running.base}/dashboard/api/pairing/{action}", headers=headers, **kwargs
                ) as resp:
                    assert resp.status == 403, (origin, action)
            form = aiohttp.FormData()
            form.add_field("file", b"planted", filename="x.txt", content_type="text/plain")
            async with browser.post(
                f"{running.base}/upload", data=form, headers={"Origin": origin}
            ) as resp:
                assert resp.status == 403, origin
            async with browser.get(
                f"{running.base}/dashboard/api/events", headers={"Origin": origin}
            ) as resp:
                # an EventSource from that page reads nothing either
                assert resp.status == 403, origin
        uploads = running.home / "media" / "uploads"
        assert not uploads.exists() or list(uploads.iterdir()) == []
        # still waiting
        assert [p["user_id"] for p in (await running.state())["pairing"]["pending"]] == ["502"]
        assert len(running.telegram.sent) == 1  # no welcome went out
        async with browser.post(
            f"{running.base}/dashboard/api/pairing/deny",
            headers={"Origin": running.base},
            json={"platform": "telegram", "user_id": "502"},
        ) as resp:
            assert resp.status == 200  # the dashboard's own page, same cookie: allowed


async def test_a_denied_stranger_gets_no_new_code_for_an_hour(running: Running) -> None:
    """Deny would mean little if the stranger's next message brought a fresh code and put them back
    on the list."""
    telegram = running.telegram
    await telegram.submit(
        inbound("let me in", platform="telegram", chat_id="502", user_id="502", user_name="Mallory")
    )
    await telegram.wait_for(1)
    status, answer = await running.post("deny", {"platform": "telegram", "user_id": "502"})
    assert status == 200 and answer["text"].startswith(
        "Denied telegram:502: their code no longer works, and for an hour they get no new one"
    )
    await telegram.submit(
        inbound(
            "let me in!!", platform="telegram", chat_id="502", user_id="502", user_name="Mallory"
        )
    )
    assert len(telegram.sent) == 1  # no second code
    assert (await running.state())["pairing"]["pending"] == []
    await running.clock.advance(3601)
    await telegram.submit(
        inbound("please?", platform="telegram", chat_id="502", user_id="502", user_name="Mallory")
    )
    await telegram.wait_for(2)
    assert re.search(r"this bot: `?[A-Z0-9]{8}", telegram.sent[-1].plain)
    assert [p["user_id"] for p in (await running.state())["pairing"]["pending"]] == ["502"]


async def test_a_decision_the_database_cannot_take_now_says_so(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    await running.telegram.submit(
        inbound("hi", platform="telegram", chat_id="501", user_id="501", user_name="Ada")
    )
    await running.telegram.wait_for(1)
    code = re.search(r"this bot: `?([A-Z0-9]{8})", running.telegram.sent[0].plain)
    assert code is not None
    async with LockHolder(running.home / "state.db"):
        # another process holds the write lock (or the disk is full)
        for action, body in (
            ("approve", {"code": code.group(1)}),
            ("deny", {"platform": "telegram", "user_id": "501"}),
        ):
            status, answer = await running.post(action, body)
            assert status == 503 and answer["ok"] is False, answer
            assert answer["text"].startswith("The database takes no writes right now"), answer
    assert not [r for r in caplog.records if r.exc_info]  # no 500 with a traceback
    # and the code still works after
    status, answer = await running.post("approve", {"code": code.group(1)})
    assert (status, answer["ok"]) == (200, True)


async def test_scheduled_jobs_are_listed(running: Running) -> None:
    jobs = JobStore(running.daemon.gw.store)
    chat = ChatRef("telegram", "dm", "501")
    for name, kind, spec in (
        ("tea", "once", iso(START + timedelta(minutes=5))),
        ("standup", "cron", "0 9 * * 1-5"),
    ):
        made = jobs.add_job(
            NewJob(
                name=name,
                prompt=f"Say {name}.",
                kind=kind,
                spec=spec or "",
                timezone="UTC",
                chat=chat,
                user_id="501",
                user_name="Ada",
                username=None,
                space_id=None,
                roles=(),
                next_run_at=START + timedelta(minutes=5),
            ),
            now=START,
            limit=10,
        )
        assert made is not None
    listed = (await running.state())["jobs"]["jobs"]
    assert [(j["title"], j["state"], j["chat"], j["next_run_at"]) for j in listed] == [
        ('job #1 "tea"', "active", "telegram DM 501", iso(START + timedelta(minutes=5))),
        ('job #2 "standup"', "active", "telegram DM 501", iso(START + timedelta(minutes=5))),
    ]
    assert (
        listed[0]["when"].startswith("once at ") and listed[1]["when"] == "cron `0 9 * * 1-5` (UTC)"
    )


async def test_requests_waiting_for_a_person_are_listed(
    running: Running, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        ToolCall("ask", {"question": "Tea or coffee?", "options": ["Tea", "Coffee"]}), Reply("Tea.")
    )
    async with WebChatClient(running.daemon.web_port or 0, "tab1", home=running.home) as tab:
        await tab.say("make me a drink")
        question = await tab.next("message")
        listed = (await running.state())["approvals"]
        shown = [
            (a["kind"], a["platform"], a["requester"], a["tool"], a["request"]) for a in listed
        ]
        assert shown == [("ask", "web", "tab1", "ask", "Tea or coffee?")]
        assert len(listed[0]["code"]) == 6 and listed[0]["expires_at"] > listed[0]["asked_at"]
        assert tab.ws is not None
        await tab.ws.send_str(
            json.dumps({"type": "choice", "token": question["choices"]["token"], "value": "1"})
        )
        await tab.next("update")
    assert (await running.state())["approvals"] == []


async def test_live_updates_arrive_when_something_changed(running: Running) -> None:
    ticks: asyncio.Queue[None] = asyncio.Queue()

    async def next_tick(seconds: float) -> None:
        await ticks.get()

    assert running.daemon.dashboard is not None
    running.daemon.dashboard.sleep = next_tick
    async with aiohttp.ClientSession() as http:
        async with http.get(
            f"{running.base}/dashboard/api/events?window=1h", headers=running.auth
        ) as resp:
            assert resp.headers["Content-Type"] == "text/event-stream"
            first = await next_event(resp)
            assert first["sessions"]["active"] == 0 and first["series"]["window"] == "1h"
            await chat(running, "hello")
            ticks.put_nowait(None)
            second = await next_event(resp)
            assert second["sessions"]["active"] == 1
            assert sum(b["messages"].get("web", 0) for b in second["series"]["buckets"]) == 1


async def next_event(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    lines: list[str] = []
    async with asyncio.timeout(10):
        while True:
            line = (await resp.content.readline()).decode().rstrip("\n")
            if line == "" and lines:
                break
            if line:
                lines.append(line)
    assert lines[0] == "event: state"
    data: dict[str, Any] = json.loads(lines[1].removeprefix("data: "))
    return data


def test_series_buckets_by_time_and_keeps_empty_buckets(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    now = START + timedelta(seconds=90)  # 09:01:30: the current 2-minute bucket started at 09:00
    for minutes_ago, platform in (
        (1, "web"),
        (3, "telegram"),
        (3, "telegram"),
        (59, "web"),
        (61, "web"),
    ):
        store.insert_inbound(
            platform=platform,
            chat_type="dm",
            chat_id="c",
            thread_id=None,
            platform_message_id=f"m{minutes_ago}{platform}"
            f"{store.one('SELECT COUNT(*) FROM inbound')[0]}",  # type: ignore[index]
            user_id="u",
            user_name=None,
            text="x",
            payload="{}",
            received_at=now - timedelta(minutes=minutes_ago),
        )
    for minutes_ago, read, fresh in ((1, 900, 100), (30, 0, 1000)):
        store.execute(
            "INSERT INTO llm_calls (purpose, provider, model, "
            "input_tokens, output_tokens, cache_read_tokens,"
            " cache_write_tokens, created_at) VALUES ('turn', 'p', 'm', ?, 5, ?, 0, ?)",
            (fresh, read, iso(now - timedelta(minutes=minutes_ago))),
        )
    hour = series(store, now, "1h")
    assert len(hour) == 30 and hour[-1].start <= now < hour[-1].start + timedelta(minutes=2)
    assert hour[-1].messages == {"web": 1} and hour[-2].messages == {"telegram": 2}
    # 61 min ago: outside
    assert hour[0].messages == {"web": 1} and hour[0].start == START - timedelta(minutes=58)
    assert hour[-1].hit_ratio == 0.9 and hour[-16].hit_ratio == 0.0
    assert [b.hit_ratio for b in hour].count(None) == 28  # no calls: no ratio (not zero)
    assert len(series(store, now, "24h")) == 24 and len(series(store, now, "72h")) == 24
    store.close()


def test_the_page_ships_in_the_package_and_names_no_outside_source() -> None:
    """pyproject's package-data covers every static file (a wheel without them would serve 500s),
    and nothing the page loads comes from another host (no CDN)."""
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parent.parent
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["gateway.webui"]
    static = sorted(
        p.relative_to(root / "gateway" / "webui").as_posix()
        for p in (root / "gateway" / "webui" / "static").iterdir()
    )
    assert static == ["static/dashboard.css", "static/dashboard.html", "static/dashboard.js"]
    assert all(any(fnmatch.fnmatch(name, g) for g in globs) for name in static)
    for name in static:
        text = (root / "gateway" / "webui" / name).read_text(encoding="utf-8")
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), name
        assert (
            "http://" not in text.replace("http://www.w3.org/2000/svg", "")
            and "https://" not in text
        ), name


async def test_an_open_dashboard_does_not_hold_up_the_drain(home: Path, fake_llm: FakeLLM) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url, extra="web:\n  port: 0\n")
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    assert daemon.dashboard is not None
    never: asyncio.Event = asyncio.Event()

    async def no_tick(seconds: float) -> None:  # the push interval never ends by itself
        await never.wait()

    daemon.dashboard.sleep = no_tick
    url = f"http://127.0.0.1:{daemon.web_port}/dashboard/api/events"
    async with aiohttp.ClientSession() as http:
        async with http.get(
            url, headers={"Authorization": f"Bearer {load_web_secret(home)}"}
        ) as resp:
            await next_event(resp)
            await asyncio.wait_for(daemon.stop(), 15)  # the stream's pause ends with the daemon
            assert await asyncio.wait_for(resp.content.read(), 5) == b""
