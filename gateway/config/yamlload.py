"""Typed YAML loading: a YAML file → nested frozen dataclasses, every error located by file, line
and key path.

Used for config.yaml (gateway/config/settings.py) and anything else the user edits by hand. It
refuses aliases (YAML bombs), oversized and non-UTF-8 files, and reports all problems it finds, not
just the first.
"""

from __future__ import annotations

import dataclasses
import hmac
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from gateway.errors import ConfigError, ConfigErrors

MAX_FILE_BYTES = 1_000_000
# LibYAML's parser when PyYAML was built with it (wheels are): ~10x less CPU per file, the same
# nodes and marks.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class KeyProblem(ValueError):
    """Raised by a config dataclass's __post_init__ about
    one of its keys: reported at that key's line."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(message)


class Secret(str):
    """A string that never shows itself in repr, str() of containers, or logs."""

    def __repr__(self) -> str:
        return "Secret('***')" if self else "Secret('')"

    @property
    def value(self) -> str:
        return str.__str__(self)

    def matches(self, given: str) -> bool:
        """Constant-time equality with what a caller sent. aiohttp hands over non-UTF-8 header bytes
        as surrogates, which a plain `.encode()` refuses with an error (a 500 for unauthenticated
        garbage); here they just differ."""
        return hmac.compare_digest(
            given.encode("utf-8", "surrogateescape"), self.value.encode("utf-8", "surrogateescape")
        )


def read_yaml_file(path: Path) -> yaml.Node | None:
    """Parse a file into a node tree (with line marks),
    refusing what a config file must never be."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", file=name) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=name) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"file is {len(raw):,} bytes; the limit is {MAX_FILE_BYTES:,}", file=name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})", file=name, line=line
        ) from None
    return parse_yaml_text(text, name)


def parse_yaml_text(text: str, name: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=SAFE_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or "invalid YAML"
        if "nesting depth" in problem:  # LibYAML's limit
            problem = "nested too deeply"
        elif mark is not None and _tab_near(text, mark, problem + str(exc)):
            problem += " (tabs are not allowed for indentation in YAML; use spaces)"
        raise ConfigError(f"invalid YAML: {problem}", file=name, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=name) from None
    except RecursionError:  # PyYAML composes recursively: thousands of nested `[` exhaust the stack
        raise ConfigError("invalid YAML: nested too deeply", file=name) from None


def _tab_near(text: str, mark: yaml.Mark, message: str) -> bool:
    """A tab where the parser stopped: PyYAML's message shows it, LibYAML's only the position."""
    if "\t" in message:
        return True
    lines = text.splitlines()
    return mark.line < len(lines) and "\t" in lines[mark.line][: mark.column + 1]


@dataclasses.dataclass
class _Ctx:
    file: str
    env: Mapping[str, str]
    errors: list[ConfigError]
    seen: set[int]

    def error(self, node: yaml.Node, key: str, message: str) -> None:
        self.errors.append(
            ConfigError(message, file=self.file, line=node.start_mark.line + 1, key=key or None)
        )


class _Invalid(Exception):
    """Conversion of one value failed; the error is already recorded."""


def load_dataclass(
    cls: type[Any],
    node: yaml.Node | None,
    *,
    file: str,
    env: Mapping[str, str] | None = None,
    converters: Mapping[type, Callable[..., Any]] | None = None,
) -> Any:
    """Build `cls` from a node tree; raise ConfigErrors
    listing every problem with its line and key path."""
    ctx = _Ctx(file=file, env=os.environ if env is None else env, errors=[], seen=set())
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
        node = yaml.MappingNode("tag:yaml.org,2002:map", [], start_mark=_mark(file))
    try:
        result = _convert(cls, node, "", ctx)
    except _Invalid:
        result = None
    if ctx.errors:
        ctx.errors.sort(key=lambda e: e.line or 0)
        raise ConfigErrors(ctx.errors)
    return result


def _mark(file: str) -> yaml.Mark:
    # no buffer: a synthetic mark
    return yaml.Mark(file, 0, 0, 0, None, None)  # type: ignore[arg-type]


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            return "a mapping"
        return {
            "str": "a string",
            "int": "an integer",
            "float": "a number",
            "bool": "true or false",
            "Secret": "a string",
        }.get(tp.__name__, tp.__name__)
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        return "a list"
    if origin is dict:
        return "a mapping"
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    return str(tp)


def _scalar_repr(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        return repr(node.value)
    return "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"


def _expand_env(value: str, node: yaml.Node, key: str, ctx: _Ctx) -> str:
    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in ctx.env:
            return ctx.env[name]
        if default is not None:
            return default
        ctx.error(node, key, f"environment variable {name} is not set")
        raise _Invalid

    return _ENV_REF.sub(sub, value)


_BOOL_TRUE = {"true", "yes", "on"}
_BOOL_FALSE = {"false", "no", "off"}


def _convert(tp: Any, node: yaml.Node, key: str, ctx: _Ctx) -> Any:
    if id(node) in ctx.seen and not isinstance(node, yaml.ScalarNode):
        ctx.error(node, key, "YAML anchors and aliases are not allowed in config files")
        raise _Invalid
    ctx.seen.add(id(node))
    return _dispatch(tp, node, key, ctx)


def _dispatch(tp: Any, node: yaml.Node, key: str, ctx: _Ctx) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return _convert_union(tp, node, key, ctx)
    if origin is Literal:
        return _convert_literal(tp, node, key, ctx)
    if origin in (tuple, list):
        return _convert_seq(tp, node, key, ctx)
    if origin is dict:
        return _convert_map(tp, node, key, ctx)
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, node, key, ctx)
    if tp is Any:
        return _plain(node, key, ctx)
    return _convert_scalar(tp, node, key, ctx)


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _convert_union(tp: Any, node: yaml.Node, key: str, ctx: _Ctx) -> Any:
    args = typing.get_args(tp)
    if _is_null(node) and type(None) in args:
        return None
    options = [a for a in args if a is not type(None)]
    for option in options:
        probe = _Ctx(ctx.file, ctx.env, [], set(ctx.seen))
        try:
            value = _dispatch(option, node, key, probe)
        except _Invalid:
            continue
        if not probe.errors:
            ctx.seen |= probe.seen
            return value
    if len(options) == 1:
        return _dispatch(options[0], node, key, ctx)
    sections = [o for o in options if dataclasses.is_dataclass(o)]
    if isinstance(node, yaml.MappingNode) and len(sections) == 1:
        return _dispatch(sections[0], node, key, ctx)  # the only mapping it takes: its own errors
    ctx.error(node, key, f"expected {_type_name(tp)}; got {_scalar_repr(node)}")
    raise _Invalid


def _convert_literal(tp: Any, node: yaml.Node, key: str, ctx: _Ctx) -> Any:
    allowed = typing.get_args(tp)
    if isinstance(node, yaml.ScalarNode):
        raw = node.value
        for option in allowed:
            if isinstance(option, bool):
                continue
            if str(option) == raw or (isinstance(option, int) and raw.strip() == str(option)):
                return option
    ctx.error(
        node, key, f"expected one of {', '.join(str(a) for a in allowed)}; got {_scalar_repr(node)}"
    )
    raise _Invalid


def _convert_seq(tp: Any, node: yaml.Node, key: str, ctx: _Ctx) -> Any:
    args = typing.get_args(tp)
    item_tp = args[0] if args else Any
    if not isinstance(node, yaml.SequenceNode):
        ctx.error(node, key, f"expected a list; got {_scalar_repr(node)}")
        raise _Invalid
    items = []
    failed = False
    for i, child in enumerate(node.value):
        try:
            items.append(_convert(item_tp, child, f"{key}[{i}]", ctx))
        except _Invalid:
            failed = True
    if failed:
        raise _Invalid
    return tuple(items) if typing.get_origin(tp) is tuple else items


def _convert_map(tp: Any, node: yaml.Node, key: str, ctx: _Ctx) -> Any:
    key_tp, value_tp = typing.get_args(tp) or (str, Any)
    if not isinstance(node, yaml.MappingNode):
        ctx.error(node, key, f"expected a mapping; got {_scalar_repr(node)}")
        raise _Invalid
    out: dict[Any, Any] = {}
    failed = False
    for knode, vnode in node.value:
        try:
            k = _convert(key_tp, knode, key, ctx)
            if k in out:
                ctx.error(knode, _join(key, str(k)), "duplicate key")
                raise _Invalid
            out[k] = _convert(value_tp, vnode, _join(key, str(k)), ctx)
        except _Invalid:
            failed = True
    if failed:
        raise _Invalid
    return out


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _convert_dataclass(tp: Any, node: yaml.Node, key: str, ctx: _Ctx) -> Any:
    from_scalar = getattr(tp, "from_yaml_scalar", None)
    if isinstance(node, yaml.ScalarNode) and from_scalar is not None and not _is_null(node):
        return from_scalar(_expand_env(node.value, node, key, ctx))
    if not isinstance(node, yaml.MappingNode):
        ctx.error(node, key, f"expected a mapping; got {_scalar_repr(node)}")
        raise _Invalid
    hints = typing.get_type_hints(tp)
    fields = {
        f.name: f for f in dataclasses.fields(tp) if f.init and not f.metadata.get("internal")
    }
    values: dict[str, Any] = {}
    attempted: set[str] = set()
    failed = False
    for knode, vnode in node.value:
        name = knode.value if isinstance(knode, yaml.ScalarNode) else None
        path = _join(key, str(name))
        if name not in fields:
            known = ", ".join(sorted(fields))
            ctx.error(knode, path, f"unknown key (known keys here: {known})")
            failed = True
            continue
        if name in values:
            ctx.error(knode, path, "duplicate key")
            failed = True
            continue
        attempted.add(name)
        try:
            value = _convert(hints[name], vnode, path, ctx)
            _check_bounds(fields[name], value, vnode, path, ctx)
            values[name] = value
        except _Invalid:
            failed = True
    for name, f in fields.items():
        if (
            name not in attempted
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ):
            ctx.error(node, _join(key, name), "required key is missing")
            failed = True
    if failed:
        raise _Invalid
    try:
        return tp(**values)
    except KeyProblem as exc:
        where = next(
            (v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == exc.key),
            node,
        )
        ctx.error(where, _join(key, exc.key), exc.message)
        raise _Invalid from None
    except (ValueError, TypeError) as exc:
        ctx.error(node, key, str(exc))
        raise _Invalid from None


def _check_bounds(
    f: dataclasses.Field[Any], value: Any, node: yaml.Node, key: str, ctx: _Ctx
) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    lo, hi = f.metadata.get("min"), f.metadata.get("max")
    if f.metadata.get("positive") and value <= 0:
        ctx.error(node, key, f"expected a positive number; got {value!r}")
        raise _Invalid
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        if lo is not None and hi is not None:
            rng = f"between {lo} and {hi}"
        else:
            rng = f"at least {lo}" if lo is not None else f"at most {hi}"
        ctx.error(node, key, f"expected a number {rng}; got {value!r}")
        raise _Invalid


def _convert_scalar(tp: Any, node: yaml.Node, key: str, ctx: _Ctx) -> Any:
    if not isinstance(node, yaml.ScalarNode) or _is_null(node):
        got = _scalar_repr(node) if not _is_null(node) else "null"
        ctx.error(node, key, f"expected {_type_name(tp)}; got {got}")
        raise _Invalid
    if tp in (str, Secret, Path):
        value = _convert_text(tp, node, key, ctx)
    elif tp in _NUMBERS:
        value = _NUMBERS[tp](node.value, node.tag)
    else:
        raise TypeError(f"unsupported config type {tp!r} at {key}")
    if value is _NO:
        ctx.error(node, key, f"expected {_type_name(tp)}; got {_scalar_repr(node)}")
        raise _Invalid
    return value


_NO = object()  # the scalar does not read as the type asked for
_INT, _FLOAT, _STR = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:str"


def _as_bool(raw: str, tag: str) -> object:
    low = raw.lower()
    if tag != _STR and low in _BOOL_TRUE | _BOOL_FALSE:
        return low in _BOOL_TRUE
    return _NO


def _as_int(raw: str, tag: str) -> object:
    try:
        return int(raw.replace("_", ""), 0) if tag == _INT else _NO
    except ValueError:
        return _NO


def _as_float(raw: str, tag: str) -> object:
    try:
        return float(raw.replace("_", "")) if tag in (_INT, _FLOAT) else _NO
    except ValueError:
        return _NO


_NUMBERS: dict[type, Callable[[str, str], object]] = {
    bool: _as_bool,
    int: _as_int,
    float: _as_float,
}


def _convert_text(tp: Any, node: yaml.ScalarNode, key: str, ctx: _Ctx) -> object:
    """A str, Secret or Path, with ${VAR} references expanded (a Path's ~ too)."""
    if tp is Path:
        if node.tag != _STR:
            return _NO
        return Path(os.path.expanduser(_expand_env(node.value, node, key, ctx)))
    if node.tag not in (_STR, _INT, _FLOAT):
        return _NO
    text = _expand_env(node.value, node, key, ctx)
    return Secret(text) if tp is Secret else text


def _plain(node: yaml.Node, key: str, ctx: _Ctx) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return node.value
    if isinstance(node, yaml.SequenceNode):
        return [_convert(Any, n, key, ctx) for n in node.value]
    return {k.value: _convert(Any, v, _join(key, str(k.value)), ctx) for k, v in node.value}


_KEY_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def locate(path: Path, key: str) -> int | None:
    """The line of `key` (`agent.tools[2]`) in a YAML file, for a problem found after loading; None
    if absent."""
    try:
        node = read_yaml_file(path)
    except ConfigError:
        return None
    for index, name in _KEY_PART.findall(key):
        if index and isinstance(node, yaml.SequenceNode) and int(index) < len(node.value):
            node = node.value[int(index)]
        elif name and isinstance(node, yaml.MappingNode):
            node = next(
                (v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == name),
                None,
            )
        else:
            return None
        if node is None:
            return None
    return node.start_mark.line + 1 if node is not None else None
