"""Helpers for the approvals tests: a real MCP server (tests/fakes/mcp_server.py) whose
`delete_file` is annotated destructive and records every run in a file (so a run is counted across
daemon restarts and kills), a contract fake adapter with the `Interactive` ability, and taps."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from gateway.events import ChatRef, Choices, Inbound, OutboundMessage, Picked
from gateway.ops.wiring import Gateway
from tests.helpers import RecordingAdapter, inbound

SERVER = Path(__file__).parent / "fakes" / "mcp_server.py"
DELETE = "mcp_fake_delete_file"
TOOLS = ("delete_file", "read_file", "rename_file", "echo")


def mcp_yaml(
    folder: Path,
    *,
    tools: tuple[str, ...] = TOOLS,
    approval: str | None = None,
    hold: Path | None = None,
    extra: str = "",
) -> str:
    """An `mcp_servers` block for the fake server; its runs land in `folder/runs.log`."""
    tools_file = folder / "tools.json"
    tools_file.write_text(json.dumps({"tools": list(tools)}), encoding="utf-8")
    args = [str(SERVER), "--tools", str(tools_file), "--runs", str(folder / "runs.log")]
    if hold is not None:
        args += ["--hold", str(hold)]
    mode = f"    approval: {approval}\n" if approval else ""
    return (
        textwrap.dedent(f"""\
        mcp_servers:
          fake:
            command: {sys.executable}
            args: {json.dumps(args)}
            timeout_s: 20
            connect_timeout_s: 30
        """)
        + mode
        + extra
    )


def runs(folder: Path) -> list[str]:
    """Every run of a tool that changes something, in order, across every process that ran the
    server."""
    path = folder / "runs.log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


class ButtonAdapter(RecordingAdapter):
    """A contract fake with the `Interactive` ability: records the buttons it was given and every
    message whose buttons were replaced (platform message id → new text)."""

    def __init__(self, platform: str = "web") -> None:
        super().__init__(platform)
        self.closed: dict[str, str] = {}

    async def close_choices(self, message: OutboundMessage, platform_message_id: str) -> None:
        self.closed[platform_message_id] = message.text
        self._changed.set()

    def with_choices(self) -> list[tuple[str, OutboundMessage]]:
        return [
            (f"{self.platform}-{i}", m) for i, m in enumerate(self.sent, 1) if m.choices is not None
        ]

    async def wait_choices(
        self, count: int = 1, timeout: float = 30.0
    ) -> tuple[str, OutboundMessage]:
        await wait_until(lambda: len(self.with_choices()) >= count, self._changed, timeout)
        return self.with_choices()[count - 1]

    async def wait_closed(self, message_id: str, timeout: float = 30.0) -> str:
        await wait_until(lambda: message_id in self.closed, self._changed, timeout)
        return self.closed[message_id]


async def wait_until(predicate: Any, changed: asyncio.Event, timeout: float) -> None:
    async def loop() -> None:
        while not predicate():
            changed.clear()
            await changed.wait()

    await asyncio.wait_for(loop(), timeout)


def tap(
    choices: Choices, value: str, *, chat: ChatRef, user_id: str, user_name: str | None = None
) -> Inbound:
    """A tap on one of the buttons, as an adapter hands it in."""
    base = inbound(
        "",
        platform=chat.platform,
        chat_id=chat.chat_id,
        user_id=user_id,
        chat_type=chat.chat_type,
        user_name=user_name,
    )
    return dataclasses.replace(base, picked=Picked(choices.token, value))


def rows(gw: Gateway) -> list[dict[str, Any]]:
    return [dict(r) for r in gw.store.all("SELECT * FROM approvals ORDER BY id")]


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of an Anthropic request the fake LLM recorded."""
    return [
        block
        for m in request["messages"]
        if isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "tool_result"
    ]


def result_of(llm: Any, request: int = 1) -> dict[str, Any]:
    """The first tool result the fake LLM's `request`-th Anthropic request carried (what the model
    was told of the call that waited)."""
    results = tool_results(llm.anthropic_requests()[request])
    return results[0]
