"""The gateway's own HTTP transport to a model API: one
JSON POST per request, with the SDKs' retry policy.

Why not the official SDKs by default: on this path they cost ~1.1 ms of CPU per request (typed
transforms, a deep copy of the body, pydantic parsing, httpx) against ~0.2 ms for one aiohttp POST,
and importing one costs ~45 MB of RSS — together more than the gateway's whole budget per message
and per process (bench/README.md). The two wires are small and stable, so the gateway speaks them
itself over the aiohttp it already runs on;
`model.client: sdk` (gateway/llm/sdk.py) keeps the
vendor SDKs one setting away, and the tests run both.
"""

from __future__ import annotations

import asyncio
import email.utils
import io
import json
import logging
import random
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from gateway.errors import LLMError, LLMRejected, LLMTimeout, LLMUnavailable
from gateway.llm.streams import SseDecoder, sse_data
from gateway.llm.types import StreamAssembler

log = logging.getLogger(__name__)

INITIAL_RETRY_DELAY_S = 0.5  # the SDKs' backoff: 0.5 s doubling to 8 s, minus up to 25 % jitter
MAX_RETRY_DELAY_S = 8.0
# a longer Retry-After fails the request now, so the fallback model can answer
MAX_RETRY_AFTER_S = 60.0
RETRYABLE_STATUS = frozenset({408, 409, 429})
CONNECT_TIMEOUT_S = 10.0

Sleep = Callable[[float], Awaitable[None]]


def encode_body(body: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON; a lone surrogate (never valid UTF-8) is sent as its JSON escape instead
    of failing.

    orjson, because the body (stored prompt + history + tools) is re-encoded for every model call:
    the stdlib encoder took ~15 % of the daemon's CPU per message in bench/overhead.py."""
    try:
        return orjson.dumps(body)
    except TypeError:  # "str is not valid UTF-8: surrogates not allowed"
        return json.dumps(body, separators=(",", ":")).encode("ascii")


def encoded_object(members: Sequence[tuple[str, bytes]]) -> bytes:
    """A JSON object from its keys and their values already encoded by `encode_body`: byte for
    byte what `encode_body` gives for the whole (compact JSON is the concatenation of its parts)."""
    return b"{" + b",".join(b'"' + key.encode() + b'":' + value for key, value in members) + b"}"


def encoded_array(parts: Sequence[bytes]) -> bytes:
    """A JSON array of values already encoded (empty parts, such as no kept prefix, left out)."""
    return b"[" + b",".join(part for part in parts if part) + b"]"


def decode_answer(raw: bytes) -> Any:
    """orjson first; the stdlib for what it refuses but
    JSON allows (a lone surrogate's \\u escape)."""
    try:
        return orjson.loads(raw)
    except ValueError:  # orjson.JSONDecodeError is a ValueError
        return json.loads(raw)


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTP(S)_PROXY, NO_PROXY), read once per transport.

    aiohttp's `trust_env=True` would re-read the environment and ~/.netrc in a worker thread on
    every request, ~0.5 ms of CPU each (bench/overhead.py); the endpoint never changes, so neither
    does its proxy.
    """
    parts = urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    # "proxy.corp:3128", as curl and httpx read it
    return proxy if "://" in proxy else f"http://{proxy}"


def status_error(model: str, status: int, message: str) -> LLMError:
    """429/5xx and lock/timeout statuses are worth
    another try (or the fallback); other 4xx are not."""
    if status in RETRYABLE_STATUS or status >= 500:
        return LLMUnavailable(f"{model}: HTTP {status}: {message}")
    return LLMRejected(f"{model}: HTTP {status}: {message}")


def error_message(raw: bytes) -> str:
    """The provider's own sentence from an error body
    ({"error": {"message": ...}} on both wires)."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    text = raw.decode("utf-8", "replace").strip()
    return text[:200] or "no body"


def retry_after_s(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """`retry-after-ms`, else `retry-after` in seconds or
    as an HTTP date; None when absent or unreadable."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - (time.time() if now is None else now)


def should_retry(status: int, headers: Mapping[str, str]) -> bool:
    verdict = headers.get("x-should-retry")
    if verdict in ("true", "false"):
        return verdict == "true"
    return status in RETRYABLE_STATUS or status >= 500


def backoff_s(attempt: int, rng: Callable[[], float] = random.random) -> float:
    """Delay before retry number `attempt` (0-based) when the server named none."""
    return min(INITIAL_RETRY_DELAY_S * 2.0 ** min(attempt, 30), MAX_RETRY_DELAY_S) * (
        1 - 0.25 * rng()
    )


class HttpTransport:
    """POSTs one JSON body to one endpoint and returns
    the decoded JSON answer, or raises an LLMError.

    Retries like the SDKs do (connection errors, timeouts, 408/409/429/5xx, honouring
    `x-should-retry` and `retry-after[-ms]`), `max_retries` times. The aiohttp session is made on
    first use, inside the running loop.
    """

    def __init__(
        self,
        *,
        url: str,
        headers: Mapping[str, str],
        model: str,
        timeout_s: float,
        max_retries: int,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.url = url
        self.model = model
        self.max_retries = max_retries
        self._headers = {
            "content-type": "application/json",
            "accept": "application/json",
            **headers,
        }
        self._timeout = aiohttp.ClientTimeout(
            total=timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s)
        )
        # A stream may run longer than any one request
        # should: its limit is a stall, not the whole answer.
        self._stream_timeout = aiohttp.ClientTimeout(
            total=None, connect=min(CONNECT_TIMEOUT_S, timeout_s), sock_read=timeout_s
        )
        self._stream_headers = {**self._headers, "accept": "text/event-stream"}
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None
        self._proxy: str | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # HTTPS_PROXY / NO_PROXY apply, as they do for the SDKs' httpx clients (see proxy_for).
            self._proxy = proxy_for(self.url)
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def post(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.post_raw(encode_body(body))

    async def post_raw(self, data: bytes) -> dict[str, Any]:
        """`post` of a body already encoded (a wire that builds it from a session's kept prefix)."""
        return await self._retrying(lambda: self._once(data))

    async def stream(self, body: Mapping[str, Any], assembler: StreamAssembler) -> dict[str, Any]:
        """`body` asks for a stream; each event goes to `assembler`. A try that fails, also
        mid-stream (a cut, an `error` event, a stall of `timeout_s` between bytes), is retried like
        `post`, from the start."""
        return await self.stream_raw(encode_body(body), assembler)

    async def stream_raw(self, data: bytes, assembler: StreamAssembler) -> dict[str, Any]:
        async def attempt() -> dict[str, Any]:
            assembler.reset()
            return await self._stream_once(data, assembler)

        return await self._retrying(attempt)

    async def _retrying(self, attempt: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        tries = 0
        while True:
            try:
                return await attempt()
            except _Retry as retry:
                if tries >= self.max_retries:
                    raise retry.error from retry.error.__cause__
                delay = retry.delay if retry.delay is not None else backoff_s(tries)
                log.info(
                    "model %s: %s; retry %d of %d in %.2fs",
                    self.model,
                    retry.error,
                    tries + 1,
                    self.max_retries,
                    delay,
                )
                tries += 1
                await self._sleep(delay)

    async def _once(self, data: bytes) -> dict[str, Any]:
        try:
            async with self._client().post(
                self.url, data=_payload(data), headers=self._headers, proxy=self._proxy
            ) as resp:
                raw = await resp.read()
                status, headers = resp.status, resp.headers
        except TimeoutError as exc:
            raise self._timed_out(exc) from None
        except aiohttp.ClientError as exc:
            raise self._cut(exc) from None
        if status >= 400:
            raise self._refused(status, headers, raw)
        return self._whole(raw)

    def _whole(self, raw: bytes) -> dict[str, Any]:
        try:
            answer = decode_answer(raw)
        except ValueError as exc:
            raise LLMUnavailable(f"{self.model}: bad response (not JSON)") from exc
        if not isinstance(answer, dict):
            raise LLMUnavailable(f"{self.model}: bad response (not a JSON object)")
        return answer

    async def _stream_once(self, data: bytes, assembler: StreamAssembler) -> dict[str, Any]:
        try:
            async with self._client().post(
                self.url,
                data=_payload(data),
                headers=self._stream_headers,
                proxy=self._proxy,
                timeout=self._stream_timeout,
            ) as resp:
                if resp.status >= 400:
                    raise self._refused(resp.status, resp.headers, await resp.read())
                if resp.content_type == "application/json":
                    # a server that does not stream answered whole
                    return self._whole(await resp.read())
                decoder = SseDecoder()
                async for chunk in resp.content.iter_any():
                    for event, raw in decoder.feed(chunk):
                        self._feed(assembler, event, raw)
                for event, raw in decoder.end():
                    self._feed(assembler, event, raw)
        except TimeoutError as exc:
            raise self._timed_out(exc) from None
        except aiohttp.ClientError as exc:
            raise self._cut(exc) from None
        try:
            return assembler.answer()
        except LLMUnavailable as exc:
            # the stream stopped short of its last event: worth another try
            raise _Retry(exc) from None

    def _feed(self, assembler: StreamAssembler, event: str, raw: str) -> None:
        try:
            assembler.feed(event, sse_data(raw))
        except ValueError as exc:
            raise LLMUnavailable(f"{self.model}: bad stream event (not JSON)") from exc
        except LLMUnavailable as exc:  # an `error` event: overloaded mid-stream, say
            raise _Retry(exc) from None

    def _timed_out(self, exc: BaseException) -> _Retry:
        return _Retry(_chain(LLMTimeout(f"{self.model}: timed out"), exc))

    def _cut(self, exc: BaseException) -> _Retry:
        return _Retry(
            _chain(LLMUnavailable(f"{self.model}: cannot connect ({exc.__class__.__name__})"), exc)
        )

    def _refused(self, status: int, headers: Mapping[str, str], raw: bytes) -> LLMError:
        """An error status as the error to raise now, or a `_Retry` carrying it."""
        error = status_error(self.model, status, error_message(raw))
        if not should_retry(status, headers):
            return error
        wait = retry_after_s(headers)
        if wait is not None and wait > MAX_RETRY_AFTER_S:
            return error  # the provider asks for minutes: do not hold the chat that long
        return _Retry(error, wait if wait is not None and wait > 0 else None)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _Retry(LLMError):
    """A failed attempt that the retry policy may repeat; carries the error to raise when retries
    run out."""

    def __init__(self, error: LLMError, delay: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.delay = delay


def _chain(error: LLMError, cause: BaseException) -> LLMError:
    error.__cause__ = cause
    return error


# aiohttp writes a bytes body in one go, and warns past 1 MB; a buffer goes out in chunks
LARGE_BODY = 1 << 20


def _payload(data: bytes) -> bytes | io.BytesIO:
    """A request body as aiohttp best sends it: a history with pictures easily passes a megabyte (a
    fresh buffer per attempt, since a retry sends it again)."""
    return io.BytesIO(data) if len(data) > LARGE_BODY else data
