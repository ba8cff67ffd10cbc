"""One agent as the turn path sees it, and the roster of every agent of a gateway.

An agent is a namespace: its settings, its model, its memory folder and skills, its tools (bound to
that memory) and its prompt inputs (identity, hints). The session row names its agent; whatever
works on a session takes the parts of that agent, here, and of no other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from gateway.agent.loop import Agent
from gateway.agent.tools.catalog import ToolCatalog
from gateway.config.agents import Bindings, place_of
from gateway.config.settings import Config
from gateway.events import MAIN_AGENT, Inbound
from gateway.knowledge.memory import MemoryStore
from gateway.knowledge.skills import SkillLibrary
from gateway.llm.factory import SessionModels
from gateway.llm.types import LLMClient
from gateway.prompt.inputs import PromptAssembler
from gateway.prompt.session_tools import SessionTools

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentRuntime:
    """The parts of agent `name`: `config` is its settings (the top-level ones with its changes),
    `loop` the model ⇄ tools loop over its model and tools, `tools` what its new sessions get. `llm`
    is its model (with `models:`, the one each conversation chose); `own` the client it alone
    holds."""

    name: str
    config: Config
    llm: LLMClient
    loop: Agent
    memory: MemoryStore
    skills: SkillLibrary
    catalog: ToolCatalog
    tools: SessionTools
    prompts: PromptAssembler
    own: LLMClient | None = None

    async def close(self) -> None:
        """The clients only this agent holds: its own model, the models /model switched to."""
        if isinstance(self.llm, SessionModels):
            await self.llm.close()
        if self.own is not None:
            await self.own.close()


class Roster:
    """Every agent's runtime by name, built once each, on first use. An agent no longer in the
    config (its sessions or jobs outlived a change) still gets one: the top-level settings over its
    own memory folder, so what it wrote stays its own."""

    def __init__(
        self,
        build: Callable[[str], AgentRuntime],
        names: Sequence[str],
        bindings: Bindings | None = None,
    ) -> None:
        self._build = build
        self.names = tuple(names)
        self.bindings = bindings
        self._built: dict[str, AgentRuntime] = {}

    def route(self, inbound: Inbound) -> Inbound:
        """The message with the agent that answers it (`bindings:`, then the default agent)."""
        if self.bindings is None:
            return inbound
        return replace(inbound, agent=self.bindings.agent_for(place_of(inbound)))

    def get(self, name: str) -> AgentRuntime:
        found = self._built.get(name)
        if found is None:
            if name not in self.names:
                log.warning(
                    "agent %r is not configured (any more); its sessions run with the "
                    "top-level settings and its own memory",
                    name,
                )
            found = self._built[name] = self._build(name)
        return found

    def of(self, holder: object) -> AgentRuntime:
        """The runtime of whatever names an agent (a session row, a job, a message)."""
        return self.get(str(getattr(holder, "agent", MAIN_AGENT)))

    @property
    def main(self) -> AgentRuntime:
        return self.get(MAIN_AGENT)

    def __iter__(self) -> Iterator[AgentRuntime]:
        """The configured agents (built now, if they were not yet)."""
        return iter([self.get(name) for name in self.names])

    def built(self) -> list[AgentRuntime]:
        return list(self._built.values())
