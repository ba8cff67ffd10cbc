"""The `memory` tool: the model's way to add, replace
and remove entries in the memory scope it may write.

Which file a target means, and whether this caller may change it, comes from the caller's
`MemoryRights` (gateway/access/roles.py decides them): a refusal is a tool error that says where the
model can write instead.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Annotated, Literal

from gateway.agent.tools.registry import ToolContext, ToolFunction
from gateway.errors import ToolError
from gateway.knowledge.memory import MemoryFile, MemoryRights, MemoryStore, Target

OWN_PROFILE = (
    'Save facts about the person you are talking to in their own profile with target="user"'
)


def memory_tool(store: MemoryStore) -> ToolFunction:
    async def memory(
        ctx: ToolContext,
        action: Annotated[
            Literal["add", "replace", "remove"],
            "add a new entry; replace the entry containing old_text with content; "
            "remove the entry containing old_text",
        ],
        target: Annotated[
            Target,
            "user: the profile of the person asking (name, preferences, situation); "
            "memory: shared notes every conversation sees (environment facts, conventions, "
            "lessons learned); chat: notes for this group or channel only",
        ],
        content: Annotated[
            str | None, "the entry text, for add and replace; one short self-contained fact"
        ] = None,
        old_text: Annotated[
            str | None, "a unique part of the existing entry, for replace and remove"
        ] = None,
    ) -> str:
        """Save durable facts across sessions: about the person you are talking to (target user,
        their own profile), shared notes about your environment and lessons learned (target memory),
        or notes for this group chat (target chat). Keep entries short and factual; replace or
        remove outdated ones instead of piling up. Saved entries appear in future sessions' prompts;
        this session's prompt keeps the memory it started with.
        """
        if action in ("add", "replace") and content is None:
            raise ToolError(f"action={action} needs content.")
        if action in ("replace", "remove") and old_text is None:
            raise ToolError(f"action={action} needs old_text (a unique part of the entry).")
        file = writable(store, ctx.memory, target)
        # a profile is quoted only in its owner's chat
        quote = target != "user" or ctx.memory.own_conversation
        if action == "add":
            used, limit = await asyncio.to_thread(file.add, content or "")
        elif action == "replace":
            used, limit = await asyncio.to_thread(
                partial(file.replace, old_text or "", content or "", quote=quote)
            )
        else:
            used, limit = await asyncio.to_thread(partial(file.remove, old_text or "", quote=quote))
        done = "Removed from" if action == "remove" else "Saved to"
        return (
            f"{done} {file.label}: {used:,} of {limit:,} characters used. Future sessions will see "
            "this; the memory in this session's prompt stays as it was when the session started."
        )

    return memory


def writable(store: MemoryStore, rights: MemoryRights, target: Target) -> MemoryFile:
    """The file `target` means for this caller, or a
    ToolError saying why not and where to write instead."""
    if target == "user":
        if rights.person_id is None:
            raise ToolError(
                "Not saved: there is no personal profile here (this conversation is shared and the "
                'person asking is unknown). Use target="chat" for notes about this chat.'
            )
        return store.profile(rights.person_id)
    if target == "memory":
        if not rights.shared:
            raise ToolError(
                "Not saved: the shared notes (MEMORY.md) reach every conversation, and only "
                f"admins may change them (memory.shared_writers: {rights.shared_policy}). "
                f"{_instead(rights)}."
            )
        return store.shared()
    if rights.chat is None:
        raise ToolError(
            "Not saved: this conversation has no chat notes (they exist in groups and channels, "
            f"when memory.chat_notes is on). {_instead(rights)}."
        )
    if not rights.chat_writable:
        raise ToolError(
            "Not saved: only admins may change this chat's notes (memory.chat_writers: "
            f"{rights.chat_policy}). {_instead(rights)}."
        )
    return store.chat(rights.chat)


def _instead(rights: MemoryRights) -> str:
    if rights.person_id is not None:
        return OWN_PROFILE
    return "Nothing else can be saved in this conversation"
