"""The system prompt: three tiers (stable → context → volatile) built by one pure function of
explicit inputs.

Same inputs, same bytes: nothing here reads a clock, the environment or config. The caller stores
the result and sends it verbatim for the life of the session, so the provider's prefix cache stays
warm.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Literal

from gateway.knowledge.skills import SkillEntry
from gateway.prompt.hints import ResolvedHint
from gateway.scan import scan_text

log = logging.getLogger(__name__)

Tier = Literal["stable", "context", "volatile"]
TIERS: tuple[Tier, ...] = ("stable", "context", "volatile")

# Substrings of the lowercased model name for families that tend to describe a tool call instead of
# making it.
AUTO_ENFORCEMENT = ("gpt", "codex", "gemini", "gemma", "grok", "glm", "qwen", "deepseek")
SKILL_TOOLS = ("skills_list", "skill_view", "skill_manage")


@dataclass(frozen=True, slots=True)
class FileSnapshot:
    path: Path
    text: str


@dataclass(frozen=True, slots=True)
class PromptBlock:
    tier: Tier
    name: str
    source: str  # a file path, "built-in", "config", "platform_hints.yaml", ...
    text: str


@dataclass(frozen=True, slots=True)
class PromptInputs:
    platform: str
    chat_type: str  # dm | group | channel
    model_name: str
    provider: str
    tool_names: tuple[str, ...]
    today: date
    soul: FileSnapshot | None
    context_file: FileSnapshot | None
    system_message: str | None
    memory_text: str
    memory_limit: int
    user_text: str
    user_limit: int
    skills_index: tuple[SkillEntry, ...]
    platform_hint: ResolvedHint
    tool_use_enforcement: bool | str | tuple[str, ...]
    context_file_max_chars: int = 20000
    chat_text: str = ""
    chat_limit: int = 1000
    soul_max_chars: int = 20000


@dataclass(frozen=True, slots=True)
class BuiltPrompt:
    blocks: tuple[PromptBlock, ...]
    text: str  # the exact bytes to store and send

    def tiers_view(self) -> str:
        """Human view for `gateway prompt --tiers`: tier
        boundaries, each block's name, source and size."""
        out: list[str] = []
        for tier in TIERS:
            blocks = [b for b in self.blocks if b.tier == tier]
            size = sum(len(b.text) for b in blocks)
            out.append(f"=== {tier} tier: {len(blocks)} block(s), {size} chars ===")
            for b in blocks:
                out.append(f"--- {b.name} [{b.source}] {len(b.text)} chars ---")
                out.append(b.text)
            out.append("")
        out.append(f"=== total: {len(self.text)} chars ===")
        return "\n".join(out)


# ---- built-in texts ------------------------------------------------------------------------------

DEFAULT_IDENTITY = (
    "You are a personal assistant that people reach from their chat apps: Telegram, Discord, "
    "Slack, a web chat or a terminal. You are helpful, direct and honest. Answer what was asked, "
    "as briefly as the request allows; when something is ambiguous, make a sensible assumption and "
    "say which, or ask one focused question. Say plainly when you are unsure or cannot do "
    "something, and never invent facts, results or the outcome of a tool call. You keep a "
    "persistent memory across conversations, so treat the person you are talking to as someone you "
    "will talk to again."
)

MEMORY_GUIDANCE = (
    "You have a persistent memory (the memory tool): a profile of each person you talk to (target "
    "user: the person who sent the message), shared notes every conversation sees (target memory), "
    "and notes for a group chat (target chat). Save durable facts proactively, without being "
    "asked: the person's name, preferences and situation go in their own profile; decisions, "
    "corrections to how you work and facts about the setup go in the shared notes, when you may "
    "write them. Do not save one-off task details or anything you were asked to forget. Memory is "
    "loaded once when a conversation starts and stays frozen for that conversation, so what you "
    "save now shows up in the next one. Keep entries short and factual, and replace or remove an "
    "outdated entry instead of adding one that contradicts it."
)

SESSION_SEARCH_GUIDANCE = (
    "You can search past conversations with this user "
    "(the session_search tool). When they refer to "
    'something discussed before ("like last time", "the '
    'plan we made") or a question depends on earlier '
    "context you no longer see, search before answering "
    "rather than guessing or asking them to repeat it."
)

TOOL_USE_ENFORCEMENT = (
    "Act through your tools instead of describing what you would do. When a request needs a tool, "
    "call it in this same reply rather than announcing that you will. Never claim you saved, "
    "searched or loaded something unless the tool call succeeded; if a tool fails, say so and "
    "continue with what you have. Keep going until the task is done or you truly need the user's "
    "input."
)

GROUP_NOTE = (
    "This is a shared {kind}: several people may read and write here, so keep track of who is "
    "asking. Everyone present can read your replies, so do not bring up one person's private "
    "details from memory unless that person asks."
)

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


# ---- the builder ---------------------------------------------------------------------------------


def build_prompt(inputs: PromptInputs) -> BuiltPrompt:
    """The whole prompt for a new session. Pure: the only
    side effect is a WARNING when a file is blocked."""
    blocks = [*_stable(inputs), *_context(inputs), *_volatile(inputs)]
    kept = tuple(b for b in blocks if b.text.strip())
    return BuiltPrompt(blocks=kept, text="\n\n".join(b.text for b in kept))


def _stable(i: PromptInputs) -> list[PromptBlock]:
    tools = set(i.tool_names)
    blocks = [_identity(i)]
    if "memory" in tools:
        blocks.append(PromptBlock("stable", "tool_guidance:memory", "built-in", MEMORY_GUIDANCE))
    if "session_search" in tools:
        blocks.append(
            PromptBlock(
                "stable", "tool_guidance:session_search", "built-in", SESSION_SEARCH_GUIDANCE
            )
        )
    if tools & set(SKILL_TOOLS):
        text = skills_guidance(tools, bool(i.skills_index))
        blocks.append(PromptBlock("stable", "tool_guidance:skills", "built-in", text))
    if tools and enforcement_applies(i.tool_use_enforcement, i.model_name):
        blocks.append(PromptBlock("stable", "tool_enforcement", "built-in", TOOL_USE_ENFORCEMENT))
    if tools & set(SKILL_TOOLS):
        blocks.append(
            PromptBlock("stable", "skills_index", "skills/", render_skills_index(i.skills_index))
        )
    blocks.append(
        PromptBlock("stable", "platform_hint", i.platform_hint.source, i.platform_hint.text.strip())
    )
    if i.chat_type in ("group", "channel"):
        blocks.append(
            PromptBlock("stable", "chat_type", "built-in", GROUP_NOTE.format(kind=i.chat_type))
        )
    return blocks


def _identity(i: PromptInputs) -> PromptBlock:
    if i.soul is None or not i.soul.text.strip():
        return PromptBlock("stable", "identity", "built-in", DEFAULT_IDENTITY)
    notice = blocked_notice(i.soul)
    if notice is not None:
        # A poisoned SOUL.md must not leave the agent without an identity: fall back, and say why.
        return PromptBlock(
            "stable",
            "identity",
            f"built-in ({i.soul.path} blocked)",
            f"{DEFAULT_IDENTITY}\n\n{notice}",
        )
    text = truncate(i.soul.text.strip(), i.soul_max_chars, display_name(i.soul.path))
    return PromptBlock("stable", "identity", str(i.soul.path), text)


def skills_guidance(tools: set[str], has_skills: bool) -> str:
    if has_skills:
        parts = [
            (
                "You have a library of skills: saved instructions for tasks done before, listed by "
                "category in <available_skills> below."
            )
        ]
        if "skill_view" in tools:
            parts.append(
                "When a task matches a skill, load it with "
                "skill_view and follow it before improvising."
            )
    else:
        parts = [
            (
                "You can keep a library of skills: saved instructions "
                "for recurring tasks. None are saved yet."
            )
        ]
    if "skill_manage" in tools:
        parts.append(
            "After working out a multi-step task that is likely to come up again, save it as a "
            "skill with skill_manage, and patch a skill when you find it wrong or outdated."
        )
    return " ".join(parts)


def enforcement_applies(setting: bool | str | tuple[str, ...] | list[str], model_name: str) -> bool:
    """agent.tool_use_enforcement: "auto" (known families),
    True (always), False (never), or substrings."""
    if isinstance(setting, bool):
        return setting
    if isinstance(setting, str):
        if setting.lower() != "auto":
            raise ValueError(
                f"tool_use_enforcement: expected auto, true, false or a list; got {setting!r}"
            )
        setting = AUTO_ENFORCEMENT
    model = model_name.lower()
    return any(s.lower() in model for s in setting if s)


def render_skills_index(skills: tuple[SkillEntry, ...]) -> str:
    """`<available_skills>` grouped by category, sorted,
    one line per skill (bodies load on demand)."""
    if not skills:
        return ""
    lines = ["<available_skills>"]
    category = None
    for s in sorted(skills, key=lambda s: (s.category or "general", s.name)):
        if (s.category or "general") != category:
            category = s.category or "general"
            lines.append(f"{category}:")
        lines.append(f"  - {s.name}: {_one_line(s.description)}")
    lines.append("</available_skills>")
    return "\n".join(lines)


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _context(i: PromptInputs) -> list[PromptBlock]:
    blocks = [PromptBlock("context", "system_message", "config", (i.system_message or "").strip())]
    f = i.context_file
    if f is not None and f.text.strip():
        notice = blocked_notice(f)
        if notice is not None:
            blocks.append(PromptBlock("context", "context_file", f"{f.path} (blocked)", notice))
        else:
            name = display_name(f.path)
            body = truncate(f.text.strip(), i.context_file_max_chars, name)
            text = f"Project instructions from {name} (in {_project_dir(f.path)}):\n\n{body}"
            blocks.append(PromptBlock("context", "context_file", str(f.path), text))
    return blocks


def blocked_notice(f: FileSnapshot) -> str | None:
    """The one-line replacement for a file that failed the threat scan, or None when it is clean."""
    findings = scan_text(f.text)
    if not findings:
        return None
    log.warning("blocked %s: %s", f.path, "; ".join(str(x) for x in findings))
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    return f"[BLOCKED: {display_name(f.path)} — {findings[0].label}{more}; the file was not loaded]"


def display_name(path: Path) -> str:
    """`AGENTS.md`, or `.cursor/rules/*.mdc` for the concatenated Cursor rules."""
    return ".cursor/rules/*.mdc" if _is_cursor_rules(path) else path.name


def _project_dir(path: Path) -> Path:
    return path.parent.parent if _is_cursor_rules(path) else path.parent


def _is_cursor_rules(path: Path) -> bool:
    return path.name == "rules" and path.parent.name == ".cursor"


def truncate(text: str, cap: int, name: str) -> str:
    """Over `cap`: the first 70 % and the last 20 % of
    the cap, with a marker line saying what was cut."""
    if len(text) <= cap:
        return text
    head, tail = cap * 7 // 10, cap * 2 // 10
    cut = len(text) - head - tail
    marker = (
        f"[… {cut} of {len(text)} chars of {name} cut here; first {head} and last {tail} kept …]"
    )
    return f"{text[:head]}\n{marker}\n{text[len(text) - tail :]}"


def _volatile(i: PromptInputs) -> list[PromptBlock]:
    return [
        PromptBlock(
            "volatile",
            "memory_snapshot",
            "memories/MEMORY.md",
            _snapshot("MEMORY (your notes)", i.memory_text, i.memory_limit),
        ),
        PromptBlock(
            "volatile",
            "user_snapshot",
            "memories/people/",
            _snapshot("USER PROFILE (who the user is)", i.user_text, i.user_limit),
        ),
        PromptBlock(
            "volatile",
            "chat_snapshot",
            "memories/chats/",
            _snapshot(
                "CHAT NOTES (this group only; written by its members)", i.chat_text, i.chat_limit
            ),
        ),
        PromptBlock(
            "volatile",
            "conversation_started",
            "date",
            f"Conversation started: {format_date(i.today)}",
        ),
        PromptBlock(
            "volatile", "model", "config", f"Model: {i.model_name} (provider: {i.provider})"
        ),
    ]


def _snapshot(title: str, text: str, limit: int) -> str:
    body = text.strip()
    if not body:
        return ""
    return f"{title} {usage(len(body), limit)}\n{body}"


def usage(used: int, limit: int) -> str:
    """`[41% — 903/2200 chars]`; floor, so 100 % means really full."""
    if limit <= 0:
        return f"[{used} chars]"
    return f"[{100 * used // limit}% — {used}/{limit} chars]"


def format_date(day: date) -> str:
    """`Sunday, November 29, 2026` in English whatever the process locale."""
    return f"{_WEEKDAYS[day.weekday()]}, {_MONTHS[day.month - 1]} {day.day}, {day.year}"


# ---- files ---------------------------------------------------------------------------------------

CONTEXT_FILES = ("AGENTS.md", "CLAUDE.md", ".cursorrules")


def find_context_file(workdir: Path) -> FileSnapshot | None:
    """The one project context file for `workdir`; first non-empty found wins.

    `.gateway.md` in workdir or any parent up to the git root (nearest first), then `AGENTS.md`,
    `CLAUDE.md`, `.cursorrules` in workdir, then `.cursor/rules/*.mdc` (sorted, concatenated).
    YAML front matter is stripped from `.gateway.md` and `.mdc` files.
    """
    for directory in _up_to_git_root(workdir):
        snap = _read(directory / ".gateway.md", front_matter=True)
        if snap is not None:
            return snap
    for name in CONTEXT_FILES:
        snap = _read(workdir / name, front_matter=False)
        if snap is not None:
            return snap
    return _cursor_rules(workdir / ".cursor" / "rules")


def load_soul(home: Path) -> FileSnapshot | None:
    """`SOUL.md` in the gateway home, or None (missing or blank) for the built-in identity."""
    return _read(home / "SOUL.md", front_matter=False)


def load_soul_file(path: Path) -> FileSnapshot | None:
    """An agent's own identity file (`agents.<name>.soul`), or None (missing or blank)."""
    return _read(path, front_matter=False)


def _up_to_git_root(workdir: Path) -> list[Path]:
    """workdir and its parents up to the one holding
    `.git`; only workdir when it is not inside a repo."""
    chain: list[Path] = []
    for directory in (workdir, *workdir.parents):
        chain.append(directory)
        if (directory / ".git").exists():
            return chain
    return [workdir]


def _read(path: Path, *, front_matter: bool) -> FileSnapshot | None:
    try:
        if not path.is_file():
            return None
        # utf-8-sig drops a leading BOM (editors add it),
        # which the scan would otherwise flag as U+FEFF.
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    if front_matter:
        text = strip_front_matter(text)
    return FileSnapshot(path, text) if text.strip() else None


def _cursor_rules(rules: Path) -> FileSnapshot | None:
    try:
        files = sorted(p for p in rules.glob("*.mdc") if p.is_file())
    except OSError:
        return None
    texts = [s.text.strip() for s in (_read(p, front_matter=True) for p in files) if s is not None]
    return FileSnapshot(rules, "\n\n".join(texts)) if texts else None


def strip_front_matter(text: str) -> str:
    """Drop a leading `---` … `---` (or `...`) YAML
    block; leave the text alone if it is not closed."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n").rstrip() != "---":
        return text
    for n, line in enumerate(lines[1:], start=1):
        if line.rstrip("\r\n").rstrip() in ("---", "..."):
            return "".join(lines[n + 1 :]).lstrip("\r\n")
    return text
