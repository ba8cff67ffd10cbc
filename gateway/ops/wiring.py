"""The composition root: builds the gateway's object
graph once, bottom-up, and the configured adapters.

The only place that decides which concrete class plays each part; tests build the same graph with
fakes (`build_gateway(..., adapters=[fake], llm=fake)`).
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
from gateway.agent.tools.catalog import ToolCatalog, WebTools
from gateway.agent.tools.mcp import McpTools
from gateway.agent.tools.policy import check_tool_names
from gateway.agent.tools.registry import ToolRegistry
from gateway.agents.build import Admins, Shared, SharedTools, roster_for
from gateway.agents.runtime import Roster
from gateway.approvals.menus import Menus
from gateway.approvals.waits import Waits
from gateway.config.agents import check_agents
from gateway.config.platforms import platform_accounts
from gateway.config.settings import Config, DiscordConfig, SlackConfig, TelegramConfig
from gateway.delivery.files import ChatFiles
from gateway.delivery.outbox import Backoff, Outbox, Pacing, RetryPolicy
from gateway.delivery.pacing import ChatPacer
from gateway.delivery.previews import PreviewBook
from gateway.delivery.ratelimit import RateLimiter
from gateway.delivery.stream import Streams
from gateway.delivery.voice import voice_replies
from gateway.errors import LLMNotConfigured
from gateway.events import Adapter, MemberRoles, account_of, adapter_key
from gateway.knowledge.forget import web_uploads
from gateway.knowledge.memory import MemoryStore
from gateway.knowledge.people import PeopleBook
from gateway.knowledge.search import SessionSearch
from gateway.knowledge.skills import SkillLibrary
from gateway.llm.factory import (
    SessionModels,
    UnconfiguredLLM,
    answering,
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
from gateway.ops.waiting import approval_policy, wire_waits
from gateway.prompt.hints import PlatformFacts, load_platform_facts
from gateway.prompt.inputs import PromptAssembler
from gateway.sandbox.report import describe as describe_command
from gateway.scheduling.book import JobBook
from gateway.scheduling.command import JobsCommand
from gateway.scheduling.jobstore import JobStore
from gateway.scheduling.runner import JobRunner, JobScope
from gateway.scheduling.turn import JobTurn
from gateway.sessions.commands import ChoiceCommands, Commands
from gateway.sessions.compression import AgentFlush, Compressor
from gateway.sessions.flush import Flusher, FlushTiming
from gateway.sessions.lifecycle import Policies
from gateway.sessions.manager import SessionManager, SessionServices, TurnPorts
from gateway.sessions.timers import Lifecycle
from gateway.store.database import Store
from gateway.store.rows import utcnow
from gateway.telemetry.logs import redactor_for
from gateway.telemetry.metrics import Metrics
from gateway.worker.parent import Worker

log = logging.getLogger(__name__)
# The event loop's connection waits this long for another process's write lock; longer waits happen
# off the hot path (store.health.write sleeps and tries again), so a CLI or backup holding the lock
# never stalls the loop.
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
    # how the model was chosen: configured, auto-detected from …, not configured
    model_source: str = "given"
    media: AttachmentTurns | None = None
    models: SessionModels | None = None  # with `models:`: the ones /model switches to
    worker: Worker | None = None  # parses pages, PDFs, office files and pictures in a child process
    waits: Waits | None = None  # turns waiting for a person (gateway/approvals/), its `policy`

    def tool_names(self, platform: str) -> list[str]:
        """The tools a new session on `platform` would get
        now (MCP tools only once the hub has started)."""
        return [s.name for s in self.catalog.current(platform)] if self.catalog is not None else []

    async def close_tools(self) -> None:
        """Stop the MCP servers and close the HTTP sessions of the web tools, the agents' own models
        and the models /model switches to, and the speech service (shutdown, or the end of a CLI
        command); the approvals' timers stop (their requests stay stored)."""
        if self.waits is not None:
            await self.waits.close()
        for runtime in self.roster.built() if self.roster is not None else ():
            await runtime.close()
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
    # masks secrets in what operators see (/status), as in the logs
    redact: Callable[[str], str] = str
    roster: Roster | None = None  # every agent (gateway/agents/); the fields above are main's

    @property
    def people(self) -> PeopleBook:
        assert self.roles is not None
        return self.roles.people


def build_gateway(
    config: Config,
    *,
    env: Mapping[str, str],
    adapters: Sequence[Adapter] = (),
    llm: LLMClient | None = None,
    clock: Clock = utcnow,
    probe_ollama: bool = True,
    sleep: Sleep = asyncio.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    busy_timeout_ms: int = LOOP_BUSY_TIMEOUT_MS,
) -> Gateway:
    """The object graph, built once, bottom-up: store →
    model → knowledge and tools → delivery → sessions.
    `busy_timeout_ms`: the store's wait for another
    process's lock (longer while `gateway run` starts)."""
    # memories and chat history: the owner's alone
    config.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    store = Store(config.db_path, busy_timeout_ms=busy_timeout_ms)
    store.index_pending()  # what a killed process stored but had not indexed yet (search_index.py)
    metrics = Metrics()
    source = "given"
    if llm is None:
        llm, source = _model(config, env, probe_ollama=probe_ollama)
    book = (
        JobBook(jobs=JobStore(store), config=config, clock=clock)
        if config.schedule.enabled
        else None
    )
    worker = Worker(memory_mb=config.media.worker_memory_mb)  # starts on the first page or file
    vision = functools.partial(_sees_images, llm)
    roles = Roles(config, PeopleBook(store), PairingBook(store, load_key(config.home)), clock=clock)
    facts = _platform_facts(config)
    by_platform: dict[str, Adapter] = {adapter_key(a.platform, account_of(a)): a for a in adapters}
    supervisor = Supervisor(by_platform, clock=clock, sleep=sleep, watchdogs=_watchdogs(config))
    limiter = RateLimiter(clock=monotonic, sleep=sleep)
    previews = PreviewBook(store, ChatPacer(monotonic), clock=clock, sleep=sleep)
    backoff = Backoff(attempts=config.delivery.max_send_attempts)
    outbox = Outbox(
        store,
        by_platform,
        facts,
        Pacing(clock, sleep=sleep, backoff=backoff, limiter=limiter),
        retry=RetryPolicy(available=supervisor.is_up),
        metrics=metrics,
        previews=previews,
    )
    outbox.voice = voice_replies(config.voice, env, outbox)
    shared_tools, hub = _tools(
        config,
        env,
        book,
        store,
        sleep=sleep,
        monotonic=monotonic,
        vision=vision,
        worker=worker,
        roles=roles,
        outbox=outbox,
    )
    roster = roster_for(Shared(config, env, store, clock, facts, llm, shared_tools))
    main = roster.main  # the Gateway's own fields (memory, prompts, tools, …) are the agent main's
    memory, skills, catalog, agent = main.memory, main.skills, main.catalog, main.loop
    prompts, tools = main.prompts, main.loop.tools
    streams = Streams(config.streaming, previews, facts, limiter, sleep=sleep)
    migrate_global_profile(roles, memory)
    gate = AccessGate(config, roles.pairing, outbox, clock=clock, people=roles.people)
    Linker(gate, roles, memory, clock=clock)  # answers /link for the gate
    media = _media(
        config,
        env,
        store=store,
        vision=vision,
        adapters=by_platform,
        clock=clock,
        sleep=sleep,
        worker=worker,
    )
    sessions, lifecycle = _sessions(
        config,
        store=store,
        roster=roster,
        outbox=outbox,
        adapters=by_platform,
        clock=clock,
        metrics=metrics,
        gate=gate,
        jobs_command=JobsCommand(book),
        roles=roles,
        streams=streams,
        media=media,
    )
    jobs = _jobs(config, book, sessions=sessions, gate=gate)
    return Gateway(
        config=config,
        store=store,
        llm=llm,
        tools=tools,
        memory=memory,
        skills=skills,
        facts=facts,
        prompts=prompts,
        agent=agent,
        outbox=outbox,
        sessions=sessions,
        adapters=by_platform,
        clock=clock,
        lifecycle=lifecycle,
        supervisor=supervisor,
        metrics=metrics,
        catalog=catalog,
        mcp=hub,
        web=shared_tools.web,
        jobs=jobs,
        model_source=source,
        roles=roles,
        redact=redactor_for(config, env),
        media=media,
        roster=roster,
        models=main.llm if isinstance(main.llm, SessionModels) else None,
        worker=worker,
        waits=wire_waits(config, sessions, gate, shared_tools.holds, streams, sleep),
    )


def _sees_images(default: LLMClient) -> bool:
    """Whether the model answering this task's turn (its agent's, as /model chose; `default` outside
    a turn) takes pictures."""
    return sees_images_client(answering(default))


def _model(config: Config, env: Mapping[str, str], *, probe_ollama: bool) -> tuple[LLMClient, str]:
    """The model client and how it was chosen (the start-up banner and the dashboard say which)."""
    try:
        choice = choose_model(config, env, probe_ollama=probe_ollama)
    except LLMNotConfigured as exc:
        # the chat surfaces say what to set instead of the daemon refusing to start
        log.warning("%s", exc)
        return UnconfiguredLLM(str(exc)), "not configured"
    try:
        return build_chosen(choice, env, config), choice.source
    except LLMNotConfigured as exc:
        # chosen, but it cannot answer: say so by name, not "run gateway init"
        log.warning("%s", exc)
        return UnconfiguredLLM(
            str(exc), wanted=f"{choice.model.provider}/{choice.model.name}"
        ), choice.source


def _media(
    config: Config,
    env: Mapping[str, str],
    *,
    store: Store,
    vision: Callable[[], bool],
    adapters: Mapping[str, Adapter],
    clock: Clock,
    sleep: Sleep,
    worker: Worker,
) -> AttachmentTurns:
    """Attachments: the pipeline knows whether the model sees images and whether voice can be
    transcribed. An album waits in real time for its parts (they arrive over the network, whatever
    the gateway's clock says)."""
    stt = config.media.transcription
    transcriber = None
    if stt is not None:
        key = env.get(stt.api_key_env) if stt.api_key_env else None
        if stt.api_key_env and not key:
            log.warning(
                "media.transcription.api_key_env names %s, which is not set; transcription "
                "requests go without a key",
                stt.api_key_env,
            )
        transcriber = Transcriber(stt, key)
    pipeline = MediaPipeline(
        config.media,
        config.home,
        vision=vision,
        transcriber=transcriber,
        sleep=sleep,
        worker=worker,
    )
    return AttachmentTurns(store=store, pipeline=pipeline, adapters=adapters, clock=clock)


def _tools(
    config: Config,
    env: Mapping[str, str],
    jobs: JobBook | None,
    store: Store,
    *,
    sleep: Sleep,
    monotonic: Callable[[], float],
    vision: Callable[[], bool],
    worker: Worker,
    roles: Roles,
    outbox: Outbox,
) -> tuple[SharedTools, McpHub | None]:
    """What every agent's tools share: the web tools' clients, the job book, the session search
    and, with mcp_servers, the hub (started by the daemon); MCP results' pictures reach the model as
    pictures when the model answering sees images (`vision`); who may have the shell (`roles`) and
    how the files its commands write reach the chat (`outbox.files`)."""
    check_tool_names(config)
    check_agents(config)
    hub = provider = None
    if config.mcp_servers:
        hub = McpHub(
            config.mcp_servers, log_dir=config.home / "logs" / "mcp", sleep=sleep, clock=monotonic
        )
        provider = McpTools(
            hub, vision=vision, max_image_bytes=config.media.max_bytes, worker=worker
        )
    web = _web_tools(config, env, monotonic, worker)
    holds = approval_policy(config, store, provider, redactor_for(config, env))
    shell = config.tools.shell
    if shell.enabled and shell.approve == "always":
        holds.always_ask("shell", describe_command, each_call=True)  # each command, shown whole
    admins = Admins(roles.admits, roles.admin_owned) if shell.enabled else None
    files = outbox.files = ChatFiles.of(outbox, shell, config.home)
    attach = files.attach if files is not None else None
    return SharedTools(web, jobs, SessionSearch(), provider, holds, admins, attach), hub


def _web_tools(
    config: Config, env: Mapping[str, str], monotonic: Callable[[], float], worker: Worker
) -> WebTools:
    fetch = config.tools.web_fetch
    client = WebClient(
        allow_private=fetch.allow_private,
        max_bytes=fetch.max_bytes,
        timeout_s=fetch.timeout_s,
        max_redirects=fetch.max_redirects,
        read_cpu_s=fetch.read_cpu_s,
        worker=worker,
    )
    found = config.tools.web_search
    search = None
    if found is not None:
        key = env.get(found.api_key_env) if found.api_key_env else None
        if found.api_key_env and not key:
            log.warning("tools.web_search: %s is not set; web_search is off", found.api_key_env)
        else:
            search = WebSearch(
                found.provider, base_url=found.base_url, api_key=key, timeout_s=found.timeout_s
            )
    return WebTools(
        client,
        max_chars=fetch.max_chars,
        search=search,
        search_results=found.max_results if found else 5,
        pages=PageCache(clock=monotonic),
    )


def _platform_facts(config: Config) -> dict[str, PlatformFacts]:
    facts = load_platform_facts()
    if config.discord is not None and config.discord.max_lines:
        # the user's line cap beats the shipped one
        facts = {**facts, "discord": replace(facts["discord"], max_lines=config.discord.max_lines)}
    return facts


def _sessions(
    config: Config,
    *,
    store: Store,
    roster: Roster,
    outbox: Outbox,
    adapters: dict[str, Adapter],
    clock: Clock,
    metrics: Metrics,
    gate: AccessGate,
    jobs_command: JobsCommand,
    roles: Roles,
    streams: Streams,
    media: AttachmentTurns,
) -> tuple[SessionManager, Lifecycle]:
    """The session manager with its gate, compression, pre-reset flush, lifecycle timers and
    commands; each session's turns, compression and flush run with its own agent's parts
    (roster)."""
    flush = AgentFlush(roster=roster, store=store, config=config, clock=clock, callers=roles)
    compressor = Compressor(roster=roster, store=store, clock=clock, flush=flush)
    own = {n: s.session_reset for n, s in config.agents.items() if s.session_reset is not None}
    policies = Policies(config.session_reset, config.sessions.timezone, own)
    flusher = Flusher(
        config=config.memory,
        store=store,
        roster=roster,
        home=config.home,
        db_path=config.db_path,
        timing=FlushTiming(clock),
        callers=roles,
    )
    lifecycle = Lifecycle(store=store, policies=policies, flusher=flusher, clock=clock)
    commands = Commands(policies=policies, clock=clock)
    commands.add("jobs", jobs_command)
    menus = Menus(load_key(config.home))  # /model's list as buttons
    choices = ChoiceCommands(config, clock=clock, is_admin=roles.sender_is_admin, menus=menus)
    commands.add("voice", choices.voice)
    commands.add("model", choices.model)
    services = SessionServices(
        hooks=lifecycle,
        gate=gate,
        commands=commands,
        compressor=compressor,
        metrics=metrics,
        callers=roles,
    )
    sessions = SessionManager(
        config=config,
        store=store,
        roster=roster,
        clock=clock,
        ports=TurnPorts(outbox, adapters, streams=streams, media=media),
        services=services,
    )
    lifecycle.attach(sessions)
    outbox.choices.append(menus.choices_for)
    gate.menus = functools.partial(choices.tap, sessions)
    return sessions, lifecycle


def _jobs(
    config: Config, book: JobBook | None, *, sessions: SessionManager, gate: AccessGate
) -> JobRunner | None:
    """Scheduled jobs: each run is its job's agent's turn, with the run's own tool list (the `cron`
    platform's, without `schedule` unless allowed); the runner serves the jobs of this process's
    platforms and asks the same gate about each creator at run time."""
    if book is None:
        return None
    turn = JobTurn(manager=sessions, jobs=book.jobs, schedule=config.schedule.jobs_may_schedule)
    adapters = sessions.adapters
    scope = JobScope(
        platforms={a.platform for a in adapters.values()},
        allowed=gate.is_allowed,
        members={k: a for k, a in adapters.items() if isinstance(a, MemberRoles)},
    )
    runner = JobRunner(jobs=book.jobs, config=config, turn=turn, clock=sessions.clock, scope=scope)
    book.changed = runner.changed
    return runner


def _watchdogs(config: Config) -> dict[str, Watchdog]:
    """Per-platform inbound-liveness windows (only adapters that can `ping` are watched)."""
    found: dict[str, Watchdog] = {}
    for name, slack in platform_accounts(config.slack).items():  # Socket Mode: silent, "connected"
        minutes = getattr(slack, "liveness_minutes", 5.0)
        found[adapter_key("slack", name)] = Watchdog(silence=minutes * 60)
    return found


def platform_adapters(
    config: Config, *, monotonic: Callable[[], float] = time.monotonic
) -> list[Adapter]:
    """The adapters the config asks for; the web chat is always there unless disabled.

    `monotonic` must be the gateway's own clock: an adapter that holds sends back (Telegram's flood
    waits) and the outbox that schedules them have to agree on when a wait is over."""
    found: list[Adapter] = []
    limits = Limits(max_connections=config.daemon.max_connections)
    if config.web.enabled:
        from adapters.webchat import WebChatAdapter

        found.append(
            WebChatAdapter(
                uploads=web_uploads(config.home), max_upload_bytes=config.media.max_bytes
            )
        )
    for name, tg in platform_accounts(config.telegram).items():  # one adapter per bot account
        from adapters.telegram.adapter import TelegramAdapter

        assert isinstance(tg, TelegramConfig)
        found.append(
            TelegramAdapter(
                tg,
                clock=monotonic,
                account=name,
                serve=functools.partial(
                    serve_http, limits=limits, name=adapter_key("telegram", name)
                ),
            )
        )
    for name, dc in platform_accounts(config.discord).items():
        from adapters.discord.adapter import DiscordAdapter

        assert isinstance(dc, DiscordConfig)
        found.append(DiscordAdapter(dc, account=name))
    for name, sl in platform_accounts(config.slack).items():
        from adapters.slack.adapter import SlackAdapter

        assert isinstance(sl, SlackConfig)
        found.append(
            SlackAdapter(
                sl,
                account=name,
                serve=functools.partial(serve_http, limits=limits, name=adapter_key("slack", name)),
            )
        )
    return found
