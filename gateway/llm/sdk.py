"""`model.client: sdk`: the same requests sent through the official anthropic / openai SDKs.

Imported only when that setting asks for it, because importing an SDK costs ~45 MB (anthropic) of RSS. The SDK
answers typed objects; they are dumped back to the wire's JSON shape so one parser per wire (gateway/llm/anthropic_wire.py, openai_wire.py) reads both
transports, and the tests run every client test through both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from gateway.errors import LLMTimeout, LLMUnavailable
from gateway.llm.http import status_error


class SdkTransport:
    def __init__(self, *, provider: Literal["anthropic", "openai"], model: str, api_key: str, base_url: str | None,
                 timeout_s: float, max_retries: int) -> None:
        self.model = model
        sdk: Any
        if provider == "anthropic":
            import anthropic as sdk

            self._client: Any = sdk.AsyncAnthropic(api_key=api_key, base_url=base_url, timeout=timeout_s,
                                                   max_retries=max_retries)
            self._create = self._client.messages.create
        else:
            import openai as sdk

            self._client = sdk.AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s,
                                           max_retries=max_retries)
            self._create = self._client.chat.completions.create
        self._sdk = sdk

    async def post(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The SDK's exceptions become the gateway's once, here; both SDKs share the same hierarchy."""
        sdk = self._sdk
        try:
            resp = await self._create(**body)
        except sdk.APITimeoutError as exc:
            raise LLMTimeout(f"{self.model}: timed out") from exc
        except sdk.APIConnectionError as exc:
            raise LLMUnavailable(f"{self.model}: cannot connect ({exc.__class__.__name__})") from exc
        except sdk.APIStatusError as exc:
            raise status_error(self.model, exc.status_code, exc.message) from exc
        except (sdk.APIError, ValueError) as exc:
            raise LLMUnavailable(f"{self.model}: bad response ({exc.__class__.__name__})") from exc
        dumped: dict[str, Any] = resp.model_dump(mode="json")
        return dumped

    async def close(self) -> None:
        await self._client.close()
