"""JSON Schema for a tool, derived from its typed Python
signature, and a checker for the model's arguments.

Only the shapes tools use are supported (str, int, float, bool, Literal, `X | None`, list[X]);
anything else is a programming error raised at registration, never at call time. An MCP tool's
arguments are checked against the schema its server gave with `jsonschema` (`check_json`), loaded
with the first such call.
"""

from __future__ import annotations

import inspect
import logging
import threading
import types
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

log = logging.getLogger(__name__)

_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def derive(fn: Callable[..., Any], *, skip: type) -> tuple[str, dict[str, Any]]:
    """(description, parameters schema) for `fn`; parameters
    annotated with `skip` are injected, not shown."""
    hints = typing.get_type_hints(fn, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        hint = hints.get(param.name)
        if hint is None:
            raise TypeError(f"{fn.__name__}: parameter {param.name!r} has no annotation")
        if hint is skip:
            continue
        schema, optional = _schema_of(hint, f"{fn.__name__}.{param.name}")
        if param.default is not inspect.Parameter.empty and param.default is not None:
            schema["default"] = param.default
        properties[param.name] = schema
        if not optional and param.default is inspect.Parameter.empty:
            required.append(param.name)
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return _first_paragraph(inspect.getdoc(fn) or ""), parameters


def _first_paragraph(doc: str) -> str:
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


def _schema_of(hint: Any, where: str) -> tuple[dict[str, Any], bool]:
    """(schema, is_optional) for one annotation."""
    description: str | None = None
    if typing.get_origin(hint) is Annotated:
        hint, *extras = typing.get_args(hint)
        description = next((e for e in extras if isinstance(e, str)), None)
    optional = False
    if typing.get_origin(hint) in (Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) != 1:
            raise TypeError(f"{where}: only `X | None` unions are supported")
        hint, optional = members[0], True
    schema = _plain_schema(hint, where)
    if description:
        schema["description"] = description
    return schema, optional


def _plain_schema(hint: Any, where: str) -> dict[str, Any]:
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin = typing.get_origin(hint)
    if origin is Literal:
        values = typing.get_args(hint)
        kinds = {type(v) for v in values}
        if len(kinds) != 1 or next(iter(kinds)) not in _SCALARS:
            raise TypeError(f"{where}: Literal values must share one scalar type")
        return {"type": _SCALARS[next(iter(kinds))], "enum": list(values)}
    if origin is list:
        (item,) = typing.get_args(hint)
        return {"type": "array", "items": _plain_schema(item, where)}
    raise TypeError(f"{where}: unsupported annotation {hint!r}")


def check(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    """Problems with `arguments` against an object schema made by `derive`; empty means valid.

    An explicit null for an optional parameter counts as absent: models often send one.
    """
    properties: Mapping[str, Any] = schema.get("properties", {})
    problems = [f"unknown parameter {name!r}" for name in arguments if name not in properties]
    for name in schema.get("required", ()):
        if arguments.get(name) is None:
            problems.append(f"missing required parameter {name!r}")
    for name, value in arguments.items():
        if name in properties and value is not None:
            problems.extend(_check_value(properties[name], value, repr(name)))
    return problems


def _check_value(schema: Mapping[str, Any], value: Any, where: str) -> list[str]:
    expected = schema["type"]
    if not _is_type(value, expected):
        return [f"{where} must be {_article(expected)}, got {_json_type(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(str(v) for v in schema["enum"])
        return [f"{where} must be one of {options} (got {value!r})"]
    if expected == "array":
        return [
            p
            for i, item in enumerate(value)
            for p in _check_value(schema["items"], item, f"{where}[{i}]")
        ]
    return []


def _is_type(value: Any, expected: str) -> bool:
    if isinstance(value, bool):  # bool is an int subclass; JSON keeps them apart
        return expected == "boolean"
    match expected:
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int)
        case "number":
            return isinstance(value, (int, float))
        case "array":
            return isinstance(value, list)
    return False


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"


def _article(expected: str) -> str:
    return f"an {expected}" if expected in ("integer", "array") else f"a {expected}"


# ---- a server's schema (MCP tools) --------------------------------------------------------------

MAX_PROBLEMS = 5
MAX_PROBLEM_CHARS = 200
# Keyword checks in one call's validation (a few hundred is usual): nested anyOf in a few hundred
# bytes of schema makes the work exponential, and it runs on the event loop
MAX_CHECKS = 5_000
_validators: dict[int, tuple[Mapping[str, Any], Validator | None]] = {}
_budget = threading.local()


class _TooComplex(Exception):
    """The validation went past MAX_CHECKS."""


def check_json(schema: Mapping[str, Any], arguments: dict[str, Any]) -> list[str]:
    """Problems with `arguments` against a server's JSON Schema, each naming its field; empty means
    valid.

    A null the schema refuses for an optional top-level parameter is dropped from `arguments`
    (models send them for "not given"). `pattern` is left to the server: the regular expression is
    the server's and the string the model's, and Python's `re` cannot be stopped mid-match. A schema
    jsonschema cannot use (an unknown draft, a `$ref` to the network: never fetched; one that
    takes more than MAX_CHECKS keyword checks) checks nothing; the server still does."""
    validator = _validator(schema)
    if validator is None:
        return []
    _budget.left = MAX_CHECKS
    try:
        errors = list(validator.iter_errors(arguments))
        required = set(schema.get("required") or ())
        nulls = {str(e.path[0]) for e in errors if len(e.path) == 1 and e.instance is None}
        nulls -= required
        if nulls:
            for key in nulls:
                del arguments[key]
            errors = list(validator.iter_errors(arguments))
    except _TooComplex:
        log.info(
            "tool arguments not checked here: their schema took more than %s checks; the "
            "arguments go to the server as they are",
            MAX_CHECKS,
        )
        return []
    except Exception as exc:  # noqa: BLE001 - a schema the checker trips on must not stop a call
        log.info(
            "tool schema not checkable (%s: %s); the arguments go to the server as they are",
            type(exc).__name__,
            str(exc)[:200],
        )
        return []
    errors.sort(key=lambda e: ([str(p) for p in e.path], e.message))
    return [_problem(e.path, e.message) for e in errors[:MAX_PROBLEMS]]


def _problem(path: Any, message: str) -> str:
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    text = f"{where}: {message}" if where else message
    return text if len(text) <= MAX_PROBLEM_CHARS else text[: MAX_PROBLEM_CHARS - 1] + "…"


def _validator(schema: Mapping[str, Any]) -> Validator | None:
    """The validator for `schema`, built once per schema object (a session's specs live long)."""
    known = _validators.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    if len(_validators) > 4096:
        _validators.clear()
    found = _build(schema)
    _validators[id(schema)] = (schema, found)
    return found


def _build(schema: Mapping[str, Any]) -> Validator | None:
    from jsonschema import Draft202012Validator, validators
    from jsonschema.exceptions import SchemaError
    from jsonschema_specifications import REGISTRY  # the drafts' meta-schemas; it retrieves nothing

    base = validators.validator_for(schema, default=Draft202012Validator)
    try:
        base.check_schema(dict(schema))
    except SchemaError as exc:
        log.info(
            "tool schema is not valid JSON Schema (%s); its arguments are not checked here",
            exc.message[:200],
        )
        return None
    lenient = _lenient.get(base)
    if lenient is None:
        extend: Any = validators.extend
        counted = {k: _counted(check) for k, check in base.VALIDATORS.items()}
        lenient = _lenient[base] = extend(base, {**counted, "pattern": _counted(_unchecked)})
    validator: Validator = lenient(schema, registry=REGISTRY)
    return validator


_lenient: dict[Any, Any] = {}


def _counted(check: Callable[..., Any]) -> Callable[..., Any]:
    """A keyword's check that spends one of the call's MAX_CHECKS first."""

    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _budget.left -= 1
        if _budget.left < 0:
            raise _TooComplex
        return check(validator, value, instance, schema)

    return counted


def _unchecked(*_: Any) -> None:
    """`pattern` is the server's to check (see check_json)."""
