"""Benchmark Slack's ack: how long Slack waits for our ack (HTTP: the 200; Socket Mode: the envelope
ack), against its own 3 s after which it sends the event again.

Run:  PYTHONPATH=. python bench/slack_ack.py [--events N]
Prints, per mode (socket, http) and case, the median and the slowest ack over N events, in ms:
  plain       the store answers at once
  slow-api    users.info and conversations.info take 10 s (the lookups' budget, 1.5 s, runs out)
  stuck       the store never answers while Slack waits (the ack budget, 2.5 s, runs out)
The adapter is the real one (adapters/slack) against tests/fakes/slack.py; the tests check the
order of these events (tests/adapters/test_slack.py), this script the seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from adapters.slack.adapter import SlackAdapter
from gateway.config.settings import load_config
from gateway.events import Inbound, SubmitOutcome, SubmitResult
from gateway.ops.http_limits import serve as serve_http
from tests.fakes.base import Delay
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, FakeSlack, event_callback
from tests.fakes.slack_events import ACK_DEADLINE_S, EventsApi, SocketModeEvents

SECRET = "bench-signing-secret"
ALICE = "U1"
USERS = {
    ALICE: {
        "id": ALICE,
        "name": "alice",
        "real_name": "Alice Smith",
        "profile": {"display_name": "Alice", "real_name": "Alice Smith"},
    }
}
Submit = Callable[[Inbound], Awaitable[SubmitResult]]
_ts = itertools.count(1)


async def instant(inbound: Inbound) -> SubmitResult:
    return SubmitResult(SubmitOutcome.ACCEPTED)


def stuck(release: asyncio.Event) -> Submit:
    async def submit(inbound: Inbound) -> SubmitResult:
        await release.wait()
        return SubmitResult(SubmitOutcome.ACCEPTED)

    return submit


def event(n: int) -> dict[str, object]:
    """A mention in a channel from someone not looked up yet: the adapter asks users.info and
    conversations.info before it stores the message."""
    return {
        "type": "app_mention",
        "channel": f"C{n}",
        "user": ALICE,
        "text": "<@UBOT> hi",
        "ts": f"{int(time.time())}.{next(_ts):06d}",
    }


async def one(home: Path, mode: str, case: str, n: int) -> float:
    """Seconds until Slack has its ack for one event, on a fresh adapter."""
    release = asyncio.Event()
    async with FakeSlack(users=USERS) as slack:
        if case == "slow-api":
            slack.fail("users.info", Delay(10.0))
            slack.fail("conversations.info", Delay(10.0))
        (home / "config.yaml").write_text(
            "web:\n  enabled: false\nslack:\n  bot_token: "
            f"'{BOT_TOKEN}'\n  app_token: '{APP_TOKEN}'\n"
            f"  signing_secret: '{SECRET}'\n  mode: {mode}\n  listen_port: 0\n"
            f"  api_url: {slack.api_base_url}\n  allowed_users: ['{ALICE}']\n",
            encoding="utf-8",
        )
        config = load_config(home, env={})
        assert config.slack is not None
        adapter = SlackAdapter(config.slack, serve=serve_http)
        await adapter.start(stuck(release) if case == "stuck" else instant)
        try:
            if mode == "http":
                url = f"http://127.0.0.1:{adapter.http_port}{config.slack.path}"
                api = EventsApi(url, SECRET, ack_deadline=60.0, retry_delays=())
                [delivery] = await api.deliver(event_callback(event(n), f"Ev{n}"))
            else:
                events = SocketModeEvents(slack, ack_deadline=60.0, retry_delays=())
                [delivery] = await events.deliver(event(n), f"Ev{n}")
            assert delivery.outcome == "ok", delivery
            return delivery.elapsed
        finally:
            release.set()
            await adapter.stop()


async def main(events: int) -> None:
    print(
        f"load average {os.getloadavg()[0]:.2f}; Slack sends an event again after "
        f"{ACK_DEADLINE_S * 1000:.0f} ms; {events} events per line"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for mode, case in itertools.product(("socket", "http"), ("plain", "slow-api", "stuck")):
            times = []
            for n in range(events):
                home = Path(tmp) / f"{mode}-{case}-{n}"
                home.mkdir()
                times.append(await one(home, mode, case, n))
            print(
                f"{mode:<7}{case:<10} median {statistics.median(times) * 1000:7.0f} ms   "
                f"slowest {max(times) * 1000:7.0f} ms"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5)
    asyncio.run(main(parser.parse_args().events))
