"""The daemon's lifecycle around the object graph
(gateway/ops/wiring.py): start, serve, drain, close.

Start-up order, the web listener, background rounds (pending replies, checkpoints, pruning), signals
and the drain deadline live here; what the objects are is wiring's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from datetime import timedelta

from aiohttp import web

from gateway.access.pairing import PairingBook, load_key
from gateway.config.settings import environ
from gateway.errors import StoreError
from gateway.events import AdapterHealth, Inbound, KnownThreads, Submit, SubmitResult, account_of
from gateway.llm.factory import model_problem
from gateway.ops.access_watch import AccessWatch
from gateway.ops.http_limits import Limits, Listening
from gateway.ops.http_limits import serve as serve_http
from gateway.ops.notify import Notifier
from gateway.ops.status import Ops, model_name, package_version
from gateway.ops.supervisor import Supervisor
from gateway.ops.web_guard import WebGuard
from gateway.ops.wiring import LOOP_BUSY_TIMEOUT_MS, Gateway
from gateway.sessions.catchup import CatchUps, joined_threads
from gateway.store.media_files import sweep
from gateway.telemetry.logs import redactor_for
from gateway.telemetry.status_client import connect_host
from gateway.webui.chat_history import WebChatHistory, hello
from gateway.webui.panels import ModelView
from gateway.webui.routes import Dashboard, StatusSources

log = logging.getLogger(__name__)

# a reply left pending (platform down, retries used up) gets another round
RETRY_PENDING_EVERY_S = 30.0
PRUNE_INBOUND_EVERY_S = 3600.0
# WAL checkpoints in a thread; inside a turn's commit they were the p99 of a reply
CHECKPOINT_EVERY_S = 2.0
RESTART_EXIT_CODE = 75  # EX_TEMPFAIL: the unit's RestartForceExitStatus


class Daemon:
    """start → serve → drain with a deadline → close. Signal handlers only set the stop event.

    systemd hears READY=1 once the store is open and the adapters are starting, WATCHDOG=1 from this
    event loop, STOPPING=1 when the drain begins. SIGHUP drains too, then `exit_code` asks for a
    restart (75).
    """

    def __init__(
        self,
        gateway: Gateway,
        *,
        install_signals: bool = True,
        notifier: Notifier | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self.gw = gateway
        # hears the web chat's login link (`gateway run` on a terminal prints it)
        self.announce = announce
        self.guard: WebGuard | None = None
        self.dashboard: Dashboard | None = None
        self.install_signals = install_signals
        self.stop_event = asyncio.Event()
        self._listener: Listening | None = None
        self.web_port: int | None = None
        self._signals = 0
        self.exit_code = 0
        self.notifier = notifier or Notifier()
        self.ops = Ops(
            store=gateway.store,
            metrics=gateway.metrics,
            health=self._health,
            model=gateway.llm,
            redact=gateway.redact,
            model_source=gateway.model_source,
        )
        self._keepalive: asyncio.Task[None] | None = None
        self.access_watch = AccessWatch(
            store=gateway.store,
            outbox=gateway.outbox,
            sessions=gateway.sessions,
            memory=gateway.memory,
            clock=gateway.clock,
        )

    async def start(self) -> None:
        gw = self.gw
        if self.install_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal)
            loop.add_signal_handler(signal.SIGHUP, self._on_restart)
        if gw.config.web.enabled:
            await self._start_web()
        supervisor = gw.supervisor or Supervisor(gw.adapters, clock=gw.clock)
        gw.supervisor = supervisor
        supervisor.hold()  # until its adapter is up, a platform's replies stay recorded as pending
        if gw.lifecycle is not None:
            await gw.lifecycle.start()
        if gw.mcp is not None:
            # before replay: the first sessions get the servers' tools (bounded wait)
            await gw.mcp.start()
        # Replay queues the stored messages before any adapter can hand in a newer one, so per chat
        # order holds.
        resumed, expired = await gw.sessions.replay()
        if resumed or expired:
            log.info(
                "replay: %s messages resumed, %s answered with the offline note", resumed, expired
            )
        if gw.jobs is not None:
            # scheduled jobs: timers rebuilt, what came due while down run (or reported)
            await gw.jobs.start()
        for adapter in gw.adapters.values():
            # threads followed before a restart are followed again (Slack)
            if isinstance(adapter, KnownThreads):
                threads = joined_threads(gw.store, adapter.platform, account=account_of(adapter))
                adapter.remember_threads(threads)
        # Each adapter runs under the supervisor; coming
        # up (again) sends what its platform has pending.
        self._ready()
        # Platforms that never redeliver (Discord) fetch
        # what they missed once each connection is up.
        catchups = CatchUps(
            gw.store, gw.adapters, health=lambda p: supervisor.health().get(p), clock=gw.clock
        )

        async def on_up(platform: str) -> None:
            await asyncio.gather(gw.outbox.deliver_pending(platform), catchups.after_up(platform))

        await supervisor.start(catchups.watch(self._metered(gw.sessions.submit)), on_up=on_up)
        self._start_chores()
        # serving now: the loop waits a moment at most for a lock
        gw.store.set_busy_timeout(LOOP_BUSY_TIMEOUT_MS)

    def _start_chores(self) -> None:
        """The periodic work of a serving daemon, each a background task that stop() cancels."""
        gw, loop = self.gw, asyncio.get_running_loop()
        gw.background.append(
            loop.create_task(gw.outbox.retry_pending(RETRY_PENDING_EVERY_S), name="retry-pending")
        )
        # Approvals, revocations and erasures made from the CLI (or while the daemon was down) are
        # acted on here.
        gw.background.append(loop.create_task(self.access_watch.run(), name="access-watch"))
        gw.background.append(loop.create_task(self._prune_inbound(), name="prune-inbound"))
        gw.background.append(loop.create_task(self._media_retention(), name="media-retention"))
        gw.store.checkpoint_off_loop()
        gw.background.append(loop.create_task(self._checkpoint(), name="wal-checkpoint"))

    async def _checkpoint(self) -> None:
        """Every few seconds: the WAL checkpoint (in a thread), and while writes fail, a probe write
        (on the loop's connection) so readiness comes back with the space even when no turn is
        waiting. Logged once per streak."""
        failing = False
        while True:
            await asyncio.sleep(CHECKPOINT_EVERY_S)
            if not self.gw.store.health.writable:
                with contextlib.suppress(StoreError):
                    self.gw.store.probe()
            try:
                await asyncio.to_thread(self.gw.store.checkpoint)
            except Exception:
                if not failing:
                    log.exception(
                        "WAL checkpoint failed (logged once until a checkpoint works again)"
                    )
                failing = True
            else:
                if failing:
                    log.warning("WAL checkpoints work again")
                failing = False

    async def _media_retention(self) -> None:
        """Attachment files older than `media.retention_days`
        go (in a thread: a walk of the media folder)."""
        while True:
            try:
                removed = await asyncio.to_thread(
                    sweep,
                    self.gw.config.home,
                    now=self.gw.clock().timestamp(),
                    older_than_days=self.gw.config.media.retention_days,
                )
                if removed:
                    log.info(
                        "media retention: removed %s files older than %s days",
                        removed,
                        self.gw.config.media.retention_days,
                    )
            except Exception:
                log.exception("media retention sweep failed")
            await asyncio.sleep(PRUNE_INBOUND_EVERY_S)

    async def _prune_inbound(self) -> None:
        """Dedupe remembers a message id for
        `delivery.dedupe_retention_hours`; older answered rows go."""
        keep = timedelta(hours=self.gw.config.delivery.dedupe_retention_hours)
        while True:
            try:
                pruned = await self.gw.store.health.write(
                    lambda: self.gw.store.prune_inbound(self.gw.clock() - keep)
                )
                if pruned:
                    log.info("pruned %s inbound rows older than %s", pruned, keep)
            except Exception:
                log.exception("pruning inbound rows failed")
            await asyncio.sleep(PRUNE_INBOUND_EVERY_S)

    def _ready(self) -> None:
        self.notifier.ready(self.ops.status_line())
        if self.notifier.enabled:
            self._keepalive = asyncio.get_running_loop().create_task(
                self.notifier.keepalive(self.ops.status_line), name="sd-notify"
            )

    def _health(self) -> dict[str, AdapterHealth]:
        return self.gw.supervisor.health() if self.gw.supervisor is not None else {}

    def _metered(self, submit: Submit) -> Submit:
        """Count every message an adapter hands in, by platform and what became of it."""
        metrics = self.gw.metrics

        async def submit_counted(inbound: Inbound) -> SubmitResult:
            try:
                result = await submit(inbound)
            except Exception:
                metrics.message_in(inbound.chat.platform, "error")
                raise
            metrics.message_in(inbound.chat.platform, result.outcome.value)
            return result

        return submit_counted

    async def _start_web(self) -> None:
        app = self.gw.web_app or web.Application()
        self.gw.web_app = app
        config = self.gw.config
        self.guard = WebGuard.for_config(config.web, config.home)
        web_adapter = self.gw.adapters.get("web")
        if web_adapter is not None and hasattr(web_adapter, "attach"):
            history = WebChatHistory(self.gw.store)
            model, problem = model_name(self.gw.llm), model_problem(self.gw.llm)
            web_adapter.attach(
                app,
                history=history.lines,
                retried=history.retried,
                hello=lambda: hello(model, problem),
            )
        self.ops.operator = self.guard.operator
        self.ops.attach(app)
        self.dashboard = self._dashboard()
        self.dashboard.attach(app)
        self.guard.protect(app)  # last: every route above, and any added later, is behind it
        limits = Limits(max_connections=config.daemon.max_connections)
        self._listener = await serve_http(
            app, config.web.host, config.web.port, self.guard.caller, limits=limits, name="web"
        )
        self.web_port = self._listener.port
        base = f"http://{connect_host(config.web.host)}:{self.web_port}"
        if self.announce is not None:
            # `gateway run`: the banner's last lines first, the log line after them
            self.announce(self.guard.login_url(base))
        log.info(
            "web chat at %s/ (%s)",
            base,
            "no login: web.auth is none"
            if self.guard.secret is None
            else "`gateway web-url` prints its login link",
        )

    def _dashboard(self) -> Dashboard:
        gw = self.gw
        # as the logs and /status mask, and the web login secret
        redact = redactor_for(gw.config, environ())
        if self.guard is not None and self.guard.secret is not None:
            redact.add([self.guard.secret.value])
        status = StatusSources(
            health=self._health,
            model=ModelView(model_name(gw.llm), gw.model_source, model_problem(gw.llm)),
            ready=lambda: self.ops.readiness()[0],
            version=package_version(),
        )
        return Dashboard(
            store=gw.store,
            book=PairingBook(gw.store, load_key(gw.config.home)),
            status=status,
            redact=redact,
            clock=gw.clock,
        )

    def _on_signal(self) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: stopping now")
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        self.stop_event.set()

    def _on_restart(self) -> None:
        log.info(
            "SIGHUP: draining, then exiting %s so the service manager starts a fresh process",
            RESTART_EXIT_CODE,
        )
        self.exit_code = RESTART_EXIT_CODE
        self.stop_event.set()

    async def serve(self) -> None:
        await self.stop_event.wait()

    async def stop(self) -> None:
        gw = self.gw
        self.ops.draining = True
        self.notifier.stopping(self.ops.status_line())
        gw.sessions.stop_accepting()
        deadline = gw.config.daemon.drain_seconds
        started = asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(gw.sessions.wait_idle(), deadline)
        except TimeoutError:
            log.warning(
                "drain deadline (%ss) passed; unfinished turns stay stored for replay", deadline
            )
            await gw.sessions.cancel_all()
        if gw.jobs is not None:
            # job runs get what is left of the drain; one cut off is reported at the next start
            await gw.jobs.stop(max(deadline - (asyncio.get_running_loop().time() - started), 0.0))
        if gw.lifecycle is not None:
            # flushes get what is left of the drain deadline; the rest stay pending
            left = deadline - (asyncio.get_running_loop().time() - started)
            await gw.lifecycle.stop(max(left, 0.0))
        # only what the drain left running; those chunks stay pending
        await gw.outbox.cancel_background()
        if gw.supervisor is not None:
            # stops every adapter; one failing to stop does not block the rest
            await gw.supervisor.stop()
        for task in gw.background:
            task.cancel()
        await asyncio.gather(*gw.background, return_exceptions=True)
        if self._listener is not None:
            await self._listener.stop()
        await gw.llm.close()
        await gw.close_tools()
        if gw.media is not None:
            await gw.media.close()
        if self._keepalive is not None:  # the watchdog keeps being fed through the whole drain
            self._keepalive.cancel()
            await asyncio.gather(self._keepalive, return_exceptions=True)
        gw.store.close()
        self.notifier.close()


async def run_daemon(
    gateway: Gateway,
    *,
    install_signals: bool = True,
    notifier: Notifier | None = None,
    announce: Callable[[str], None] | None = None,
) -> int:
    """Run until a signal; returns the exit code (0 after
    a clean drain, 75 when a restart was asked for)."""
    daemon = Daemon(gateway, install_signals=install_signals, notifier=notifier, announce=announce)
    try:
        await daemon.start()
        await daemon.serve()
    finally:
        await daemon.stop()
    return daemon.exit_code
