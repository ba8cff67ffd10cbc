"""Platform hints and rendering facts from `platform_hints.yaml`,
and the user's append/replace override.

Loading validates the whole file and locates every problem by file, line and key; it never falls
back silently. Parsing the user's override out of config.yaml is config.py's job; this module only
applies it.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from gateway.config.yamlload import parse_yaml_text
from gateway.errors import ConfigError, ConfigErrors
from gateway.events import PLATFORMS

HINTS_FILE = "platform_hints.yaml"
LENGTH_UNITS = ("utf16", "chars")
# markdown = pass the model's Markdown through unchanged (the client renders it); plain = strip it.
FLAVORS = ("telegram", "discord", "slack", "markdown", "plain")
_FIELDS = ("hint", "max_length", "length_unit", "flavor", "max_lines")
_REQUIRED = ("hint", "max_length", "length_unit", "flavor")
_Err = Callable[[yaml.Node, "str | None", str], None]  # records one located problem


@dataclass(frozen=True, slots=True)
class PlatformFacts:
    name: str
    hint: str
    max_length: int
    length_unit: str  # "utf16" | "chars"
    flavor: str  # one of FLAVORS
    max_lines: int | None = None
    source: str = HINTS_FILE  # shown by `gateway prompt --tiers`


@dataclass(frozen=True, slots=True)
class HintOverride:
    """From config `platform_hints.<platform>`; a bare string in YAML means append."""

    append: str | None = None
    replace: str | None = None


@dataclass(frozen=True, slots=True)
class ResolvedHint:
    text: str
    source: str


def resolve_hint(facts: PlatformFacts, override: HintOverride | None) -> ResolvedHint:
    """Replace first, then append; an empty replace removes the hint altogether."""
    if override is None or (override.replace is None and not (override.append or "").strip()):
        return ResolvedHint(facts.hint, facts.source)
    if override.replace is not None:
        text, source = override.replace.strip(), "config override (replace)"
    else:
        text, source = facts.hint, f"{facts.source} + config override"
    extra = (override.append or "").strip()
    if extra:
        text = f"{text}\n\n{extra}" if text else extra
        if override.replace is not None:
            source = "config override (replace + append)"
    return ResolvedHint(text, source)


def load_platform_facts(path: Path | None = None) -> dict[str, PlatformFacts]:
    """Facts for every platform in events.PLATFORMS,
    from `path` or the copy shipped in the package."""
    if path is None:
        resource = importlib.resources.files("gateway.prompt").joinpath(HINTS_FILE)
        text, name, source = resource.read_text(encoding="utf-8"), HINTS_FILE, HINTS_FILE
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read: {exc}", file=str(path)) from None
        name = source = str(path)
    return parse_platform_facts(text, file=name, source=source)


def parse_platform_facts(
    text: str, *, file: str, source: str = HINTS_FILE
) -> dict[str, PlatformFacts]:
    root = parse_yaml_text(text, file)
    errors: list[ConfigError] = []

    def err(node: yaml.Node, key: str | None, message: str) -> None:
        errors.append(ConfigError(message, file=file, line=node.start_mark.line + 1, key=key))

    facts: dict[str, PlatformFacts] = {}
    if not isinstance(root, yaml.MappingNode):
        line = root.start_mark.line + 1 if root is not None else 1
        raise ConfigError(
            "expected a mapping of platform name to its hint and facts", file=file, line=line
        )
    for knode, vnode in root.value:
        platform = knode.value if isinstance(knode, yaml.ScalarNode) else str(knode.value)
        if platform not in PLATFORMS:
            err(knode, platform, f"unknown platform (known: {', '.join(PLATFORMS)})")
        elif platform in facts:
            err(knode, platform, "duplicate platform")
        else:
            entry = _entry(platform, knode, vnode, err, source)
            if entry is not None:
                facts[platform] = entry
    for platform in PLATFORMS:
        if platform not in facts and not any(
            e.key and e.key.split(".")[0] == platform for e in errors
        ):
            err(root, platform, "platform is missing")
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(sorted(errors, key=lambda e: e.line or 0))
    return {p: facts[p] for p in PLATFORMS}


def _entry(
    platform: str, where: yaml.Node, node: yaml.Node, err: _Err, source: str
) -> PlatformFacts | None:
    if not isinstance(node, yaml.MappingNode):
        err(node, platform, "expected a mapping with hint, max_length, length_unit, flavor")
        return None
    values: dict[str, object] = {}
    ok = True
    for knode, vnode in node.value:
        field = knode.value if isinstance(knode, yaml.ScalarNode) else None
        key = f"{platform}.{field}"
        if field not in _FIELDS:
            err(knode, key, f"unknown key (known keys here: {', '.join(_FIELDS)})")
            ok = False
        elif field in values:
            err(knode, key, "duplicate key")
            ok = False
        else:
            value = _value(field, vnode, key, err)
            ok = ok and value is not _BAD
            values[field] = value
    for field in _REQUIRED:
        if field not in values:
            err(where, f"{platform}.{field}", "required key is missing")
            ok = False
    if not ok:
        return None
    max_lines = values.get("max_lines")
    return PlatformFacts(
        name=platform,
        hint=str(values["hint"]),
        max_length=_int(values["max_length"]),
        length_unit=str(values["length_unit"]),
        flavor=str(values["flavor"]),
        max_lines=None if max_lines is None else _int(max_lines),
        source=source,
    )


_BAD = object()


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value


def _positive_int(raw: str) -> int | None:
    try:
        number = int(raw.replace("_", ""), 10)
    except ValueError:
        return None
    return number if number > 0 else None


def _value(field: str, node: yaml.Node, key: str, err: _Err) -> object:
    tag = node.tag.rsplit(":", 1)[-1] if isinstance(node, yaml.ScalarNode) else None
    shown = (
        repr(node.value)
        if isinstance(node, yaml.ScalarNode)
        else "a " + type(node).__name__[:-4].lower()
    )
    if field == "hint":
        if tag == "str" and node.value.strip():
            return node.value.strip()
        err(node, key, f"expected non-empty text; got {shown}")
    elif field in ("max_length", "max_lines"):
        if field == "max_lines" and tag == "null":
            return None
        number = _positive_int(node.value) if tag == "int" else None
        if number is not None:
            return number
        err(node, key, f"expected a positive integer; got {shown}")
    else:
        allowed = LENGTH_UNITS if field == "length_unit" else FLAVORS
        if tag == "str" and node.value in allowed:
            return node.value
        err(node, key, f"expected one of {', '.join(allowed)}; got {shown}")
    return _BAD
