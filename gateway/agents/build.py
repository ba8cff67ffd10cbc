"""How an agent's runtime is made from its settings and the parts every agent shares.

Shared: the store, the MCP servers, the web tools, the job book, the session search (which scopes
every query to the asking agent). Per agent: its model (its own `model:`, else the gateway's), its
memory folder and skills (gateway/knowledge/memory.py `agent_memories`), its tools bound to them,
its tool policy and its prompt inputs. The agent `main` without an `agents.main` entry is built
exactly as a single-agent gateway was, so its sessions' prompts do not change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from gateway.agent.loop import Agent
from gateway.agent.tools.catalog import (
    AttachFiles,
    ToolCatalog,
    WebTools,
    admin_first,
    build_registry,
    shell_of,
)
from gateway.agent.tools.policy import ToolPolicy
from gateway.agent.tools.registry import HoldCheck, ToolContext, ToolProvider
from gateway.agent.tools.schedule import JobBook
from gateway.agents.runtime import AgentRuntime, Roster
from gateway.config.agents import Bindings, agent_config, agent_names
from gateway.config.settings import Config
from gateway.errors import LLMNotConfigured
from gateway.events import MAIN_AGENT
from gateway.knowledge.memory import MemoryStore, agent_memories
from gateway.knowledge.search import SessionSearch
from gateway.knowledge.skills import SkillLibrary
from gateway.llm.factory import ModelChoice, SessionModels, UnconfiguredLLM, build_chosen
from gateway.llm.types import LLMClient
from gateway.prompt.builder import FileSnapshot
from gateway.prompt.hints import PlatformFacts
from gateway.prompt.inputs import PromptAssembler
from gateway.prompt.session_tools import SessionTools
from gateway.store.database import Store
from gateway.store.rows import SessionRow

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Admins:
    """Who may have the admin-only tools (the shell, tools.shell): a turn's sender (`admits`) and
    a session's owner (`owns`): gateway/access/roles.py."""

    admits: Callable[[ToolContext], bool]
    owns: Callable[[SessionRow], bool]


@dataclass(frozen=True, slots=True)
class SharedTools:
    """The tools' parts every agent uses: `provider` (the MCP servers' tools), the web tools, the
    job book (scheduling on), the session search, the approval check (`holds`) and, with the
    shell enabled, who may have it (`admins`)."""

    web: WebTools | None = None
    jobs: JobBook | None = None
    search: SessionSearch | None = None
    provider: ToolProvider | None = None
    holds: HoldCheck | None = None  # which calls wait for a person (gateway/approvals/policy.py)
    admins: Admins | None = None
    attach: AttachFiles | None = None  # the shell's files to the chat (gateway/delivery/files.py)


@dataclass(slots=True)
class Shared:
    """What every agent is built over. `llm` is the gateway's model (top-level `model:`)."""

    config: Config
    env: Mapping[str, str]
    store: Store
    clock: Callable[[], datetime]
    facts: Mapping[str, PlatformFacts]
    llm: LLMClient
    tools: SharedTools = field(default_factory=SharedTools)
    erased: set[int] = field(default_factory=set)  # people forgotten in this process (all agents)


def roster_for(shared: Shared) -> Roster:
    """Every agent of the config (each built on first use) and the bindings that route to them."""
    config = shared.config
    return Roster(partial(build_runtime, shared), agent_names(config), Bindings(config))


def build_runtime(shared: Shared, name: str) -> AgentRuntime:
    config = agent_config(shared.config, name)
    memory, skills = _knowledge(shared, name)
    t = shared.tools
    admins = t.admins
    shell = (
        shell_of(config, admins.admits, agent=name, attach=t.attach) if admins is not None else None
    )
    registry = build_registry(
        config.home,
        memory=memory,
        skills=skills,
        web=t.web,
        jobs=t.jobs,
        search=t.search,
        shell=shell,
    )
    registry.provider = t.provider
    registry.holds = admin_first(t.holds, admins.admits) if admins is not None else t.holds
    catalog = ToolCatalog(registry, ToolPolicy.of(config))
    base = _model(shared, name, config)
    llm = _switchable(shared, name, config, base)
    identity = shared.config.agents.get(name)
    prompts = PromptAssembler(
        config,
        shared.facts,
        memory,
        skills,
        soul=_soul(config.home, identity.soul if identity else None),
        identity=_identity(name, identity.identity if identity else None),
    )
    return AgentRuntime(
        name=name,
        config=config,
        llm=llm,
        loop=Agent(llm, registry, max_iterations=config.agent.max_iterations),
        memory=memory,
        skills=skills,
        catalog=catalog,
        tools=SessionTools(
            store=shared.store,
            catalog=catalog,
            clock=shared.clock,
            admin=admins.owns if admins is not None else None,
        ),
        prompts=prompts,
        own=None if base is shared.llm else base,
    )


def _knowledge(shared: Shared, name: str) -> tuple[MemoryStore, SkillLibrary]:
    """The agent's memory folder and skills; profiles in the home's folder for `memory: shared`."""
    config = shared.config
    memories = config.home / "memories"
    folder = agent_memories(memories, name)
    spec = config.agents.get(name)
    people = memories / "people" if spec is not None and spec.memory == "shared" else None
    limits = config.memory
    memory = MemoryStore(
        folder,
        limits.memory_char_limit,
        limits.user_char_limit,
        limits.chat_char_limit,
        people=people if folder != memories else None,
        erased=shared.erased,
    )
    skills = SkillLibrary(config.home, folder=None if name == MAIN_AGENT else folder / "skills")
    return memory, skills


def _model(shared: Shared, name: str, config: Config) -> LLMClient:
    """The agent's own `model:`, else the gateway's (one client, shared)."""
    spec = shared.config.agents.get(name)
    if spec is None or spec.model is None or config.model is None:
        return shared.llm
    try:
        return build_chosen(ModelChoice(config.model, f"agents.{name}.model"), shared.env, config)
    except LLMNotConfigured as exc:  # its chat surfaces say why, as the gateway's model would
        log.warning("agent %s: %s", name, exc)
        return UnconfiguredLLM(str(exc), wanted=f"{config.model.provider}/{config.model.name}")


def _switchable(shared: Shared, name: str, config: Config, base: LLMClient) -> LLMClient:
    """With `models:`, the agent's model and those of `models:` it may switch to
    (agents.<name>.models)."""
    spec = shared.config.agents.get(name)
    allowed = spec.models if spec is not None else None
    named = {n: m for n, m in shared.config.models.items() if allowed is None or n in allowed}
    if not named:
        return base
    return SessionModels(
        base, named, lambda m: build_chosen(ModelChoice(m, "chosen in chat"), shared.env, config)
    )


def _soul(home: Path, soul: Path | None) -> Path | None:
    return None if soul is None else soul if soul.is_absolute() else home / soul


def _identity(name: str, text: str | None) -> FileSnapshot | None:
    return None if text is None else FileSnapshot(Path(f"agents.{name}.identity"), text)
