"""Skills: `skills/<category>/<name>/SKILL.md` files with YAML front matter, read and edited by
the skill tools (gateway/agent/tools/skills.py).

The prompt gets only the index (names and descriptions), cached on the files' mtimes and sizes so a
new session pays a few stat calls; bodies are loaded on demand by `skill_view`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gateway.errors import ToolError
from gateway.knowledge.files import FileLock, atomic_write
from gateway.scan import describe, scan_text

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
SKILL_FILE = "SKILL.md"
MAX_SKILL_CHARS = 20_000
MAX_DESCRIPTION_CHARS = 500
DEFAULT_CATEGORY = "general"

# (category, name, inode, mtime_ns, size): the inode catches a same-size rewrite within one mtime
# tick, since every write here replaces the file by rename.
Manifest = tuple[tuple[str, str, int, int, int], ...]


@dataclass(frozen=True, slots=True)
class SkillEntry:
    """One line of the prompt's skills index."""

    category: str
    name: str
    description: str


@dataclass(frozen=True, slots=True)
class Skill:
    category: str
    name: str
    meta: dict[str, Any]
    body: str

    @property
    def description(self) -> str:
        return str(self.meta.get("description", ""))

    def render(self) -> str:
        meta = {
            "name": self.name,
            "description": self.description,
            **{k: v for k, v in self.meta.items() if k not in ("name", "description")},
        }
        front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=10_000)
        return f"---\n{front}---\n\n{self.body.strip()}\n"


class SkillLibrary:
    """The skills directory of one gateway home (`skills/`), or of one of its agents (`folder`,
    inside it)."""

    def __init__(
        self, home: Path, *, max_chars: int = MAX_SKILL_CHARS, folder: Path | None = None
    ) -> None:
        inside = Path("skills") if folder is None else folder.relative_to(home)
        self.root = home / inside
        # Where every skill file must really be: symbolic links already in the folder (or the folder
        # itself linked elsewhere) must not carry a read or a write outside the home.
        self._real_root = home.resolve() / inside
        self.max_chars = max_chars
        self.builds = 0  # how many times the index was rebuilt from file contents; tests read it
        self._cache: tuple[Manifest, tuple[SkillEntry, ...]] | None = None
        self._cache_lock = threading.Lock()
        self._write_lock = FileLock(self.root / ".lock")

    def index(self) -> tuple[SkillEntry, ...]:
        """Every readable skill, sorted by category then
        name; rebuilt only when a SKILL.md changed."""
        manifest = self._manifest()
        with self._cache_lock:
            if self._cache is not None and self._cache[0] == manifest:
                return self._cache[1]
            entries = tuple(e for c, n, *_ in manifest if (e := self._entry(c, n)) is not None)
            self._cache = (manifest, entries)
            self.builds += 1
            return entries

    def _manifest(self) -> Manifest:
        found: list[tuple[str, str, int, int, int]] = []
        for category in _subdirs(self.root):
            for name in _subdirs(self.root / category):
                path = self.root / category / name / SKILL_FILE
                try:
                    st = os.stat(self._confined(path))
                except (OSError, ToolError):
                    continue
                found.append((category, name, st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(sorted(found))

    def _entry(self, category: str, name: str) -> SkillEntry | None:
        try:
            skill = self._load(category, name)
        except (OSError, ToolError) as e:
            log.warning("skill skipped: %s/%s: %s", category, name, e)
            return None
        return SkillEntry(category, name, " ".join(skill.description.split()))

    def _confined(self, path: Path) -> Path:
        """`path`, if it resolves inside the home's skills folder; a ToolError otherwise."""
        if not path.resolve().is_relative_to(self._real_root):
            shown = (
                path.relative_to(self.root.parent)
                if path.is_relative_to(self.root.parent)
                else path
            )
            raise ToolError(
                f"Refused: {shown} leads outside the gateway home through a symbolic link; skills "
                "are read and written only inside its skills folder."
            )
        return path

    def _load(self, category: str, name: str) -> Skill:
        text = self._confined(self.root / category / name / SKILL_FILE).read_text(encoding="utf-8")
        meta, body = split_front_matter(text)
        if meta is None or not str(meta.get("description", "")).strip():
            raise ToolError(f"{SKILL_FILE} has no front matter with a description")
        return Skill(category, name, meta, body)

    def find(self, name: str, category: str | None = None) -> Skill:
        """The skill called `name` (or `category/name`); names may repeat across categories."""
        if category is None and "/" in name:
            category, name = name.split("/", 1)
        _check_name("name", name)
        if category is not None:
            _check_name("category", category)
        homes = [
            c
            for c in ([category] if category else _subdirs(self.root))
            if (self.root / c / name / SKILL_FILE).is_file()
        ]
        if not homes:
            known = ", ".join(f"{e.category}/{e.name}" for e in self.index()[:30]) or "none yet"
            raise ToolError(f"No skill named {name!r}. Skills: {known}.")
        if len(homes) > 1:
            raise ToolError(
                f"Several skills are named {name!r} (categories: {', '.join(homes)}); "
                "give the category too."
            )
        return self._load(homes[0], name)

    def view(self, name: str, category: str | None = None) -> str:
        skill = self.find(name, category)
        return f"Skill {skill.category}/{skill.name}: {skill.description}\n\n{skill.body.strip()}"

    def create(
        self, category: str, name: str, content: str, description: str | None = None
    ) -> Skill:
        _check_name("category", category)
        _check_name("name", name)
        self._confined(self.root / category / name / SKILL_FILE)
        self._confined(self.root / ".lock")
        with self._write_lock.hold():
            existing = [
                c for c in _subdirs(self.root) if (self.root / c / name / SKILL_FILE).is_file()
            ]
            if existing:
                raise ToolError(
                    f"A skill named {name!r} already exists in {existing[0]}; use action=patch."
                )
            meta, body = split_front_matter(content)
            skill = Skill(category, name, dict(meta or {}), body)
            return self._save(skill, description)

    def patch(
        self,
        name: str,
        *,
        category: str | None = None,
        content: str | None = None,
        old_text: str | None = None,
        description: str | None = None,
    ) -> Skill:
        self._confined(self.root / ".lock")
        with self._write_lock.hold():
            skill = self.find(name, category)
            if old_text is not None:
                text = _replace_once(skill.render(), old_text, content or "")
                meta, body = split_front_matter(text)
                skill = Skill(skill.category, skill.name, dict(meta or {}), body)
            elif content is not None:
                meta, body = split_front_matter(content)
                skill = Skill(skill.category, skill.name, {**skill.meta, **(meta or {})}, body)
            return self._save(skill, description)

    def delete(self, name: str, category: str | None = None) -> Skill:
        self._confined(self.root / ".lock")
        with self._write_lock.hold():
            skill = self.find(name, category)
            folder = self._confined(self.root / skill.category / skill.name)
            if folder.is_symlink():
                raise ToolError(
                    f"Refused: skills/{skill.category}/{skill.name} is a symbolic link; delete it "
                    "by hand if it should go."
                )
            shutil.rmtree(folder)
            try:
                (self.root / skill.category).rmdir()
            except OSError:
                pass  # other skills still live in this category
            return skill

    def _save(self, skill: Skill, description: str | None) -> Skill:
        meta = dict(skill.meta)
        if description is not None:
            meta["description"] = description
        meta["description"] = " ".join(str(meta.get("description") or "").split())
        skill = Skill(skill.category, skill.name, meta, skill.body)
        _validate(skill, self.max_chars)
        atomic_write(
            self._confined(self.root / skill.category / skill.name / SKILL_FILE), skill.render()
        )
        return skill


def split_front_matter(text: str) -> tuple[dict[str, Any] | None, str]:
    """(front matter, body); (None, text) when the text has no `---` block at the top."""
    if not text.lstrip("\ufeff").startswith("---"):
        return None, text
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if lines[0].strip() != "---":
        return None, text
    for i, line in enumerate(lines[1:], 1):
        if line.strip() == "---":
            try:
                meta = yaml.safe_load("".join(lines[1:i]))
            except yaml.YAMLError as e:
                raise ToolError(f"The front matter is not valid YAML: {e}") from None
            if meta is None:
                meta = {}
            if not isinstance(meta, dict):
                raise ToolError("The front matter must be a YAML mapping (name, description).")
            return {str(k): v for k, v in meta.items()}, "".join(lines[i + 1 :])
    raise ToolError("The front matter opened with --- is never closed by a --- line.")


def _validate(skill: Skill, max_chars: int) -> None:
    if not skill.description:
        raise ToolError(
            "A skill needs a description (the description parameter or front matter); "
            "it is what the skills index shows."
        )
    if len(skill.description) > MAX_DESCRIPTION_CHARS:
        raise ToolError(
            f"The description is {len(skill.description):,} characters; keep it under "
            f"{MAX_DESCRIPTION_CHARS} (one line for the index)."
        )
    if not skill.body.strip():
        raise ToolError("The skill body is empty.")
    text = skill.render()
    if len(text) > max_chars:
        raise ToolError(
            f"The skill is {len(text):,} characters; the limit is {max_chars:,}. Make it shorter."
        )
    findings = scan_text(text, strict=True)
    if findings:
        raise ToolError(
            f"Not saved: the skill was refused by the safety scan ({describe(findings)}). Skills "
            "are trusted as instructions later, so they must hold no secrets, no attempts to "
            "override instructions and no instructions to send data anywhere."
        )


def _replace_once(text: str, old_text: str, new_text: str) -> str:
    count = text.count(old_text) if old_text else 0
    if count != 1:
        problem = "does not appear" if count == 0 else f"appears {count} times"
        raise ToolError(f"old_text {problem} in the skill; give an exact, unique part of it.")
    return text.replace(old_text, new_text, 1)


def _check_name(what: str, value: str) -> None:
    if not NAME_RE.match(value):
        raise ToolError(
            f"Invalid skill {what} {value!r}: use 1-64 lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit."
        )


def _subdirs(path: Path) -> list[str]:
    try:
        with os.scandir(path) as it:
            return sorted(e.name for e in it if e.is_dir() and NAME_RE.match(e.name))
    except OSError:
        return []
