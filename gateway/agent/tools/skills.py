"""The `skill_view` and `skill_manage` tools over the skills library (gateway/knowledge/skills.py).

Skills are shared: their index is in every new session's prompt, so changing them follows the shared
notes' policy (`memory.shared_writers`, the caller's MemoryRights.shared)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from gateway.agent.tools.registry import ToolContext, ToolFunction
from gateway.errors import ToolError
from gateway.knowledge.skills import DEFAULT_CATEGORY, SkillLibrary


def skill_tools(library: SkillLibrary) -> tuple[ToolFunction, ToolFunction]:
    async def skill_view(
        name: Annotated[str, "the skill's name (or category/name) from the skills index"],
    ) -> str:
        """Load a skill's full instructions. The skills index in your prompt lists names and
        one-line descriptions; load a skill before a task it covers.
        """
        return await asyncio.to_thread(library.view, name)

    async def skill_manage(
        ctx: ToolContext,
        action: Annotated[
            Literal["create", "patch", "delete"],
            "create a new skill; patch an existing one; delete one",
        ],
        name: Annotated[str, "lowercase letters, digits, '-' or '_' (e.g. deploy-docs)"],
        category: Annotated[
            str | None,
            "a folder for related skills, same characters as name; create defaults to general",
        ] = None,
        content: Annotated[
            str | None,
            "create: the skill's instructions in Markdown (optional YAML front "
            "matter). patch without old_text: the new full body. patch with "
            "old_text: the text that replaces old_text",
        ] = None,
        description: Annotated[
            str | None,
            "one line saying when to use the skill (needed to create; patch may change it)",
        ] = None,
        old_text: Annotated[
            str | None,
            "patch only: an exact, unique part of the current SKILL.md to "
            "replace with content, for a small edit",
        ] = None,
    ) -> str:
        """Save a reusable procedure as a skill (a SKILL.md file) after working out how to do a
        task, fix or improve one that proved wrong or incomplete, or delete one that is obsolete.
        """
        if not ctx.memory.shared:
            # the skills index is in every new session's prompt, like the shared notes
            raise ToolError(
                "Not saved: skills reach every conversation (the skills index), and only admins "
                f"may change them (memory.shared_writers: {ctx.memory.shared_policy})."
            )
        if action == "create":
            if content is None:
                raise ToolError("action=create needs content.")
            skill = await asyncio.to_thread(
                library.create, category or DEFAULT_CATEGORY, name, content, description
            )
            return (
                f"Created skill {skill.category}/{skill.name}. Future sessions will list it in the "
                "skills index."
            )
        if action == "patch":
            if content is None and old_text is None and description is None:
                raise ToolError(
                    "action=patch needs content (new body, or replacement for old_text) "
                    "or description."
                )
            if old_text is not None and content is None:
                raise ToolError(
                    "action=patch with old_text needs content (use an empty string to delete it)."
                )
            skill = await asyncio.to_thread(
                library.patch,
                name,
                category=category,
                content=content,
                old_text=old_text,
                description=description,
            )
            return f"Updated skill {skill.category}/{skill.name}."
        skill = await asyncio.to_thread(library.delete, name, category)
        return f"Deleted skill {skill.category}/{skill.name}."

    return skill_view, skill_manage
