"""Slack's side of the Events API, over HTTP and over Socket Mode: each event is delivered (posted
to the app's Request URL, signed, or pushed as an envelope on its websocket), and the app is held to
Slack's deadline. An answer that is not a 2xx within 3 seconds is a failure, and Slack sends the
event again: at once, after a minute, after five minutes, each time with `X-Slack-Retry-Num` (1,
2, 3) and `X-Slack-Retry-Reason` (`http_timeout`, `http_error`, `connection_failed`). A post that
timed out is neither cancelled nor waited for: the app sees the retry while the first post is still
in flight.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp

from tests.fakes.slack import FakeSlack, signed_request_headers

ACK_DEADLINE_S = 3.0
# Slack's schedule: immediately, after 1 minute, after 5 minutes
RETRY_DELAYS_S = (0.0, 60.0, 300.0)
REASONS = {"timeout": "http_timeout", "error": "http_error", "unreachable": "connection_failed"}


@dataclass(frozen=True, slots=True)
class Delivery:
    """One post of an event: `attempt` 0 is the first, then the X-Slack-Retry-Num it carried, with
    `reason` (X-Slack-Retry-Reason). `outcome`: ok (a 2xx in time), timeout, error (another status)
    or unreachable."""

    event_id: str
    attempt: int
    reason: str
    outcome: str
    status: int | None
    elapsed: float


class EventsApi:
    """Posts events to `url` as Slack does. The 3 s deadline is real time, as the app lives it;
    `sleep` is the wait between retries (inject a fake clock's: Slack's minutes need not pass for
    real)."""

    def __init__(
        self,
        url: str,
        signing_secret: str,
        *,
        ack_deadline: float = ACK_DEADLINE_S,
        retry_delays: Sequence[float] = RETRY_DELAYS_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.url = url
        self.signing_secret = signing_secret
        self.ack_deadline = ack_deadline
        self.retry_delays = tuple(retry_delays)
        self.sleep = sleep
        self.deliveries: list[Delivery] = []
        self.late: list[asyncio.Task[int | None]] = []  # posts Slack gave up waiting for

    async def deliver(self, payload: Mapping[str, Any]) -> list[Delivery]:
        """Post until a 2xx comes back in time or the
        retries run out; returns this event's deliveries."""
        body, event_id = json.dumps(payload), str(payload.get("event_id", ""))
        found: list[Delivery] = []
        async with aiohttp.ClientSession() as http:
            for attempt in range(len(self.retry_delays) + 1):
                if attempt:
                    await self.sleep(self.retry_delays[attempt - 1])
                reason = REASONS[found[-1].outcome] if found else ""
                found.append(await self._post(http, body, event_id, attempt, reason))
                if found[-1].outcome == "ok":
                    break
            await asyncio.gather(*self.late, return_exceptions=True)  # before the session closes
        self.deliveries.extend(found)
        return found

    async def interact(self, payload: Mapping[str, Any]) -> Delivery:
        """An interaction (a button's `block_actions`) as Slack posts it to the Request URL:
        form-encoded `payload=<json>`, signed; one post, never sent again (a late ack is an error
        the clicker sees)."""
        body = urlencode({"payload": json.dumps(payload)})
        async with aiohttp.ClientSession() as http:
            found = await self._post(
                http,
                body,
                str(payload.get("trigger_id", "")),
                0,
                "",
                "application/x-www-form-urlencoded",
            )
            await asyncio.gather(*self.late, return_exceptions=True)
        self.deliveries.append(found)
        return found

    async def _post(
        self,
        http: aiohttp.ClientSession,
        body: str,
        event_id: str,
        attempt: int,
        reason: str,
        content_type: str = "application/json",
    ) -> Delivery:
        headers = signed_request_headers(self.signing_secret, body, content_type=content_type)
        if attempt:
            headers |= {"X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": reason}
        started = time.monotonic()
        task = asyncio.create_task(self._send(http, body, headers))
        done, _ = await asyncio.wait({task}, timeout=self.ack_deadline)
        elapsed = time.monotonic() - started
        if task not in done:
            self.late.append(task)
            return Delivery(event_id, attempt, reason, "timeout", None, elapsed)
        status = task.result()
        outcome = "unreachable" if status is None else "ok" if 200 <= status < 300 else "error"
        return Delivery(event_id, attempt, reason, outcome, status, elapsed)

    async def _send(
        self, http: aiohttp.ClientSession, body: str, headers: Mapping[str, str]
    ) -> int | None:
        try:
            async with http.post(self.url, data=body, headers=dict(headers)) as resp:
                await resp.read()
                return resp.status
        except (aiohttp.ClientError, OSError):
            return None


class SocketModeEvents:
    """Pushes events on the fake's Socket Mode websocket as Slack does: an envelope not acked within
    3 s counts as failed and the event comes again, in a new envelope with `retry_attempt` 1, 2, 3
    and `retry_reason`, on the same schedule as over HTTP. A late ack is ignored (the retry is on
    its way already)."""

    def __init__(
        self,
        fake: FakeSlack,
        *,
        ack_deadline: float = ACK_DEADLINE_S,
        retry_delays: Sequence[float] = RETRY_DELAYS_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.fake = fake
        self.ack_deadline = ack_deadline
        self.retry_delays = tuple(retry_delays)
        self.sleep = sleep
        self.deliveries: list[Delivery] = []

    async def interact(self, payload: Mapping[str, Any]) -> Delivery:
        """An interaction pushed in an `interactive` envelope; Slack waits 3 s for its ack and never
        sends it again."""
        started = time.monotonic()
        envelope = await self.fake.push_interactive(payload)
        try:
            await self.fake.wait_for_ack(envelope, timeout=self.ack_deadline)
        except TimeoutError:
            found = Delivery(
                str(payload.get("trigger_id", "")),
                0,
                "",
                "timeout",
                None,
                time.monotonic() - started,
            )
        else:
            found = Delivery(
                str(payload.get("trigger_id", "")), 0, "", "ok", None, time.monotonic() - started
            )
        self.deliveries.append(found)
        return found

    async def deliver(self, event: Mapping[str, Any], event_id: str) -> list[Delivery]:
        found: list[Delivery] = []
        for attempt in range(len(self.retry_delays) + 1):
            if attempt:
                await self.sleep(self.retry_delays[attempt - 1])
            reason = "timeout" if attempt else ""
            started = time.monotonic()
            envelope = await self.fake.push_event(
                event, event_id=event_id, retry_attempt=attempt, retry_reason=reason
            )
            try:
                await self.fake.wait_for_ack(envelope, timeout=self.ack_deadline)
            except TimeoutError:
                found.append(
                    Delivery(event_id, attempt, reason, "timeout", None, time.monotonic() - started)
                )
                continue
            found.append(
                Delivery(event_id, attempt, reason, "ok", None, time.monotonic() - started)
            )
            break
        self.deliveries.extend(found)
        return found
