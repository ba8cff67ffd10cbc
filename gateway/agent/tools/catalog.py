"""Which tools exist, in what order, and which a platform's new session gets.

`build_registry` is the only place that decides which built-in tools exist and in what order
(TOOL_ORDER); MCP tools follow, sorted by name. A new session's list (`ToolCatalog.current`) is part
of the provider's cached prompt prefix, so it never depends on dict iteration; the policy
(agent.tools, agent.tools_by_platform) picks from it per platform, and `split` sets its MCP tools
apart for tool search (tools.search; deferred.py). The built-in tools are the core: never deferred.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from gateway.agent.tools.ask import ask_tool
from gateway.agent.tools.deferred import bridge_specs
from gateway.agent.tools.memory import memory_tool
from gateway.agent.tools.policy import TOOL_ORDER, ToolPolicy
from gateway.agent.tools.registry import (
    Hold,
    HoldCheck,
    ToolContext,
    ToolFunction,
    ToolHints,
    ToolRegistry,
    ToolResult,
    ToolSpec,
)
from gateway.agent.tools.schedule import JobBook, schedule_tool
from gateway.agent.tools.search import session_search_tool
from gateway.agent.tools.skills import skill_tools
from gateway.agent.tools.web import web_fetch_tool, web_search_tool
from gateway.config.settings import Config
from gateway.errors import ToolError
from gateway.events import MAIN_AGENT
from gateway.knowledge.memory import MemoryStore
from gateway.knowledge.search import SessionSearch
from gateway.knowledge.skills import SkillLibrary
from gateway.net.fetch import WebClient
from gateway.net.pages import PageCache
from gateway.net.search import WebSearch
from gateway.sandbox.process import SandboxFailed
from gateway.sandbox.report import result_text
from gateway.sandbox.runner import Sandbox, doctor_check
from gateway.sandbox.spec import SandboxSpec

log = logging.getLogger(__name__)
T = TypeVar("T")
Specs = tuple[ToolSpec, ...]
# Only an admin's own session gets these in its tool list (gateway/prompt/session_tools.py); the
# tool itself checks the turn's sender too (a group session an admin and others share).
ADMIN_ONLY = frozenset({"shell"})
# What the pre-reset flush may run: it saves what the session learned, it must not search or reply.
MEMORY_TOOLS = frozenset({"memory", "skill_view", "skill_manage"})


@dataclass(frozen=True, slots=True)
class WebTools:
    """The web tools' clients (gateway/net/); `search`
    is None until tools.web_search is configured."""

    client: WebClient
    max_chars: int = 20_000
    search: WebSearch | None = None
    search_results: int = 5
    pages: PageCache | None = None  # pages web_fetch read a moment ago (gateway/net/pages.py)


# (the turn's tool context, the workspace, the paths the model named) → what the model is told
AttachFiles = Callable[[ToolContext, Path, Sequence[str]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ShellTool:
    """The shell's sandbox (tools.shell.enabled), who may run it (an admin's turn) and how the
    files a command wrote reach the chat (`attach`: gateway/delivery/files.py)."""

    sandbox: Sandbox
    admits: Callable[[ToolContext], bool]
    attach: AttachFiles | None = None


def build_registry(
    home: Path,
    *,
    memory_char_limit: int = 2200,
    user_char_limit: int = 1375,
    enabled: Collection[str] | None = None,
    memory: MemoryStore | None = None,
    skills: SkillLibrary | None = None,
    search: SessionSearch | None = None,
    web: WebTools | None = None,
    jobs: JobBook | None = None,
    shell: ShellTool | None = None,
) -> ToolRegistry:
    """All built-in tools (or those in `enabled`) in
    TOOL_ORDER, over the memories and skills of `home`.

    Pass `memory` / `skills` to share the instances the prompt builder reads (one lock, one index
    cache), `search` to close its connection on shutdown (otherwise it closes when the registry is
    collected), `web` for web_fetch (and web_search when a provider is configured), `jobs` for
    schedule (scheduling on), and `shell` for the shell (tools.shell.enabled).
    """
    memory = memory or MemoryStore(home / "memories", memory_char_limit, user_char_limit)
    skills = skills or SkillLibrary(home)
    search = search or SessionSearch()
    skill_view, skill_manage = skill_tools(skills)
    tools: dict[str, ToolFunction] = {
        "memory": memory_tool(memory),
        "session_search": session_search_tool(search),
        "skill_view": skill_view,
        "skill_manage": skill_manage,
    }
    if web is not None:
        tools["web_fetch"] = web_fetch_tool(web.client, max_chars=web.max_chars, pages=web.pages)
        if web.search is not None:
            tools["web_search"] = web_search_tool(web.search, default_count=web.search_results)
    if jobs is not None:
        tools["schedule"] = schedule_tool(jobs)
    tools["ask"] = ask_tool()
    if shell is not None:
        tools["shell"] = shell_tool(shell)
    if enabled is not None:
        unknown = set(enabled) - set(TOOL_ORDER)
        if unknown:
            raise ValueError(
                f"unknown tools: {', '.join(sorted(unknown))}; known: {', '.join(TOOL_ORDER)}"
            )
    registry = ToolRegistry()
    for name in TOOL_ORDER:
        if name in tools and (enabled is None or name in enabled):
            registry.register(tools[name], name=name)
    return registry


def shell_of(
    config: Config,
    admits: Callable[[ToolContext], bool],
    *,
    agent: str = MAIN_AGENT,
    attach: AttachFiles | None = None,
) -> ShellTool | None:
    """With tools.shell.enabled, the sandbox the shell runs commands in, for `admits`' turns; each
    agent has a workspace of its own."""
    shell = config.tools.shell
    if not shell.enabled:
        return None
    if shell.sandbox == "none":
        log.warning(
            "tools.shell runs commands WITHOUT a sandbox (unsafe_no_sandbox: true): they "
            "have the daemon's rights, its keys and state.db included"
        )
    return ShellTool(Sandbox(SandboxSpec.of(shell, config.home, agent=agent)), admits, attach)


MAX_COMMAND_CHARS = 16_000
NOT_ADMIN = (
    "The shell runs only for the gateway's admins (access.admins), and this message came "
    "from someone else: nothing was run. Tell them only an admin can have commands run."
)


def shell_tool(shell: ShellTool) -> ToolFunction:
    """`shell`: one `/bin/sh -c` command in the sandbox (gateway/sandbox/), for an admin's turn only
    (`admits`: a group session an admin shares with others has it, their turns may not run it).
    The approval (every call, the exact command shown) is the approvals' (gateway/approvals/)."""
    sandbox, limits = shell.sandbox, shell.sandbox.spec.limits
    where = "in a sandbox" if sandbox.spec.isolated else "WITHOUT a sandbox (the daemon's rights)"
    net = "with" if sandbox.spec.network else "without"

    async def run(
        command: Annotated[str, "the command line, run by /bin/sh -c in the workspace"],
        ctx: ToolContext,
        attach: Annotated[
            list[str] | None,
            "files the command writes, paths relative to the"
            " workspace, to send to the chat once it ends",
        ] = None,
    ) -> str:
        if not shell.admits(ctx):
            log.warning(
                "shell refused: session=%s user=%s is not an admin", ctx.session_id, ctx.user_id
            )
            raise ToolError(NOT_ADMIN)
        if not command.strip() or len(command) > MAX_COMMAND_CHARS or "\0" in command:
            raise ToolError(
                f"Give one command line of at most {MAX_COMMAND_CHARS:,} characters"
                " (no NUL); for more, write a script into the workspace first."
            )
        try:
            done = await sandbox.run(command)
        except SandboxFailed as exc:
            log.error("shell: the sandbox failed: %s", exc)
            raise ToolError(
                f"The sandbox could not run the command: {exc}. Nothing ran; tell the"
                " owner (`gateway doctor` checks the sandbox)."
            ) from None
        log.info(
            "shell ran: session=%s exit=%s stopped=%s seconds=%.2f",
            ctx.session_id,
            done.exit_code,
            done.stopped,
            done.duration_s,
        )
        said = result_text(done, limits.output_chars, limits.timeout_s)
        if attach and shell.attach is not None:
            said += "\n\n" + await shell.attach(ctx, sandbox.spec.workspace, attach)
        return said

    run.__doc__ = (
        f"Run a shell command (/bin/sh -c) {where}, {net} network access. Its working directory is"
        " the workspace, the one folder it may write and keep files in; the rest of the filesystem"
        " is read-only, /tmp is private and emptied after each command. The user sees each"
        " command and must allow it first. Returns the exit code, how long it ran, stdout and"
        f" stderr (at most {limits.output_chars:,} characters, the middle of longer output cut)."
        f" It is stopped after {limits.timeout_s:g} seconds."
        + (
            " Files it writes in the workspace reach the user as attachments when `attach` names"
            " them."
            if shell.attach is not None
            else ""
        )
    )
    return run


def admin_first(holds: HoldCheck | None, admits: Callable[[ToolContext], bool]) -> HoldCheck:
    """`holds` (the approvals' check at the dispatch point) after refusing an admin-only tool in a
    turn that is not an admin's: nobody is asked about a call that may not run anyway."""

    def check(
        name: str, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> Hold | ToolResult | None:
        if name in ADMIN_ONLY and not admits(ctx):
            return ToolResult(NOT_ADMIN, is_error=True)
        return holds(name, arguments, ctx) if holds is not None else None

    return check


async def shell_doctor(config: Config, make: Callable[..., T]) -> list[T]:
    """`gateway doctor`'s shell lines (gateway/sandbox/runner.py), each made by `make(name, verdict,
    detail, fix)`."""
    return [make("shell", *found) for found in await doctor_check(config.tools.shell, config.home)]


class ToolCatalog:
    """The registry's built-in tools plus its provider's (MCP) tools, seen through the policy."""

    def __init__(self, registry: ToolRegistry, policy: ToolPolicy | None = None) -> None:
        self.registry = registry
        self.policy = policy or ToolPolicy()

    def current(self, platform: str) -> tuple[ToolSpec, ...]:
        """What a new session on `platform` gets: built-ins
        in TOOL_ORDER, then MCP tools sorted by name."""
        provided = self.registry.provider.specs() if self.registry.provider is not None else []
        return tuple(
            s
            for s in [*self.registry.specs(), *sorted(provided, key=lambda s: s.name)]
            if self.policy.enabled(s.name, platform)
        )

    def enabled(self, name: str, platform: str) -> bool:
        return self.policy.enabled(name, platform)

    def hints(self, name: str) -> ToolHints:
        """What a tool says of itself (MCP annotations); a built-in tool says nothing."""
        provider = self.registry.provider
        found = getattr(provider, "hints", None)
        hints = found(name) if found is not None and name not in self.registry.names() else None
        return hints if isinstance(hints, ToolHints) else ToolHints()

    def split(self, specs: Sequence[ToolSpec], window: int) -> tuple[Specs, Specs]:
        """(sent, deferred): with tool search on for these tools at this context window, the MCP
        tools are deferred and the sent list ends with tool_search and tool_call; otherwise
        everything is sent."""
        core = set(self.registry.names())
        deferrable = tuple(s for s in specs if s.name not in core)
        if not self.policy.defers(deferrable, window):
            return tuple(specs), ()
        return (*(s for s in specs if s.name in core), *bridge_specs(deferrable)), deferrable

    def origin(self, name: str) -> str:
        if name in self.registry.names():
            return "built-in"
        provider = self.registry.provider
        return (provider.origin(name) if provider is not None else None) or "unknown"
