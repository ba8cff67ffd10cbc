"""The tool registry: typed async functions in, stable specs and never-raising calls out.

A tool failure must never break a turn, so `ToolRegistry.call` turns every problem (unknown tool,
bad JSON, bad arguments, a refusal, a crash) into an error result the model can read.
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from gateway.agent.tools import schema
from gateway.errors import ToolError
from gateway.events import Inbound
from gateway.knowledge.memory import NO_RIGHTS, MemoryRights, MemoryView
from gateway.knowledge.people import OWNER_PLATFORMS, Person
from gateway.store.rows import SessionRow

log = logging.getLogger(__name__)

ToolFunction = Callable[..., Awaitable[str]]
MAX_LISTED = 20  # names an "unknown tool" error lists (tool search may stand for hundreds more)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is shown: a name, a description and a JSON Schema object for the arguments.

    `server` is the MCP server a tool comes from ("" for a built-in one) and `annotations` what it
    says of the tool (`readOnlyHint`, `destructiveHint`, …): kept with the session's tools for the
    core to decide on (approvals), never sent to the model."""

    name: str
    description: str
    parameters: dict[str, Any]
    annotations: Mapping[str, Any] = field(default_factory=dict)
    server: str = ""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling: tools scope what they read and
    write by it (session search never crosses people).

    `origin` is the message the turn answers (its chat and thread, the sender's handle and roles);
    None in background work such as the pre-reset flush. `person` is the person asking, with every
    identity linked to theirs; `memory` what they may write (nothing by default:
    gateway/access/roles.py grants it by policy)."""

    session_id: int
    platform: str
    chat_type: str
    user_id: str | None
    home: Path
    db_path: Path
    chat_id: str | None = None
    origin: Inbound | None = None
    person: Person | None = None
    memory: MemoryRights = NO_RIGHTS
    agent: str = "main"  # whose sessions, memory and jobs: one agent's tools never reach another's

    @property
    def accounts(self) -> tuple[tuple[str, str | None], ...]:
        """(platform, user id) of every identity of the person asking; user id None: every user of a
        platform where everyone is the local owner (web chat, console)."""
        if self.person is None:
            return ((self.platform, self.user_id),) if self.user_id else ()
        found: list[tuple[str, str | None]] = []
        for i in self.person.identities:
            found.extend(
                ((p, None) for p in sorted(OWNER_PLATFORMS))
                if i.platform in OWNER_PLATFORMS
                else [(i.platform, i.user_id)]
            )
        return tuple(found)


class Callers(Protocol):
    """Whom a session's tools act for (gateway/access/roles.py): a turn's sender, or for a flush the
    session's owner; and whose memory the session's prompt shows."""

    def asker(
        self,
        session: SessionRow,
        user_id: str | None,
        user_name: str | None = None,
        username: str | None = None,
    ) -> ToolContext: ...

    def owner(self, session: SessionRow) -> ToolContext: ...

    def view(self, session: SessionRow) -> MemoryView: ...


@dataclass(frozen=True, slots=True)
class ToolHints:
    """What a tool's maker says of it (MCP annotations: readOnlyHint, destructiveHint) and the MCP
    server it belongs to; the approval policy reads them (gateway/approvals/policy.py), nothing else
    trusts them."""

    server: str | None = None
    read_only: bool = False
    destructive: bool = False


@dataclass(frozen=True, slots=True)
class ToolResult:
    text: str
    is_error: bool = False
    # pictures the model sees with the result: {"media_type", "file" (under GATEWAY_HOME/media),
    # "data" (base64)}, stored like a user message's images (messages.media) so later turns send the
    # same bytes
    images: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Hold:
    """A call that must wait for a person before it runs: an approval (`text` names the tool and its
    arguments as the person is shown them; `options` the decisions it offers when not all three)
    or an `ask` question (`text` the question, `options` its answers). `tool` and `arguments` are
    the call's real name and parsed arguments (also when the model made it through tool search's
    tool_call): what runs once a person says yes."""

    kind: Literal["approval", "ask"]
    text: str
    options: tuple[str, ...] = ()
    tool: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Held(ToolResult):
    """What `ToolRegistry.call` returns for a call that waits (`hold`): it did not run; the agent
    loop stops the turn there (gateway/agent/holds.py) and runs it again with `approved` once a
    person has said yes."""

    hold: Hold | None = None


# The check at the dispatch point (gateway/approvals/policy.py): does this call (real name, parsed
# arguments) wait for a person? A Hold if so, a ToolResult to answer instead (nobody can be asked
# here), None to run it.
HoldCheck = Callable[[str, Mapping[str, Any], "ToolContext"], "Hold | ToolResult | None"]


class ToolProvider(Protocol):
    """Tools that come and go at run time (MCP servers: gateway/agent/tools/mcp.py); their servers
    check arguments."""

    def specs(self) -> list[ToolSpec]: ...

    def claims(self, name: str) -> bool: ...

    def origin(self, name: str) -> str | None: ...

    async def call(
        self, name: str, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> ToolResult: ...


@dataclass(frozen=True, slots=True)
class _Tool:
    spec: ToolSpec
    fn: ToolFunction
    ctx_param: str | None


class ToolRegistry:
    """Tools in registration order; that order is part of the provider's cached prompt prefix."""

    def __init__(self) -> None:
        self._tools: dict[str, _Tool] = {}
        self.provider: ToolProvider | None = None
        self.holds: HoldCheck | None = None  # calls that wait for a person (set by the wiring)

    def register(self, fn: ToolFunction, *, name: str | None = None) -> ToolSpec:
        """Add `fn`; its ToolContext parameter (if any) is
        injected, every other one comes from the model."""
        name = name or fn.__name__
        if name in self._tools:
            raise ValueError(f"tool {name!r} registered twice")
        description, parameters = schema.derive(fn, skip=ToolContext)
        if not description:
            raise ValueError(f"tool {name!r} needs a docstring: it is the model's only description")
        ctx_param = next((p for p, h in _hints(fn).items() if h is ToolContext), None)
        spec = ToolSpec(name, description, parameters)
        self._tools[name] = _Tool(spec, fn, ctx_param)
        return spec

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def specs(self, names: Iterable[str] | None = None) -> list[ToolSpec]:
        """Specs in registration order, whatever order
        `names` comes in; unknown names are ignored."""
        wanted = None if names is None else set(names)
        return [t.spec for n, t in self._tools.items() if wanted is None or n in wanted]

    async def call(
        self,
        name: str,
        arguments: str | Mapping[str, Any] | None,
        ctx: ToolContext,
        *,
        allowed: Collection[str] | None = None,
        parameters: Mapping[str, Any] | None = None,
        approved: bool = False,
    ) -> ToolResult:
        """Run `name` (its real name, also when the model reached it through tool search) if
        `allowed`. `parameters` is the JSON schema the model was shown for a provider's (MCP) tool:
        the arguments are checked against it here, whichever way the call came. A call that waits
        for a person (`holds`) comes back `Held` once its arguments are valid; `approved` runs one a
        person said yes to."""
        tool = self._tools.get(name)
        external = tool is None and self.provider is not None and self.provider.claims(name)
        if (tool is None and not external) or (allowed is not None and name not in allowed):
            what = (
                "Unknown tool" if tool is None and not external else "Tool not available right now:"
            )
            return _error(f"{what} {name!r}. Tools you can call: {self._usable(allowed)}.")
        try:
            args = _parse_arguments(arguments)
        except ToolError as e:
            return _error(f"Invalid arguments for {name}: {e}")
        if tool is None:
            problems = schema.check_json(parameters, args) if parameters is not None else []
            if problems:
                return _error(f"Invalid arguments for {name}: {'; '.join(problems)}.")
            held = self._held(name, args, ctx, approved)
            return held or await self._call_external(name, args, ctx)
        problems = schema.check(tool.spec.parameters, args)
        if problems:
            return _error(f"Invalid arguments for {name}: {'; '.join(problems)}.")
        held = self._held(name, args, ctx, approved)
        if held is not None:
            return held
        kwargs = {k: v for k, v in args.items() if v is not None}
        if tool.ctx_param:
            kwargs[tool.ctx_param] = ctx
        return await _run(tool, kwargs, ctx)

    def _held(
        self, name: str, args: dict[str, Any], ctx: ToolContext, approved: bool
    ) -> ToolResult | None:
        if approved or self.holds is None:
            return None
        found = self.holds(name, args, ctx)
        if isinstance(found, Hold):
            return Held("", hold=replace(found, tool=name, arguments=args))
        return found

    def refusal(self, name: str, allowed: Collection[str] | None) -> ToolResult:
        """The error for a known tool that may not run here (the policy, a flush only saving)."""
        usable = self._usable(allowed)
        return _error(f"Tool not available right now: {name!r}. Tools you can call: {usable}.")

    def _usable(self, allowed: Collection[str] | None) -> str:
        usable = [n for n in self._tools if allowed is None or n in allowed]
        usable += sorted(n for n in allowed or () if n not in self._tools)
        if len(usable) > MAX_LISTED:
            return f"{', '.join(usable[:MAX_LISTED])} and {len(usable) - MAX_LISTED} more"
        return ", ".join(usable) or "none"

    async def _call_external(self, name: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        assert self.provider is not None
        try:
            return await self.provider.call(name, args, ctx)
        except Exception as e:  # a task root for one tool call: the turn goes on
            log.exception("tool crashed: tool=%s session=%s", name, ctx.session_id)
            return _error(f"Tool {name} failed unexpectedly ({type(e).__name__}).")


async def _run(tool: _Tool, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
    name = tool.spec.name
    try:
        text = await tool.fn(**kwargs)
    except ToolError as e:
        log.info("tool refused: tool=%s session=%s", name, ctx.session_id)
        return _error(str(e))
    except Exception as e:  # a task root for one tool call: the turn goes on
        log.exception("tool crashed: tool=%s session=%s", name, ctx.session_id)
        detail = str(e)
        detail = detail if len(detail) <= 200 else detail[:197] + "..."
        return _error(f"Tool {name} failed unexpectedly ({type(e).__name__}: {detail}).")
    log.debug("tool ok: tool=%s session=%s chars=%s", name, ctx.session_id, len(text))
    return ToolResult(text)


def _parse_arguments(arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():  # some providers send "" for a call without arguments
            return {}
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise ToolError(f"not valid JSON ({e.msg} at position {e.pos})") from None
    if not isinstance(arguments, Mapping):
        raise ToolError("expected a JSON object of named parameters")
    return dict(arguments)


def _hints(fn: ToolFunction) -> dict[str, Any]:
    return {k: v for k, v in typing.get_type_hints(fn).items() if k != "return"}


def _error(text: str) -> ToolResult:
    return ToolResult(text, is_error=True)
