"""Wires the turns that wait for a person (gateway/approvals/): the check every agent's dispatch
point runs (the approval policy, shared by the agents), the waiting turns with the answers the gate
hands them, and the buttons the outbox adds to a request's message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.access.gate import AccessGate
from gateway.access.roles import Roles
from gateway.agent.tools.mcp import McpTools
from gateway.agent.tools.registry import HoldCheck
from gateway.approvals.answers import Answers
from gateway.approvals.book import ApprovalBook
from gateway.approvals.policy import ApprovalPolicy
from gateway.approvals.turns import Waiting
from gateway.approvals.waits import WaitPorts, Waits
from gateway.config.settings import Config
from gateway.delivery.stream import Streams
from gateway.sessions.manager import SessionManager
from gateway.store.database import Store

Sleep = Callable[[float], Awaitable[None]]


def approval_policy(
    config: Config, store: Store, provider: McpTools | None, redact: Callable[[str], str]
) -> ApprovalPolicy:
    """Which calls wait: MCP annotations (read from the servers' tools), tools.approval, and the
    "for this session" answers on record."""
    hints = provider.hints if provider is not None else lambda name: None
    return ApprovalPolicy(config, hints, ApprovalBook(store).granted, redact=redact)


def wire_waits(
    config: Config,
    sessions: SessionManager,
    gate: AccessGate,
    holds: HoldCheck | None,
    streams: Streams,
    sleep: Sleep,
) -> Waits:
    """The waiting turns, the answers at the gate and a request's buttons (the check itself sits at
    each agent's dispatch point: `SharedTools.holds`)."""
    policy = holds if isinstance(holds, ApprovalPolicy) else None
    ports = WaitPorts(
        store=sessions.store,
        outbox=sessions.outbox,
        adapters=sessions.adapters,
        clock=sessions.clock,
        sleep=sleep,
        streams=streams,
    )
    roles = sessions.callers
    is_admin = roles.sender_is_admin if isinstance(roles, Roles) else None
    waits = Waits(ports, config, policy, is_admin=is_admin)
    sessions.outbox.choices.append(waits.choices_for)
    answers = Answers(waits)
    sessions.waiting = Waiting(waits, answers)
    gate.answers = answers
    return waits
