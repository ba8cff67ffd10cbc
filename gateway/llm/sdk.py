"""`model.client: sdk`: the same requests sent through the official anthropic / openai SDKs.

Imported only when that setting asks for it, because importing an SDK costs ~45 MB (anthropic) of
RSS. The SDK answers typed objects; they are dumped back to the wire's JSON shape so one parser per
wire (gateway/llm/anthropic_wire.py, openai_wire.py) reads both transports, and the tests run every
client test through both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from gateway.errors import LLMError, LLMTimeout, LLMUnavailable
from gateway.llm.http import backoff_s, status_error
from gateway.llm.types import StreamAssembler

log = logging.getLogger(__name__)


class SdkTransport:
    def __init__(
        self,
        *,
        provider: Literal["anthropic", "openai"],
        model: str,
        api_key: str,
        base_url: str | None,
        timeout_s: float,
        max_retries: int,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.model = model
        self.max_retries = max_retries
        self._sleep = sleep
        sdk: Any
        if provider == "anthropic":
            import anthropic as sdk

            self._client: Any = sdk.AsyncAnthropic(
                api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=max_retries
            )
            self._create = self._client.messages.create
        else:
            import openai as sdk

            self._client = sdk.AsyncOpenAI(
                api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=max_retries
            )
            self._create = self._client.chat.completions.create
        # both SDKs' HTTP client: a stream cut midway surfaces as its error, not the SDK's
        import httpx2

        self._sdk, self._httpx = sdk, httpx2
        self._errors: tuple[type[BaseException], ...] = (sdk.APIError, httpx2.HTTPError, ValueError)

    async def post(self, body: Mapping[str, Any]) -> dict[str, Any]:
        resp = await self._call(body)
        dumped: dict[str, Any] = resp.model_dump(mode="json")
        return dumped

    async def stream(self, body: Mapping[str, Any], assembler: StreamAssembler) -> dict[str, Any]:
        """The SDK retries opening the stream; a stream cut once it had begun is tried again here,
        as often and with the same backoff, since no SDK resends a request whose answer had
        started."""
        tries = 0
        while True:
            assembler.reset()
            started: list[bool] = []
            try:
                return await self._stream_once(body, assembler, started)
            except (LLMUnavailable, LLMTimeout) as exc:
                if not started or tries >= self.max_retries:
                    raise
                delay = backoff_s(tries)
                log.info(
                    "model %s: %s mid-stream; retry %d of %d in %.2fs",
                    self.model,
                    exc,
                    tries + 1,
                    self.max_retries,
                    delay,
                )
                tries += 1
                await self._sleep(delay)

    async def _stream_once(
        self, body: Mapping[str, Any], assembler: StreamAssembler, started: list[bool]
    ) -> dict[str, Any]:
        events = await self._call(body)
        try:
            async for event in events:
                started.append(True)
                data = event.model_dump(mode="json")
                assembler.feed(str(data.get("type") or ""), data)
        except self._errors as exc:
            raise self._translate(exc) from exc
        finally:
            await events.close()
        return assembler.answer()

    async def _call(self, body: Mapping[str, Any]) -> Any:
        """The SDK's exceptions become the gateway's once,
        here; both SDKs share the same hierarchy."""
        try:
            return await self._create(**body)
        except self._errors as exc:
            raise self._translate(exc) from exc

    def _translate(self, exc: BaseException) -> LLMError:
        sdk, httpx = self._sdk, self._httpx
        if isinstance(exc, (sdk.APITimeoutError, httpx.TimeoutException)):
            return LLMTimeout(f"{self.model}: timed out")
        if isinstance(exc, (sdk.APIConnectionError, httpx.HTTPError)):
            # a stream cut midway is the latter
            return LLMUnavailable(f"{self.model}: cannot connect ({exc.__class__.__name__})")
        if isinstance(exc, sdk.APIStatusError) and exc.status_code < 400:
            # an `error` event mid-stream
            return LLMUnavailable(f"{self.model}: error mid-stream: {str(exc.message)[:300]}")
        if isinstance(exc, sdk.APIStatusError):
            return status_error(self.model, exc.status_code, exc.message)
        return LLMUnavailable(f"{self.model}: bad response ({exc.__class__.__name__})")

    async def close(self) -> None:
        await self._client.close()
