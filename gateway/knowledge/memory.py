"""Persistent memory: MEMORY.md (the agent's notes) and USER.md (who the user is), edited by the memory tool
(gateway/agent/tools/memory.py) and the pre-reset flush.

Writes change the files at once; a running session's prompt keeps the snapshot it was built with,
because the provider's prompt cache depends on that prompt never changing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gateway.errors import ToolError
from gateway.knowledge.files import FileLock, atomic_write
from gateway.scan import describe, scan_text

Target = Literal["memory", "user"]
SEPARATOR = "§"
FILES: dict[Target, str] = {"memory": "MEMORY.md", "user": "USER.md"}
LABELS: dict[Target, str] = {"memory": "your notes (MEMORY.md)", "user": "the user profile (USER.md)"}


def render(entries: list[str] | tuple[str, ...]) -> str:
    """The file body for `entries`; its length is what counts against the limit."""
    return f"\n{SEPARATOR}\n".join(entries)


def parse(text: str) -> list[str]:
    entries: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.strip() == SEPARATOR:
            entries.append("\n".join(current).strip())
            current = []
        else:
            current.append(line)
    entries.append("\n".join(current).strip())
    return [e for e in entries if e]


class MemoryStore:
    """The two memory files under one directory, each with its own character limit."""

    def __init__(self, directory: Path, memory_char_limit: int = 2200, user_char_limit: int = 1375) -> None:
        self.directory = directory
        self._limits: dict[Target, int] = {"memory": memory_char_limit, "user": user_char_limit}
        self._lock = FileLock(directory / ".lock")

    def path(self, target: Target) -> Path:
        return self.directory / FILES[target]

    def read(self, target: Target) -> str:
        """The whole file as it is now ("" when absent): what a new session's prompt snapshots.

        A hand edit in another encoding must not stop every new session from starting: bad bytes read as U+FFFD.
        """
        try:
            return self.path(target).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def entries(self, target: Target) -> tuple[str, ...]:
        return tuple(parse(self.read(target)))

    def usage(self, target: Target) -> tuple[int, int]:
        return len(render(self.entries(target))), self._limits[target]

    def add(self, target: Target, content: str) -> tuple[int, int]:
        content = _clean(content)
        with self._lock.hold():
            entries = parse(self.read(target))
            _refuse_duplicate(content, entries)
            return self._write(target, entries, [*entries, content], len(content))

    def replace(self, target: Target, old_text: str, content: str) -> tuple[int, int]:
        content = _clean(content)
        with self._lock.hold():
            entries = parse(self.read(target))
            i = _find_one(old_text, entries, target)
            _refuse_duplicate(content, entries[:i] + entries[i + 1:])
            new = [*entries[:i], content, *entries[i + 1:]]
            return self._write(target, entries, new, len(content))

    def remove(self, target: Target, old_text: str) -> tuple[int, int]:
        with self._lock.hold():
            entries = parse(self.read(target))
            i = _find_one(old_text, entries, target)
            return self._write(target, entries, entries[:i] + entries[i + 1:], 0)

    def _write(self, target: Target, old: list[str], new: list[str], needed: int) -> tuple[int, int]:
        limit = self._limits[target]
        used, size = len(render(old)), len(render(new))
        # Growing past the limit is refused; shrinking is always allowed, so an over-full file can be consolidated.
        if size > limit and size > used:
            room = max(limit - used, 0)
            raise ToolError(
                f"Not saved: {LABELS[target]} is at {used:,} of {limit:,} characters, {room:,} left, and this "
                f"entry needs {needed:,}. Consolidate first: merge or shorten entries with action=replace, or "
                f"drop outdated ones with action=remove, then try again.")
        atomic_write(self.path(target), render(new) + "\n" if new else "")
        return size, limit


def _clean(content: str) -> str:
    content = content.strip()
    if not content:
        raise ToolError("Not saved: the entry is empty.")
    if any(line.strip() == SEPARATOR for line in content.splitlines()):
        raise ToolError(f"Not saved: a line holding only {SEPARATOR} separates entries; save one entry per call.")
    findings = scan_text(content, strict=True)
    if findings:
        raise ToolError(
            f"Not saved: the entry was refused by the safety scan ({describe(findings)}). Memory is injected "
            "into future system prompts, so it must not hold instructions to the assistant, secrets, or "
            "instructions to send data anywhere. Save plain facts only.")
    return content


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def _refuse_duplicate(content: str, entries: list[str]) -> None:
    if any(_key(e) == _key(content) for e in entries):
        raise ToolError("Not saved: this entry is already in memory.")


def _find_one(old_text: str, entries: list[str], target: Target) -> int:
    """Index of the one entry containing `old_text` (an exact whole-entry match wins a tie)."""
    needle = old_text.strip()
    if not needle:
        raise ToolError("old_text is empty: give a unique part of the entry to change.")
    hits = [i for i, e in enumerate(entries) if needle in e]
    if len(hits) > 1:
        exact = [i for i in hits if entries[i] == needle]
        if len(exact) == 1:
            return exact[0]
        listed = "; ".join(f"{n}. {_brief(entries[i])}" for n, i in enumerate(hits, 1))
        raise ToolError(f"old_text {needle!r} matches {len(hits)} entries in {LABELS[target]}: {listed}. "
                        "Use a longer part of the one you mean.")
    if not hits:
        raise ToolError(f"No entry in {LABELS[target]} contains {needle!r}.")
    return hits[0]


def _brief(entry: str, width: int = 60) -> str:
    flat = " ".join(entry.split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")
