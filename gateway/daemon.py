"""The composition root and the daemon's lifecycle: build every object once, start, serve, drain, close.

Nothing else constructs the object graph; tests build it through `build_gateway` with their fakes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web

from gateway.access import AccessGate
from gateway.agent import Agent
from gateway.commands import Commands
from gateway.compression import AgentFlush, Compressor
from gateway.config import Config
from gateway.errors import AdapterError, ConfigError, LLMNotConfigured
from gateway.events import Adapter
from gateway.flush import Flusher
from gateway.hints import PlatformFacts, load_platform_facts
from gateway.lifecycle import Policies
from gateway.llm import LLMClient, UnconfiguredLLM, build_llm
from gateway.outbox import Outbox
from gateway.pairing import PairingBook, load_key
from gateway.prompt_inputs import PromptAssembler
from gateway.scheduler import Lifecycle
from gateway.sessions import SessionManager
from gateway.store import Store, utcnow
from gateway.tools import ToolRegistry, build_registry
from gateway.tools.memory import MemoryStore
from gateway.tools.skills import SkillLibrary

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


@dataclass
class Gateway:
    """The assembled object graph."""

    config: Config
    store: Store
    llm: LLMClient
    tools: ToolRegistry
    memory: MemoryStore
    skills: SkillLibrary
    facts: Mapping[str, PlatformFacts]
    prompts: PromptAssembler
    agent: Agent
    outbox: Outbox
    sessions: SessionManager
    adapters: dict[str, Adapter]
    clock: Clock
    web_app: web.Application | None = None
    background: list[asyncio.Task[Any]] = field(default_factory=list)
    lifecycle: Lifecycle | None = None


def build_gateway(config: Config, *, env: Mapping[str, str], adapters: Sequence[Adapter] = (),
                  llm: LLMClient | None = None, clock: Clock = utcnow, probe_ollama: bool = True) -> Gateway:
    config.home.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    if llm is None:
        try:
            llm = build_llm(config, env, probe_ollama=probe_ollama)
        except LLMNotConfigured as exc:
            log.warning("%s", exc)
            llm = UnconfiguredLLM(str(exc))
    memory = MemoryStore(config.home / "memories", config.memory.memory_char_limit, config.memory.user_char_limit)
    skills = SkillLibrary(config.home)
    try:
        tools = build_registry(config.home, enabled=config.agent.tools, memory=memory, skills=skills)
    except ValueError as exc:
        raise ConfigError(str(exc), file=str(config.home / "config.yaml"), key="agent.tools") from None
    facts = load_platform_facts()
    prompts = PromptAssembler(config, facts, memory, skills)
    agent = Agent(llm, tools, max_iterations=config.agent.max_iterations)
    by_platform: dict[str, Adapter] = {a.platform: a for a in adapters}
    outbox = Outbox(store, by_platform, facts, clock=clock)
    gate = AccessGate(config, PairingBook(store, load_key(config.home)), outbox, clock=clock)
    compressor = Compressor(agent=agent, store=store, config=config.agent, clock=clock,
                            flush=AgentFlush(agent=agent, store=store, config=config, tool_names=tools.names(),
                                             read_memory=memory.read, clock=clock))
    policies = Policies(config.session_reset, config.sessions.timezone)
    flusher = Flusher(config=config.memory, store=store, agent=agent, memory=memory, tool_names=tools.names(),
                      home=config.home, db_path=config.db_path, clock=clock)
    lifecycle = Lifecycle(store=store, policies=policies, flusher=flusher, clock=clock)
    sessions = SessionManager(config=config, store=store, agent=agent, prompts=prompts, outbox=outbox,
                              hooks=lifecycle, commands=Commands(policies=policies, clock=clock),
                              adapters=by_platform, clock=clock, tool_names=tools.names(), gate=gate,
                              compressor=compressor)
    lifecycle.attach(sessions)
    return Gateway(config=config, store=store, llm=llm, tools=tools, memory=memory, skills=skills, facts=facts,
                   prompts=prompts, agent=agent, outbox=outbox, sessions=sessions, adapters=by_platform,
                   clock=clock, lifecycle=lifecycle)


def platform_adapters(config: Config) -> list[Adapter]:
    """The adapters the config asks for; the web chat is always there unless disabled."""
    found: list[Adapter] = []
    if config.web.enabled:
        from adapters.webchat import WebChatAdapter
        token = config.web.auth_token.value if config.web.auth_token else None
        found.append(WebChatAdapter(auth_token=token))
    if config.telegram is not None:
        from adapters.telegram import TelegramAdapter
        found.append(TelegramAdapter(config.telegram))
    return found


def check_web_binding(config: Config) -> None:
    """The web chat is open to whoever reaches it, so off-loopback it needs a token."""
    host = config.web.host
    if not config.web.enabled or config.web.auth_token:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(f"web.host is {host!r}, which is not a loopback address; set web.auth_token "
                          "(e.g. web.auth_token: ${GATEWAY_WEB_TOKEN}) or bind to 127.0.0.1",
                          file=str(config.home / "config.yaml"), key="web.auth_token")


class Daemon:
    """start → serve → drain with a deadline → close. Signal handlers only set the stop event."""

    def __init__(self, gateway: Gateway, *, install_signals: bool = True) -> None:
        self.gw = gateway
        self.install_signals = install_signals
        self.stop_event = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.web_port: int | None = None
        self._signals = 0

    async def start(self) -> None:
        gw = self.gw
        check_web_binding(gw.config)
        if self.install_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal)
        if gw.config.web.enabled:
            await self._start_web()
        for adapter in gw.adapters.values():
            try:
                await adapter.start(gw.sessions.submit)
                log.info("adapter %s started", adapter.platform)
            except AdapterError as exc:
                log.error("%s", exc)
        await gw.outbox.deliver_pending()
        if gw.lifecycle is not None:
            await gw.lifecycle.start()
        resumed, expired = await gw.sessions.replay()
        if resumed or expired:
            log.info("replay: %s messages resumed, %s answered with the offline note", resumed, expired)

    async def _start_web(self) -> None:
        app = self.gw.web_app or web.Application()
        self.gw.web_app = app
        web_adapter = self.gw.adapters.get("web")
        if web_adapter is not None and hasattr(web_adapter, "attach"):
            web_adapter.attach(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.gw.config.web.host, self.gw.config.web.port)
        await site.start()
        server = site._server
        self.web_port = server.sockets[0].getsockname()[1] if server and server.sockets else None  # type: ignore[union-attr]
        log.info("web chat at http://%s:%s", self.gw.config.web.host, self.web_port)

    def _on_signal(self) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: stopping now")
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        self.stop_event.set()

    async def serve(self) -> None:
        await self.stop_event.wait()

    async def stop(self) -> None:
        gw = self.gw
        gw.sessions.stop_accepting()
        deadline = gw.config.daemon.drain_seconds
        started = asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(gw.sessions.wait_idle(), deadline)
        except TimeoutError:
            log.warning("drain deadline (%ss) passed; unfinished turns stay stored for replay", deadline)
            await gw.sessions.cancel_all()
        if gw.lifecycle is not None:  # flushes get what is left of the drain deadline; the rest stay pending
            left = deadline - (asyncio.get_running_loop().time() - started)
            await gw.lifecycle.stop(max(left, 0.0))
        for adapter in gw.adapters.values():
            try:
                await adapter.stop()
            except Exception:  # noqa: BLE001 - one adapter's failure must not block closing the rest
                log.exception("adapter %s failed to stop", adapter.platform)
        for task in gw.background:
            task.cancel()
        await asyncio.gather(*gw.background, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        await gw.llm.close()
        gw.store.close()


async def run_daemon(gateway: Gateway, *, install_signals: bool = True) -> None:
    daemon = Daemon(gateway, install_signals=install_signals)
    try:
        await daemon.start()
        await daemon.serve()
    finally:
        await daemon.stop()
