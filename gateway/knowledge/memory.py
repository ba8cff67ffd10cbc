"""Persistent memory in scopes: the shared notes (MEMORY.md), one profile per person
(people/<id>.md) and, for groups and channels, notes per chat (chats/<chat>.md). Edited by the
memory tool (gateway/agent/tools/memory.py) and the pre-reset flush, within what `MemoryRights`
allows the caller.

Writes change the files at once; a running session's prompt keeps the snapshot it was built with,
because the provider's prompt cache depends on that prompt never changing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gateway.errors import ToolError
from gateway.events import MAIN_AGENT
from gateway.knowledge.files import FileLock, atomic_write
from gateway.scan import describe, scan_text

Target = Literal["memory", "user", "chat"]
SEPARATOR = "§"
SHARED_FILE = "MEMORY.md"
AGENTS_DIR = "agents"
# the one global profile of earlier versions (see gateway/knowledge/people.py)
LEGACY_USER_FILE = "USER.md"


@dataclass(frozen=True, slots=True)
class MemoryRights:
    """What one caller's memory tool may write, decided by policy (gateway/access/roles.py).

    `person_id` is whose profile `target: user` writes (None: nobody's, e.g. a shared conversation's
    flush); `chat` is this conversation's chat-notes key (groups and channels, when chat notes are
    on); `own_conversation` says the conversation is that person's own (a DM, their own session in a
    group), so a tool result may quote their profile: in a shared one it would stay in a transcript
    the others' requests carry.
    """

    person_id: int | None = None
    own_conversation: bool = False
    shared: bool = False
    chat: str | None = None
    chat_writable: bool = False
    shared_policy: str = "admins"
    chat_policy: str = "everyone"


@dataclass(frozen=True, slots=True)
class MemoryView:
    """Whose memory a session's prompt shows besides the shared notes: its owner's profile, its
    chat's notes."""

    person_id: int | None = None
    chat: str | None = None


NO_RIGHTS = MemoryRights()  # deny by default: a caller nobody vouched for writes nothing
NO_VIEW = MemoryView()  # the shared notes only


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


def agent_memories(memories: Path, agent: str) -> Path:
    """An agent's memory folder (shared notes, chat notes, profiles, skills):
    `memories/agents/<name>/`. The agent `main` keeps `memories/` itself, where a home from before
    agents has its files."""
    return memories if agent == MAIN_AGENT else memories / AGENTS_DIR / agent


def chat_key(platform: str, chat_id: str) -> str:
    return f"{platform}:{chat_id}"


def _file_name(key: str) -> str:
    """A chat key as a file name: safe characters kept,
    anything else as %XX (so two keys never collide)."""
    return (
        re.sub(r"[^A-Za-z0-9_.-]", lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), key)
        + ".md"
    )


class MemoryFile:
    """One memory file (a scope's entries, separated by § lines) with its character limit."""

    def __init__(
        self,
        path: Path,
        limit: int,
        label: str,
        lock: FileLock,
        erased: Callable[[], bool] = lambda: False,
    ) -> None:
        self.path = path
        self.limit = limit
        self.label = label
        self._lock = lock
        # asked under the lock: a write that comes after the erasure is refused
        self._erased = erased

    def read(self) -> str:
        """The whole file as it is now ("" when absent): what a new session's prompt snapshots.

        A hand edit in another encoding must not stop every new session from starting: bad bytes
        read as U+FFFD.
        """
        try:
            return self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def entries(self) -> tuple[str, ...]:
        return tuple(parse(self.read()))

    def usage(self) -> tuple[int, int]:
        return len(render(self.entries())), self.limit

    def add(self, content: str) -> tuple[int, int]:
        content = _clean(content)
        with self._lock.hold():
            entries = parse(self.read())
            _refuse_duplicate(content, entries)
            return self._write(entries, [*entries, content], len(content))

    def replace(self, old_text: str, content: str, *, quote: bool = True) -> tuple[int, int]:
        """`quote`: an ambiguous `old_text` is answered with
        the entries it matches (False: only how many)."""
        content = _clean(content)
        with self._lock.hold():
            entries = parse(self.read())
            i = _find_one(old_text, entries, self.label, quote)
            _refuse_duplicate(content, entries[:i] + entries[i + 1 :])
            new = [*entries[:i], content, *entries[i + 1 :]]
            return self._write(entries, new, len(content))

    def remove(self, old_text: str, *, quote: bool = True) -> tuple[int, int]:
        with self._lock.hold():
            entries = parse(self.read())
            i = _find_one(old_text, entries, self.label, quote)
            return self._write(entries, entries[:i] + entries[i + 1 :], 0)

    def absorb(self, other: MemoryFile) -> int:
        """Append `other`'s entries that are not here yet, then delete it (two profiles become one);
        returns how many were added. The limit is not checked: nothing is lost, and an over-full
        file can be consolidated."""
        with self._lock.hold():
            mine = parse(self.read())
            keys = {_key(e) for e in mine}
            added = [e for e in parse(other.read()) if _key(e) not in keys]
            if added:
                atomic_write(self.path, render([*mine, *added]) + "\n")
            other.path.unlink(missing_ok=True)
        return len(added)

    def delete(self) -> bool:
        with self._lock.hold():
            existed = self.path.exists()
            self.path.unlink(missing_ok=True)
        return existed

    def _write(self, old: list[str], new: list[str], needed: int) -> tuple[int, int]:
        if self._erased():
            raise ToolError(
                f"Not saved: {self.label} belongs to a person who was forgotten (gateway users "
                "forget); nothing about them is kept."
            )
        limit = self.limit
        used, size = len(render(old)), len(render(new))
        # Growing past the limit is refused; shrinking is always allowed, so an over-full file can
        # be consolidated.
        if size > limit and size > used:
            room = max(limit - used, 0)
            raise ToolError(
                f"Not saved: {self.label} is at {used:,} of {limit:,} characters, {room:,} left, "
                f"and this entry needs {needed:,}. Consolidate first: merge or shorten entries "
                "with action=replace, or drop outdated ones with action=remove, then try again."
            )
        atomic_write(self.path, render(new) + "\n" if new else "")
        return size, limit


class MemoryStore:
    """The memory files under one directory, each scope with its own character limit, behind one
    lock.

    `people`: where the profiles are, when not in `directory/people` (an agent with `memory: shared`
    uses the home's, with the lock of the folder that holds them)."""

    def __init__(
        self,
        directory: Path,
        memory_char_limit: int = 2200,
        user_char_limit: int = 1375,
        chat_char_limit: int = 1000,
        *,
        people: Path | None = None,
        erased: set[int] | None = None,
    ) -> None:
        self.directory = directory
        self.limits: dict[Target, int] = {
            "memory": memory_char_limit,
            "user": user_char_limit,
            "chat": chat_char_limit,
        }
        self._lock = FileLock(directory / ".lock")
        self.people = people or directory / "people"
        self._people_lock = self._lock if people is None else FileLock(people.parent / ".lock")
        # people forgotten while this process runs (a turn of theirs may still): one set, all agents
        self._erased: set[int] = set() if erased is None else erased

    def shared(self) -> MemoryFile:
        return MemoryFile(
            self.directory / SHARED_FILE,
            self.limits["memory"],
            "the shared notes (MEMORY.md)",
            self._lock,
        )

    def profile(self, person_id: int) -> MemoryFile:
        pid = int(person_id)
        return MemoryFile(
            self.people / f"{pid}.md",
            self.limits["user"],
            f"the user profile (people/{pid}.md)",
            self._people_lock,
            lambda: pid in self._erased,
        )

    def erase_profile(self, person_id: int) -> bool:
        """A forgotten person's profile goes, and stays gone: a turn of theirs still running in this
        process cannot write it again (the check and the delete both hold the lock)."""
        self._erased.add(int(person_id))
        deleted = [f.delete() for f in self.profiles_everywhere(person_id)]  # all, not the first
        return any(deleted)

    def profiles_everywhere(self, person_id: int) -> list[MemoryFile]:
        """The person's profile in this folder and in each agent's (`agents/*/people/`): what
        forgetting them deletes and linking them merges. Asked of the home's memory folder."""
        pid = int(person_id)
        agents = (self.directory / AGENTS_DIR).glob("*")
        folders = sorted(p / "people" for p in agents if p.is_dir())
        return [
            self.profile(pid),
            *(
                MemoryFile(
                    f / f"{pid}.md",
                    self.limits["user"],
                    f"the user profile ({f})",
                    FileLock(f.parent / ".lock"),
                    lambda: pid in self._erased,
                )
                for f in folders
            ),
        ]

    def chat(self, key: str) -> MemoryFile:
        name = _file_name(key)
        return MemoryFile(
            self.directory / "chats" / name,
            self.limits["chat"],
            f"this chat's notes (chats/{name})",
            self._lock,
        )

    def legacy_user(self) -> Path:
        return self.directory / LEGACY_USER_FILE

    def snapshot(self, view: MemoryView) -> tuple[str, str, str]:
        """(shared notes, the owner's profile, the chat's notes) as they are now; "" for a scope not
        in view."""
        return (
            self.shared().read(),
            self.profile(view.person_id).read() if view.person_id is not None else "",
            self.chat(view.chat).read() if view.chat is not None else "",
        )


def _clean(content: str) -> str:
    content = content.strip()
    if not content:
        raise ToolError("Not saved: the entry is empty.")
    if any(line.strip() == SEPARATOR for line in content.splitlines()):
        raise ToolError(
            f"Not saved: a line holding only {SEPARATOR} "
            "separates entries; save one entry per call."
        )
    findings = scan_text(content, strict=True)
    if findings:
        raise ToolError(
            f"Not saved: the entry was refused by the safety scan ({describe(findings)}). Memory "
            "is injected into future system prompts, so it must not hold instructions to the "
            "assistant, secrets, or instructions to send data anywhere. Save plain facts only."
        )
    return content


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def _refuse_duplicate(content: str, entries: list[str]) -> None:
    if any(_key(e) == _key(content) for e in entries):
        raise ToolError("Not saved: this entry is already in memory.")


def _find_one(old_text: str, entries: list[str], label: str, quote: bool = True) -> int:
    """Index of the one entry containing `old_text` (an exact whole-entry match wins a tie)."""
    needle = old_text.strip()
    if not needle:
        raise ToolError("old_text is empty: give a unique part of the entry to change.")
    hits = [i for i, e in enumerate(entries) if needle in e]
    if len(hits) > 1:
        exact = [i for i in hits if entries[i] == needle]
        if len(exact) == 1:
            return exact[0]
        if not quote:
            raise ToolError(
                f"old_text {needle!r} matches {len(hits)} entries in {label}. Use a longer part of "
                "the one you mean (its entries are not quoted here: this conversation is shared)."
            )
        listed = "; ".join(f"{n}. {_brief(entries[i])}" for n, i in enumerate(hits, 1))
        raise ToolError(
            f"old_text {needle!r} matches {len(hits)} entries in {label}: {listed}. "
            "Use a longer part of the one you mean."
        )
    if not hits:
        raise ToolError(f"No entry in {label} contains {needle!r}.")
    return hits[0]


def _brief(entry: str, width: int = 60) -> str:
    flat = " ".join(entry.split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")
