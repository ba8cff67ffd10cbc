"""The `memory` tool: the model's way to add, replace and remove entries in MEMORY.md and USER.md."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from gateway.agent.tools.registry import ToolFunction
from gateway.errors import ToolError
from gateway.knowledge.memory import LABELS, MemoryStore, Target


def memory_tool(store: MemoryStore) -> ToolFunction:
    async def memory(
        action: Annotated[Literal["add", "replace", "remove"],
                          "add a new entry; replace the entry containing old_text with content; "
                          "remove the entry containing old_text"],
        target: Annotated[Target, "memory: your notes (environment facts, conventions, lessons learned); "
                                  "user: who the user is (name, preferences, communication style)"],
        content: Annotated[str | None, "the entry text, for add and replace; one short self-contained fact"] = None,
        old_text: Annotated[str | None, "a unique part of the existing entry, for replace and remove"] = None,
    ) -> str:
        """Save durable facts across sessions: notes about your environment and lessons learned (target
        memory) or about the user (target user). Keep entries short and factual; replace or remove
        outdated ones instead of piling up. Saved entries appear in future sessions' prompts; this
        session's prompt keeps the memory it started with.
        """
        if action in ("add", "replace") and content is None:
            raise ToolError(f"action={action} needs content.")
        if action in ("replace", "remove") and old_text is None:
            raise ToolError(f"action={action} needs old_text (a unique part of the entry).")
        if action == "add":
            used, limit = await asyncio.to_thread(store.add, target, content or "")
        elif action == "replace":
            used, limit = await asyncio.to_thread(store.replace, target, old_text or "", content or "")
        else:
            used, limit = await asyncio.to_thread(store.remove, target, old_text or "")
        done = "Removed from" if action == "remove" else "Saved to"
        return (f"{done} {LABELS[target]}: {used:,} of {limit:,} characters used. Future sessions will see "
                "this; the memory in this session's prompt stays as it was when the session started.")

    return memory
