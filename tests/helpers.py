"""Test helpers: write a config for a fake model,
build the real gateway graph around contract fakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import textwrap
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.settings import load_config
from gateway.events import ChatRef, Inbound, OutboundMessage
from gateway.ops.wiring import Gateway, build_gateway
from tests.fakes.llm import FakeLLM


def require(missing: str | None) -> None:
    """A test needs a tool the machine may lack (systemd-analyze, mypy…): skip on a developer's
    machine, but fail in CI (.ci/run sets GATEWAY_CI=1), where a missing tool must break the run
    instead of hiding tests."""
    if missing is None:
        return
    if os.environ.get("GATEWAY_CI"):
        pytest.fail(f"{missing} (GATEWAY_CI is set: CI installs it, so its absence is a failure)")
    pytest.skip(missing)


def require_tool(name: str, package: str) -> None:
    """The test runs `name` (node, …): skipped without
    it on a developer's machine, a failure in CI."""
    require(None if shutil.which(name) else f"{name} is not installed (apt-get install {package})")


def write_config(
    home: Path, *, provider: str = "anthropic", base_url: str | None = None, extra: str = ""
) -> Path:
    """home/config.yaml for the fake model at `base_url`, plus `extra`; the web chat listens on a
    port from the OS unless `extra` names one (see own_web_port)."""
    model = ""
    if base_url is not None:
        model = textwrap.dedent(f"""\
            model:
              provider: {provider}
              name: {"claude-test" if provider == "anthropic" else "gpt-test"}
              base_url: {base_url}
              api_key: test-key
              max_retries: 0
              timeout_s: 10
            """)
    path = home / "config.yaml"
    path.write_text(own_web_port(model + textwrap.dedent(extra)), encoding="utf-8")
    return path


def own_web_port(text: str) -> str:
    """The config with `web.port: 0` added when it names no port: the default, 8765, may be the
    developer's own `gateway run` (the README's first command leaves it running). Text that is not
    a YAML mapping (a test of bad config) is left as it is."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if data is None or (isinstance(data, dict) and "web" not in data):  # appended: no line moves
        return text + ("" if text.endswith("\n") or not text else "\n") + "web:\n  port: 0\n"
    web = data.get("web") if isinstance(data, dict) else None
    if web is None and isinstance(data, dict):  # `web:` with nothing under it
        return re.sub(r"^web:[ \t]*$", "web:\n  port: 0", text, count=1, flags=re.MULTILINE)
    if not isinstance(web, dict) or "port" in web or web.get("enabled") is False:
        return text  # a port is named, or nothing listens
    flow = re.search(r"^web:[ \t]*\{", text, re.MULTILINE)
    if flow:
        return text[: flow.end()] + "port: 0, " + text[flow.end() :]
    block = re.search(r"^web:[ \t]*\n([ \t]+)", text, re.MULTILINE)
    assert block, f"write_config cannot place web.port in {text!r}"
    return text[: block.start(1)] + f"{block.group(1)}port: 0\n" + text[block.start(1) :]


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections while this lasts: bound here, never listened on.
    (A fixed number such as 9 or 8765 may be some program's on this machine.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def llm_url(fake: FakeLLM, provider: str) -> str:
    return fake.openai_base_url if provider == "openai" else fake.base_url


class RecordingAdapter:
    """A contract fake for the Adapter protocol: records what a user on `platform` would see."""

    def __init__(self, platform: str = "cli") -> None:
        self.platform = platform
        self.sent: list[OutboundMessage] = []
        self.submit: Any = None
        self._changed = asyncio.Event()

    async def start(self, submit: Any) -> None:
        self.submit = submit

    async def send(self, message: OutboundMessage) -> str:
        self.sent.append(message)
        self._changed.set()
        return f"{self.platform}-{len(self.sent)}"

    async def stop(self) -> None:
        return None

    def texts(self, chat_id: str | None = None) -> list[str]:
        return [m.text for m in self.sent if chat_id is None or m.chat.chat_id == chat_id]

    async def wait_for(self, count: int, timeout: float = 60.0) -> None:
        async def loop() -> None:
            while len(self.sent) < count:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), timeout)


_counter = iter(range(1, 10**9))


def inbound(
    text: str,
    *,
    platform: str = "cli",
    chat_id: str = "c1",
    user_id: str = "u1",
    chat_type: str = "dm",
    thread_id: str | None = None,
    user_name: str | None = None,
    message_id: str | None = None,
    received_at: datetime | None = None,
) -> Inbound:
    return Inbound(
        chat=ChatRef(platform, chat_type, chat_id, thread_id),  # type: ignore[arg-type]
        user_id=user_id,
        text=text,
        message_id=message_id or f"m{next(_counter)}",
        received_at=received_at or datetime.now(UTC),
        user_name=user_name,
    )


def away_from_daily_reset() -> Callable[[], datetime]:
    """Real time moved to start at 16:00 local today, 12 hours from the default daily reset
    (sessions.reset.at_hour: 4): on the machine's clock, a test that runs across 04:00 sees its
    session reset between two of its messages. For a test whose rows all come from the gateway
    (one that writes rows itself with the real time would see them 12 hours off)."""
    now = datetime.now().astimezone()
    shift = now.replace(hour=16, minute=0, second=0, microsecond=0) - now
    return lambda: datetime.now(UTC) + shift


def gateway_for(
    home: Path,
    adapters: Sequence[Any],
    *,
    llm: Any = None,
    clock: Any = None,
    sleep: Any = None,
    monotonic: Any = None,
) -> Gateway:
    """The real graph around `adapters`. Without a `sleep` and `monotonic` of the test's own, the
    platforms' send rates are kept in virtual time (see SendPacing)."""
    config = load_config(home)
    kwargs: dict[str, Any] = {"env": {}, "adapters": adapters, "probe_ollama": False}
    for name, value in (("llm", llm), ("clock", clock), ("sleep", sleep), ("monotonic", monotonic)):
        if value is not None:
            kwargs[name] = value
    gateway = build_gateway(config, **kwargs)
    if sleep is None and monotonic is None:
        SendPacing().apply(gateway)
    return gateway


class SendPacing:
    """Virtual time for the send rate limiter only: Telegram's one message a second per chat (and
    the others' rates) still order and space the sends, but a wait moves this clock instead of
    taking real seconds (30 replies in one chat took 30 s)."""

    def __init__(self) -> None:
        self.t = 0.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)

    def apply(self, gateway: Gateway) -> None:
        """The outbox and the live previews share one limiter."""
        gateway.outbox.limiter.clock = self.monotonic
        gateway.outbox.limiter.sleep = self.sleep
