"""Which calls wait for a person: the check the tool registry runs at its one dispatch point, on the
real name.

A call waits when its tool is always asked about (`always_ask`: the shell tool, with the exact text
it shows), when `tools.approval.require` names it (names or globs), when its MCP server says
`approval: always`, or when the server marks it `destructiveHint: true` (unless the server says
`approval: never`, or marks it `readOnlyHint`). "Allow for this session" lets that tool run unasked
for the rest of the session, except a tool asked about `each_call` (the shell): its requests do not
offer it and no allowance covers it. `ask` always waits. Nothing here touches the database unless a
call needs approval (then: was it allowed for the session?).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any

from gateway.agent.tools.ask import option_problems
from gateway.agent.tools.registry import Hold, ToolContext, ToolHints, ToolResult
from gateway.approvals.request import EACH_CALL, Redact, describe_call
from gateway.config.settings import Config

# a call's arguments → the request text (Markdown) a person reads
Describe = Callable[[Mapping[str, Any]], str]
ASK = "ask"
NOBODY_PLATFORMS = frozenset({"cron"})  # a scheduled run: nobody is there to answer


class ApprovalPolicy:
    """The registry's `holds` check (gateway/agent/tools/registry.py)."""

    def __init__(
        self,
        config: Config,
        hints: Callable[[str], ToolHints | None],
        granted: Callable[[int, str], bool],
        *,
        redact: Redact = str,
    ) -> None:
        self.require = config.tools.approval.require
        self.servers = {name: server.approval for name, server in config.mcp_servers.items()}
        self.hints = hints
        self.granted = granted
        self.redact = redact
        self._always: dict[str, Describe] = {}
        self._each_call: set[str] = set()  # tools no session allowance covers
        # "for this session" answers seen by this process
        self._grants: set[tuple[int, str]] = set()

    def always_ask(self, tool: str, describe: Describe, *, each_call: bool = False) -> None:
        """Every call of `tool` waits for a person, who is shown exactly `describe(arguments)`;
        with `each_call` (the shell) a person is asked every time: its requests offer only Allow
        once and Deny, and no "for this session" answer covers it."""
        self._always[tool] = describe
        if each_call:
            self._each_call.add(tool)

    def grant(self, session_id: int, tool: str) -> None:
        if tool not in self._each_call:
            self._grants.add((session_id, tool))

    def __call__(
        self, name: str, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> Hold | ToolResult | None:
        if name == ASK:
            return self._ask(arguments, ctx)
        describe = self.describer(name)
        if describe is None:
            return None
        if _nobody_here(ctx):
            return ToolResult(
                f"{name} needs a person's approval before it runs, and nobody can"
                " be asked here (a scheduled run or background work), so it was not"
                " run.",
                is_error=True,
            )
        if name in self._each_call:
            return Hold("approval", describe(arguments), EACH_CALL)
        if (ctx.session_id, name) in self._grants or self.granted(ctx.session_id, name):
            self._grants.add((ctx.session_id, name))
            return None
        return Hold("approval", describe(arguments))

    def describer(self, name: str) -> Describe | None:
        """How a call of `name` is shown to the person who must allow it; None when it runs
        unasked."""
        if name in self._always:
            return self._always[name]
        if any(fnmatchcase(name, pattern) for pattern in self.require):
            return self._describe(name)
        hints = self.hints(name) or ToolHints()
        mode = self.servers.get(hints.server or "", "auto")
        if mode == "never" or (mode == "auto" and (hints.read_only or not hints.destructive)):
            return None
        return self._describe(name)

    def _describe(self, name: str) -> Describe:
        return lambda arguments: describe_call(name, arguments, self.redact)

    @staticmethod
    def _ask(arguments: Mapping[str, Any], ctx: ToolContext) -> Hold | None:
        question, options = arguments.get("question"), arguments.get("options")
        if _nobody_here(ctx) or not isinstance(question, str) or not isinstance(options, list):
            return None  # the tool itself says why not
        answers = [str(o) for o in options]
        if option_problems(question, answers) is not None:
            return None
        return Hold("ask", question.strip(), tuple(" ".join(a.split()) for a in answers))


def _nobody_here(ctx: ToolContext) -> bool:
    return ctx.origin is None or ctx.platform in NOBODY_PLATFORMS
