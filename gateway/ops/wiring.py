"""The composition root: builds the gateway's object graph once, bottom-up, and the configured adapters.

The only place that decides which concrete class plays each part; tests build the same graph with fakes
(`build_gateway(..., adapters=[fake], llm=fake)`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from aiohttp import web

from gateway.access.gate import AccessGate
from gateway.access.linking import Linker
from gateway.access.pairing import PairingBook, load_key
from gateway.access.roles import Roles, migrate_global_profile
from gateway.agent.loop import Agent
from gateway.agent.tools.catalog import ToolCatalog, WebTools, build_registry, check_tool_names
from gateway.agent.tools.mcp import McpTools
from gateway.agent.tools.policy import ToolPolicy
from gateway.agent.tools.registry import ToolRegistry
from gateway.config.settings import Config
from gateway.delivery.outbox import Backoff, Outbox
from gateway.delivery.pacing import ChatPacer
from gateway.delivery.previews import PreviewBook
from gateway.delivery.ratelimit import RateLimiter
from gateway.delivery.stream import Streams
from gateway.delivery.voice import VoiceReplies
from gateway.errors import LLMNotConfigured
from gateway.events import Adapter, Inbound, MemberRoles
from gateway.knowledge.forget import web_uploads
from gateway.knowledge.memory import MemoryStore
from gateway.knowledge.people import PeopleBook
from gateway.knowledge.skills import SkillLibrary
from gateway.llm.factory import (
    ModelChoice,
    SessionModels,
    UnconfiguredLLM,
    build_chosen,
    choose_model,
    sees_images_client,
)
from gateway.llm.types import LLMClient
from gateway.mcp.hub import McpHub
from gateway.media.prepare import MediaPipeline
from gateway.media.transcribe import Transcriber
from gateway.media.turns import AttachmentTurns
from gateway.net.fetch import WebClient
from gateway.net.pages import PageCache
from gateway.net.search import WebSearch
from gateway.ops.http_limits import Limits
from gateway.ops.http_limits import serve as serve_http
from gateway.ops.supervisor import Supervisor, Watchdog
from gateway.prompt.hints import PlatformFacts, load_platform_facts
from gateway.prompt.inputs import PromptAssembler
from gateway.prompt.session_tools import SessionTools
from gateway.scheduling.book import JobBook
from gateway.scheduling.command import JobsCommand
from gateway.scheduling.jobstore import JobStore
from gateway.scheduling.runner import JobRunner
from gateway.scheduling.turn import JobTurn, RunTools
from gateway.sessions.commands import ChoiceCommands, Commands
from gateway.sessions.compression import AgentFlush, Compressor
from gateway.sessions.flush import Flusher
from gateway.sessions.lifecycle import Policies
from gateway.sessions.manager import SessionManager
from gateway.sessions.timers import Lifecycle
from gateway.store.database import Store
from gateway.store.rows import utcnow
from gateway.telemetry.logs import redactor_for
from gateway.telemetry.metrics import Metrics
from gateway.voice.speaker import Speaker, tools_problem
from gateway.worker.parent import Worker

log = logging.getLogger(__name__)
# The event loop's connection waits this long for another process's write lock; longer waits happen off the hot
# path (store.health.write sleeps and tries again), so a CLI or backup holding the lock never stalls the loop.
LOOP_BUSY_TIMEOUT_MS = 50

Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]


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
    supervisor: Supervisor | None = None
    metrics: Metrics = field(default_factory=Metrics)
    catalog: ToolCatalog | None = None
    mcp: McpHub | None = None  # only with mcp_servers; the daemon starts and stops it
    web: WebTools | None = None
    jobs: JobRunner | None = None
    model_source: str = "given"  # how the model was chosen: configured, auto-detected from …, not configured
    media: AttachmentTurns | None = None
    models: SessionModels | None = None  # with `models:`: the ones /model switches to
    worker: Worker | None = None  # parses pages, PDFs, office files and pictures in a child process

    def tool_names(self, platform: str) -> list[str]:
        """The tools a new session on `platform` would get now (MCP tools only once the hub has started)."""
        return [s.name for s in self.catalog.current(platform)] if self.catalog is not None else []

    async def close_tools(self) -> None:
        """Stop the MCP servers and close the HTTP sessions of the web tools, the models /model
        switches to and the speech service (shutdown, or the end of a CLI command)."""
        if self.models is not None:
            await self.models.close()
        if self.outbox.voice is not None:
            await self.outbox.voice.close()
        if self.mcp is not None:
            await self.mcp.stop()
        if self.web is not None:
            await self.web.client.close()
            if self.web.search is not None:
                await self.web.search.close()
        if self.worker is not None:
            await self.worker.close()
    roles: Roles | None = None
    redact: Callable[[str], str] = str  # masks secrets in what operators see (/status), as in the logs

    @property
    def people(self) -> PeopleBook:
        assert self.roles is not None
        return self.roles.people


def build_gateway(config: Config, *, env: Mapping[str, str], adapters: Sequence[Adapter] = (),
                  llm: LLMClient | None = None, clock: Clock = utcnow, probe_ollama: bool = True,
                  sleep: Sleep = asyncio.sleep, monotonic: Callable[[], float] = time.monotonic,
                  busy_timeout_ms: int = LOOP_BUSY_TIMEOUT_MS) -> Gateway:
    """The object graph, built once, bottom-up: store → model → knowledge and tools → delivery → sessions.
    `busy_timeout_ms`: how long the store waits for another process's lock (`gateway run` waits longer while it
    starts; the daemon sets LOOP_BUSY_TIMEOUT_MS once it serves)."""
    config.home.mkdir(mode=0o700, parents=True, exist_ok=True)  # memories and chat history: the owner's alone
    store = Store(config.db_path, busy_timeout_ms=busy_timeout_ms)
    store.index_pending()  # what a killed process stored but had not indexed yet (search_index.py)
    metrics = Metrics()
    source = "given"
    if llm is None:
        llm, source = _model(config, env, probe_ollama=probe_ollama)
    memory, skills = _knowledge(config)
    book = JobBook(jobs=JobStore(store), config=config, clock=clock) if config.schedule.enabled else None
    worker = Worker(memory_mb=config.media.worker_memory_mb)  # starts on the first page or file
    tools, hub, web = _tools(config, env, memory, skills, book, sleep=sleep, monotonic=monotonic,
                             vision=sees_images_client(llm), worker=worker)
    catalog = ToolCatalog(tools, ToolPolicy.of(config))
    session_tools = SessionTools(store=store, catalog=catalog, clock=clock)
    facts = _platform_facts(config)
    models = _models(config, env, llm)
    agent = Agent(models or llm, tools, max_iterations=config.agent.max_iterations)
    by_platform: dict[str, Adapter] = {a.platform: a for a in adapters}
    supervisor = Supervisor(by_platform, clock=clock, sleep=sleep, watchdogs=_watchdogs(config))
    limiter = RateLimiter(clock=monotonic, sleep=sleep)
    previews = PreviewBook(store, ChatPacer(monotonic), clock=clock, sleep=sleep)
    outbox = Outbox(store, by_platform, facts, clock=clock, sleep=sleep, available=supervisor.is_up,
                    limiter=limiter, backoff=Backoff(attempts=config.delivery.max_send_attempts), metrics=metrics,
                    previews=previews)
    outbox.voice = _voice(config, env, store=store, adapters=by_platform, facts=facts, clock=clock)
    streams = Streams(config.streaming, previews, facts, limiter, sleep=sleep)
    prompts = PromptAssembler(config, facts, memory, skills)
    roles = Roles(config, PeopleBook(store), PairingBook(store, load_key(config.home)), clock=clock)
    migrate_global_profile(roles, memory)
    gate = AccessGate(config, roles.pairing, outbox, clock=clock, people=roles.people)
    Linker(gate, roles, memory, clock=clock)  # answers /link for the gate
    media = _media(config, env, store=store, llm=llm, adapters=by_platform, clock=clock,
                   sleep=sleep, worker=worker)
    sessions, lifecycle = _sessions(config, store=store, agent=agent, prompts=prompts, outbox=outbox, memory=memory,
                                    tools=session_tools, adapters=by_platform, clock=clock, metrics=metrics,
                                    gate=gate, jobs_command=JobsCommand(book), roles=roles, streams=streams,
                                    media=media)
    jobs = _jobs(config, book, sessions=sessions, prompts=prompts, catalog=catalog, gate=gate)
    return Gateway(config=config, store=store, llm=llm, tools=tools, memory=memory, skills=skills, facts=facts,
                   prompts=prompts, agent=agent, outbox=outbox, sessions=sessions, adapters=by_platform,
                   clock=clock, lifecycle=lifecycle, supervisor=supervisor, metrics=metrics, catalog=catalog,
                   mcp=hub, web=web, jobs=jobs, model_source=source, roles=roles,
                   redact=redactor_for(config, env), media=media, models=models, worker=worker)


def _knowledge(config: Config) -> tuple[MemoryStore, SkillLibrary]:
    """What the agent knows: memory in scopes and the skills."""
    limits = config.memory
    memory = MemoryStore(config.home / "memories", limits.memory_char_limit,
                         limits.user_char_limit, limits.chat_char_limit)
    return memory, SkillLibrary(config.home)


def _model(config: Config, env: Mapping[str, str], *, probe_ollama: bool) -> tuple[LLMClient, str]:
    """The model client and how it was chosen (the start-up banner and the dashboard say which)."""
    try:
        choice = choose_model(config, env, probe_ollama=probe_ollama)
    except LLMNotConfigured as exc:  # the chat surfaces say what to set instead of the daemon refusing to start
        log.warning("%s", exc)
        return UnconfiguredLLM(str(exc)), "not configured"
    try:
        return build_chosen(choice, env, config), choice.source
    except LLMNotConfigured as exc:  # chosen, but it cannot answer: say so by name, not "run gateway init"
        log.warning("%s", exc)
        return UnconfiguredLLM(str(exc), wanted=f"{choice.model.provider}/{choice.model.name}"), choice.source


def _models(config: Config, env: Mapping[str, str], main: LLMClient) -> SessionModels | None:
    """With `models:`, the client the agent holds: the main model, or a conversation's /model."""
    if not config.models:
        return None
    return SessionModels(main, config.models,
                         lambda m: build_chosen(ModelChoice(m, "chosen in chat"), env, config))


def _voice(config: Config, env: Mapping[str, str], *, store: Store,
           adapters: Mapping[str, Adapter], facts: Mapping[str, PlatformFacts],
           clock: Clock) -> VoiceReplies | None:
    """With `voice.tts`, the answers that are also spoken (docs/voice.md)."""
    tts = config.voice.tts
    if tts is None:
        return None
    key = env.get(tts.api_key_env) if tts.api_key_env else None
    if tts.api_key_env and not key:
        log.warning("voice.tts.api_key_env names %s, which is not set; speech requests go without "
                    "a key", tts.api_key_env)
    missing = tools_problem(tts)
    if missing is not None:
        log.warning("voice.tts: %s; voice replies fail until then (`gateway doctor`)", missing)
    speaker = Speaker(config.voice, tts, key)
    return VoiceReplies(config.voice, speaker, store=store, adapters=adapters, facts=facts,
                        clock=clock)


def _admin_check(roles: Roles, clock: Clock) -> Callable[[Inbound], bool]:
    """Whether a message's sender is an admin (access.admins, linked identities, the one allowed
    person)."""
    def is_admin(inbound: Inbound) -> bool:
        person = roles.people.resolve(inbound.chat.platform, inbound.user_id, now=clock(),
                                      user_name=inbound.user_name, username=inbound.username)
        return roles.is_admin(person)
    return is_admin


def _media(config: Config, env: Mapping[str, str], *, store: Store, llm: LLMClient,
           adapters: Mapping[str, Adapter], clock: Clock, sleep: Sleep,
           worker: Worker) -> AttachmentTurns:
    """Attachments: the pipeline knows whether the model sees images and whether voice can be transcribed. An
    album waits in real time for its parts (they arrive over the network, whatever the gateway's clock says)."""
    stt = config.media.transcription
    transcriber = None
    if stt is not None:
        key = env.get(stt.api_key_env) if stt.api_key_env else None
        if stt.api_key_env and not key:
            log.warning("media.transcription.api_key_env names %s, which is not set; transcription requests go "
                        "without a key", stt.api_key_env)
        transcriber = Transcriber(stt, key)
    pipeline = MediaPipeline(config.media, config.home, vision=sees_images_client(llm),
                             transcriber=transcriber, sleep=sleep, worker=worker)
    return AttachmentTurns(store=store, pipeline=pipeline, adapters=adapters, clock=clock)


def _tools(config: Config, env: Mapping[str, str], memory: MemoryStore, skills: SkillLibrary,
           jobs: JobBook | None, *, sleep: Sleep, monotonic: Callable[[], float], vision: bool,
           worker: Worker) -> tuple[ToolRegistry, McpHub | None, WebTools]:
    """The built-in tools, the web tools' clients and, with mcp_servers, the hub (started by the daemon); MCP
    results' pictures reach the model as pictures when it sees images (`vision`)."""
    check_tool_names(config)
    web = _web_tools(config, env, monotonic, worker)
    registry = build_registry(config.home, memory=memory, skills=skills, web=web, jobs=jobs)
    hub = None
    if config.mcp_servers:
        hub = McpHub(config.mcp_servers, log_dir=config.home / "logs" / "mcp", sleep=sleep, clock=monotonic)
        registry.provider = McpTools(hub, vision=vision, max_image_bytes=config.media.max_bytes,
                                     worker=worker)
    return registry, hub, web


def _web_tools(config: Config, env: Mapping[str, str], monotonic: Callable[[], float],
               worker: Worker) -> WebTools:
    fetch = config.tools.web_fetch
    client = WebClient(allow_private=fetch.allow_private, max_bytes=fetch.max_bytes,
                       timeout_s=fetch.timeout_s, max_redirects=fetch.max_redirects, worker=worker)
    found = config.tools.web_search
    search = None
    if found is not None:
        key = env.get(found.api_key_env) if found.api_key_env else None
        if found.api_key_env and not key:
            log.warning("tools.web_search: %s is not set; web_search is off", found.api_key_env)
        else:
            search = WebSearch(found.provider, base_url=found.base_url, api_key=key, timeout_s=found.timeout_s)
    return WebTools(client, max_chars=fetch.max_chars, search=search, search_results=found.max_results if found else 5,
                    pages=PageCache(clock=monotonic))


def _platform_facts(config: Config) -> dict[str, PlatformFacts]:
    facts = load_platform_facts()
    if config.discord is not None and config.discord.max_lines:  # the user's line cap beats the shipped one
        facts = {**facts, "discord": replace(facts["discord"], max_lines=config.discord.max_lines)}
    return facts


def _sessions(config: Config, *, store: Store, agent: Agent, prompts: PromptAssembler, outbox: Outbox,
              memory: MemoryStore, tools: SessionTools, adapters: dict[str, Adapter], clock: Clock,
              metrics: Metrics, gate: AccessGate, jobs_command: JobsCommand,
              roles: Roles, streams: Streams, media: AttachmentTurns) -> tuple[SessionManager, Lifecycle]:
    """The session manager with its gate, compression, pre-reset flush, lifecycle timers and commands."""
    compressor = Compressor(agent=agent, store=store, config=config.agent, clock=clock,
                            flush=AgentFlush(agent=agent, store=store, config=config, tools=tools,
                                             memory=memory, clock=clock, callers=roles))
    policies = Policies(config.session_reset, config.sessions.timezone)
    flusher = Flusher(config=config.memory, store=store, agent=agent, memory=memory, tools=tools,
                      home=config.home, db_path=config.db_path, clock=clock, callers=roles)
    lifecycle = Lifecycle(store=store, policies=policies, flusher=flusher, clock=clock)
    commands = Commands(policies=policies, clock=clock)
    commands.add("jobs", jobs_command)
    choices = ChoiceCommands(config, clock=clock, is_admin=_admin_check(roles, clock))
    commands.add("voice", choices.voice)
    commands.add("model", choices.model)
    sessions = SessionManager(config=config, store=store, agent=agent, prompts=prompts, outbox=outbox,
                              hooks=lifecycle, commands=commands, adapters=adapters,
                              clock=clock, tools=tools, gate=gate, compressor=compressor, metrics=metrics,
                              callers=roles, streams=streams, media=media)
    lifecycle.attach(sessions)
    return sessions, lifecycle


def _jobs(config: Config, book: JobBook | None, *, sessions: SessionManager, prompts: PromptAssembler,
          catalog: ToolCatalog, gate: AccessGate) -> JobRunner | None:
    """Scheduled jobs: the runs' own tool lists (the `cron` platform's, without `schedule` unless allowed) and the
    runner, which serves the jobs of this process's platforms and asks the same gate about each creator at run time."""
    if book is None:
        return None
    run_tools = SessionTools(store=sessions.store, clock=sessions.clock,
                             catalog=RunTools(catalog, schedule=config.schedule.jobs_may_schedule))
    runner = JobRunner(jobs=book.jobs, config=config, clock=sessions.clock, allowed=gate.is_allowed,
                       turn=JobTurn(manager=sessions, jobs=book.jobs, prompts=prompts, tools=run_tools),
                       platforms=sessions.adapters,
                       members={p: a for p, a in sessions.adapters.items() if isinstance(a, MemberRoles)})
    book.changed = runner.changed
    return runner


def _watchdogs(config: Config) -> dict[str, Watchdog]:
    """Per-platform inbound-liveness windows (only adapters that can `ping` are watched)."""
    found: dict[str, Watchdog] = {}
    if config.slack is not None:  # Socket Mode is known to go silent while "connected"
        found["slack"] = Watchdog(silence=config.slack.liveness_minutes * 60)
    return found


def platform_adapters(config: Config, *, monotonic: Callable[[], float] = time.monotonic) -> list[Adapter]:
    """The adapters the config asks for; the web chat is always there unless disabled.

    `monotonic` must be the gateway's own clock: an adapter that holds sends back (Telegram's flood waits) and
    the outbox that schedules them have to agree on when a wait is over."""
    found: list[Adapter] = []
    limits = Limits(max_connections=config.daemon.max_connections)
    if config.web.enabled:
        from adapters.webchat import WebChatAdapter
        found.append(WebChatAdapter(uploads=web_uploads(config.home),
                                    max_upload_bytes=config.media.max_bytes))
    if config.telegram is not None:
        from adapters.telegram.adapter import TelegramAdapter
        found.append(TelegramAdapter(config.telegram, clock=monotonic,
                                     serve=functools.partial(serve_http, limits=limits, name="telegram")))
    if config.discord is not None:
        from adapters.discord.adapter import DiscordAdapter
        found.append(DiscordAdapter(config.discord))
    if config.slack is not None:
        from adapters.slack.adapter import SlackAdapter
        found.append(SlackAdapter(config.slack, serve=functools.partial(serve_http, limits=limits, name="slack")))
    return found


