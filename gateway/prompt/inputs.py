"""Gathers a new session's prompt inputs (files, memory
snapshot, skills index, hint) for the pure builder.

This is the only impure step of prompt building; `gateway/prompt/builder.py` stays a function of
what this reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path

from gateway.config.settings import Config
from gateway.knowledge.memory import NO_VIEW, MemoryStore, MemoryView
from gateway.knowledge.skills import SkillLibrary
from gateway.prompt.builder import (
    BuiltPrompt,
    FileSnapshot,
    PromptInputs,
    build_prompt,
    find_context_file,
    load_soul,
    load_soul_file,
)
from gateway.prompt.hints import HintOverride, PlatformFacts, resolve_hint


class PromptAssembler:
    """One agent's prompt inputs: its settings, memory and skills, and its identity: `identity`
    (the text of `agents.<name>.identity`), else the file `soul` (default: the home's SOUL.md)."""

    def __init__(
        self,
        config: Config,
        facts: Mapping[str, PlatformFacts],
        memory: MemoryStore,
        skills: SkillLibrary,
        *,
        soul: Path | None = None,
        identity: FileSnapshot | None = None,
    ) -> None:
        self.config = config
        self.facts = facts
        self.memory = memory
        self.skills = skills
        self.soul = soul
        self.identity = identity

    def inputs(
        self,
        *,
        platform: str,
        chat_type: str,
        model: str,
        provider: str,
        tool_names: Sequence[str],
        today: date,
        view: MemoryView = NO_VIEW,
    ) -> PromptInputs:
        """`view`: whose profile (the session's owner; nobody in a shared conversation) and which
        chat's notes."""
        cfg = self.config
        shared, profile, chat = (
            self.memory.snapshot(view) if "memory" in tool_names else ("", "", "")
        )
        facts = self.facts.get(platform) or self.facts["cli"]
        override = cfg.platform_hints.get(platform)  # type: ignore[call-overload]
        hint = resolve_hint(
            facts,
            HintOverride(append=override.append, replace=override.replace)
            if override is not None
            else None,
        )
        workdir = cfg.agent.workdir
        has_skills = any(n.startswith("skill") for n in tool_names)
        skills = tuple(self.skills.index()) if has_skills else ()
        return PromptInputs(
            platform=platform,
            chat_type=chat_type,
            model_name=model,
            provider=provider,
            tool_names=tuple(tool_names),
            today=today,
            soul=self._soul(),
            context_file=find_context_file(Path(workdir)) if workdir is not None else None,
            system_message=cfg.agent.system_message,
            memory_text=shared,
            memory_limit=cfg.memory.memory_char_limit,
            user_text=profile,
            user_limit=cfg.memory.user_char_limit,
            chat_text=chat,
            chat_limit=cfg.memory.chat_char_limit,
            skills_index=skills,
            platform_hint=hint,
            tool_use_enforcement=cfg.agent.tool_use_enforcement,
            context_file_max_chars=cfg.agent.context_file_max_chars,
        )

    def _soul(self) -> FileSnapshot | None:
        if self.identity is not None:
            return self.identity
        return load_soul(self.config.home) if self.soul is None else load_soul_file(self.soul)

    def build_full(self, **kwargs: object) -> BuiltPrompt:
        return build_prompt(self.inputs(**kwargs))  # type: ignore[arg-type]

    def build(
        self,
        *,
        platform: str,
        chat_type: str,
        model: str,
        provider: str,
        tool_names: Sequence[str],
        today: date,
        view: MemoryView = NO_VIEW,
    ) -> str:
        return self.build_full(
            platform=platform,
            chat_type=chat_type,
            model=model,
            provider=provider,
            tool_names=tool_names,
            today=today,
            view=view,
        ).text
