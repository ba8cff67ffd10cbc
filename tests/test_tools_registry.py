"""The tool registry: schemas derived from signatures, stable order, and calls that never raise."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Literal

import pytest

from gateway.agent.tools.catalog import MEMORY_TOOLS, build_registry
from gateway.agent.tools.policy import TOOL_ORDER
from gateway.agent.tools.registry import ToolContext, ToolRegistry, ToolResult
from gateway.errors import ToolError


def _ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(
        session_id=1,
        platform="web",
        chat_type="dm",
        user_id="u1",
        home=tmp_path,
        db_path=tmp_path / "state.db",
        chat_id="u1",
    )


async def sample(
    ctx: ToolContext,
    text: Annotated[str, "what to echo"],
    mode: Literal["upper", "lower"],
    times: int = 1,
    ratio: float | None = None,
    tags: list[str] | None = None,
    loud: bool = False,
) -> str:
    """Echo text back.

    Everything after the first paragraph stays out of the description.
    """
    out = text.upper() if mode == "upper" else text.lower()
    return f"{out * times} ratio={ratio} tags={tags} loud={loud} session={ctx.session_id}"


async def refuses(reason: Annotated[str, "why"]) -> str:
    """Always refuses."""
    raise ToolError(f"refused: {reason}")


async def crashes() -> str:
    """Always crashes."""
    raise RuntimeError("disk on fire")


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(sample)
    registry.register(refuses)
    registry.register(crashes)
    return registry


def test_schema_is_derived_from_annotations_and_docstring() -> None:
    spec = _registry().specs(["sample"])[0]
    assert spec.name == "sample"
    assert spec.description == "Echo text back."
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "what to echo"},
            "mode": {"type": "string", "enum": ["upper", "lower"]},
            "times": {"type": "integer", "default": 1},
            "ratio": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "loud": {"type": "boolean", "default": False},
        },
        "required": ["text", "mode"],
        "additionalProperties": False,
    }


def test_unsupported_annotation_is_refused_at_registration() -> None:
    async def bad(x: dict[str, int]) -> str:
        """Bad."""
        return ""

    with pytest.raises(TypeError, match="unsupported annotation"):
        ToolRegistry().register(bad)


def test_order_is_registration_order_whatever_the_filter_order() -> None:
    registry = _registry()
    assert registry.names() == ("sample", "refuses", "crashes")
    assert [s.name for s in registry.specs(["crashes", "sample", "nope"])] == ["sample", "crashes"]


def test_built_registry_has_the_fixed_order_and_filters(tmp_path: Path) -> None:
    assert TOOL_ORDER == (
        "memory",
        "session_search",
        "skill_view",
        "skill_manage",
        "web_fetch",
        "web_search",
        "schedule",
        "ask",
        "shell",
    )
    assert build_registry(tmp_path).names() == (
        "memory",
        "session_search",
        "skill_view",
        "skill_manage",
        "ask",
    )
    assert build_registry(tmp_path, enabled=["skill_manage", "memory"]).names() == (
        "memory",
        "skill_manage",
    )
    with pytest.raises(ValueError, match="unknown tools: web"):
        build_registry(tmp_path, enabled=["web"])
    specs = build_registry(tmp_path).specs(MEMORY_TOOLS)
    assert [s.name for s in specs] == ["memory", "skill_view", "skill_manage"]
    # Specs are plain JSON: the LLM layer can send them as they are.
    json.dumps([s.parameters for s in build_registry(tmp_path).specs()])


async def test_call_with_json_string_injects_the_context(tmp_path: Path) -> None:
    result = await _registry().call(
        "sample", '{"text": "Hi", "mode": "upper", "times": 2, "tags": ["a"]}', _ctx(tmp_path)
    )
    assert result == ToolResult("HIHI ratio=None tags=['a'] loud=False session=1")


async def test_explicit_nulls_mean_the_default(tmp_path: Path) -> None:
    result = await _registry().call(
        "sample", {"text": "x", "mode": "lower", "ratio": None, "times": None}, _ctx(tmp_path)
    )
    assert result == ToolResult("x ratio=None tags=None loud=False session=1")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            "{not json",
            (
                "Invalid arguments for sample: not valid JSON (Expecting property name enclosed in "
                "double quotes at position 1)"
            ),
        ),
        ("[1, 2]", "Invalid arguments for sample: expected a JSON object of named parameters"),
        ({"mode": "upper"}, "Invalid arguments for sample: missing required parameter 'text'."),
        (
            {"text": 3, "mode": "upper"},
            "Invalid arguments for sample: 'text' must be a string, got an integer.",
        ),
        (
            {"text": "a", "mode": "shout"},
            "Invalid arguments for sample: 'mode' must be one of upper, lower (got 'shout').",
        ),
        (
            {"text": "a", "mode": "upper", "times": True},
            "Invalid arguments for sample: 'times' must be an integer, got a boolean.",
        ),
        (
            {"text": "a", "mode": "upper", "times": 1.5},
            "Invalid arguments for sample: 'times' must be an integer, got a number.",
        ),
        (
            {"text": "a", "mode": "upper", "tags": ["x", 2]},
            "Invalid arguments for sample: 'tags'[1] must be a string, got an integer.",
        ),
        (
            {"text": "a", "mode": "upper", "colour": "red"},
            "Invalid arguments for sample: unknown parameter 'colour'.",
        ),
    ],
)
async def test_invalid_arguments_become_error_results(
    tmp_path: Path, arguments: object, message: str
) -> None:
    result = await _registry().call("sample", arguments, _ctx(tmp_path))  # type: ignore[arg-type]
    assert result == ToolResult(message, is_error=True)


async def test_int_is_accepted_for_a_number(tmp_path: Path) -> None:
    result = await _registry().call(
        "sample", {"text": "a", "mode": "upper", "ratio": 2}, _ctx(tmp_path)
    )
    assert not result.is_error and "ratio=2" in result.text


async def test_unknown_and_not_allowed_tools_are_refused(tmp_path: Path) -> None:
    registry = _registry()
    assert await registry.call("web_fetch", "{}", _ctx(tmp_path)) == ToolResult(
        "Unknown tool 'web_fetch'. Tools you can call: sample, refuses, crashes.", is_error=True
    )
    assert await registry.call("crashes", "{}", _ctx(tmp_path), allowed={"sample"}) == ToolResult(
        "Tool not available right now: 'crashes'. Tools you can call: sample.", is_error=True
    )


async def test_flush_may_not_search(tmp_path: Path) -> None:
    result = await build_registry(tmp_path).call(
        "session_search", {"query": "x"}, _ctx(tmp_path), allowed=MEMORY_TOOLS
    )
    assert result.is_error and result.text.startswith(
        "Tool not available right now: 'session_search'"
    )


async def test_refusal_and_crash_become_error_results(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = _registry()
    assert await registry.call("refuses", {"reason": "no"}, _ctx(tmp_path)) == ToolResult(
        "refused: no", True
    )
    with caplog.at_level(logging.ERROR, logger="gateway.agent.tools.registry"):
        result = await registry.call("crashes", "", _ctx(tmp_path))
    assert result == ToolResult(
        "Tool crashes failed unexpectedly (RuntimeError: disk on fire).", is_error=True
    )
    assert caplog.records[0].exc_info is not None  # the traceback is logged, not shown to the model


def test_a_tool_without_docstring_is_refused() -> None:
    async def silent() -> str:
        return ""

    with pytest.raises(ValueError, match="needs a docstring"):
        ToolRegistry().register(silent)
