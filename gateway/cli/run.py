"""gateway run (the daemon), gateway web-url (its web chat's login link) and gateway chat (the same
pipeline in this terminal)."""

from __future__ import annotations

import argparse
import errno
import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.cli.context import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_RESTART,
    config_of,
    environ,
    log,
    setup_logging,
)
from gateway.errors import ConfigError, HomeLocked, HomeUnusable, StoreError, StoreUnavailable

# while the daemon starts, a statement waits this long for another process's lock
START_BUSY_TIMEOUT_MS = 5000

if TYPE_CHECKING:
    from adapters.console import ConsoleAdapter
    from gateway.config.settings import Config
    from gateway.events import Adapter
    from gateway.ops.wiring import Gateway


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("run", help="run the daemon (web chat + configured platforms)").set_defaults(
        func=cmd_run
    )
    sub.add_parser(
        "web-url",
        help="print the web chat's login link (it sets a cookie in the browser that opens it)",
    ).set_defaults(func=cmd_web_url)
    sub.add_parser(
        "chat", help="talk to the agent in this terminal (stdin lines → replies)"
    ).set_defaults(func=cmd_chat)


def cmd_run(args: argparse.Namespace) -> int:
    """Exit 0 after a clean drain, 75 when a restart would help (SIGHUP, the port is still taken),
    78 on bad config."""
    import asyncio

    from gateway.ops.daemon import run_daemon
    from gateway.ops.home import hold_home
    from gateway.ops.http_limits import raise_fd_limit
    from gateway.ops.notify import Notifier
    from gateway.ops.web_guard import login_secret
    from gateway.ops.wiring import platform_adapters

    config = config_of(args)
    env = environ()
    redactor = setup_logging(args, config, env)
    notifier = Notifier.from_env(env, pid=os.getpid(), watchdog=config.daemon.watchdog)
    lock = hold_home(config.home)  # before anything touches the home: a second daemon stops here
    raise_fd_limit()
    try:
        secret = login_secret(config.web, config.home) if config.web.enabled else None
        redactor.add([secret.value] if secret else [])
        gateway = _build(config, env, platform_adapters(config))
        print(banner(config, gateway), flush=True)
        # On a terminal the login link is printed; under systemd stdout is the journal, which is no
        # place for it.
        announce = _print_login if sys.stdout.isatty() else _print_address
        # The libraries' import-time heap (~400k objects) lives forever; left to the collector,
        # every full collection walks it and stalls the loop for ~200 ms. Frozen, and with young
        # collections less often (a turn allocates thousands of short-lived objects),
        # bench/overhead.py's p99.9 went from ~165 to ~8 ms.
        gc.freeze()
        gc.set_threshold(10_000, 20, 10)
        return asyncio.run(run_daemon(gateway, notifier=notifier, announce=announce))
    except (ConfigError, HomeUnusable, HomeLocked, KeyboardInterrupt):
        raise
    except StoreUnavailable as exc:
        # start-up writes after the build (replay, timers): the same wait was spent
        if exc.reason != "busy":
            log.error(
                "cannot start: the database takes no writes (%s); exiting %s so the service "
                "manager tries again",
                exc,
                EXIT_RESTART,
            )
            return EXIT_RESTART
        raise HomeLocked(still_locked(config.db_path)) from None
    except asyncio.CancelledError:  # a second SIGTERM/SIGINT during the drain: stop now, as asked
        log.warning(
            "stopped before the drain finished (second "
            "signal); unfinished turns stay stored for replay"
        )
        return EXIT_OK
    except OSError as exc:  # e.g. the web port is still held by the previous instance
        log.error(
            "cannot start: %s; exiting %s so the service manager restarts it%s",
            exc,
            EXIT_RESTART,
            port_hint(exc, config),
        )
        return EXIT_RESTART
    except Exception:  # noqa: BLE001 (the task root: logged with its traceback, exit 1)
        log.exception("the daemon crashed")
        return EXIT_ERROR
    finally:
        lock.release()


def _build(config: Config, env: dict[str, str], adapters: Sequence[Adapter]) -> Gateway:
    """The object graph; a home or state.db that cannot be used (read-only, damaged) is one line and
    exit 78. While it starts, the daemon waits START_BUSY_TIMEOUT_MS for another process's write
    lock (a CLI command writing during a restart); one held longer is a temporary failure (75):
    systemd starts it again, it never would after 78."""
    from gateway.ops.home import database_problem
    from gateway.ops.wiring import build_gateway

    try:
        return build_gateway(
            config, env=env, adapters=adapters, busy_timeout_ms=START_BUSY_TIMEOUT_MS
        )
    except (StoreError, OSError) as exc:
        if isinstance(exc, StoreUnavailable) and exc.reason == "busy":
            raise HomeLocked(still_locked(config.db_path)) from None
        raise HomeUnusable(database_problem(config.db_path, exc)) from None


def still_locked(db_path: Path) -> str:
    return (
        f"{db_path} stayed locked by another process for {START_BUSY_TIMEOUT_MS // 1000} s (a "
        f"sqlite3 shell, a long gateway command?); exiting {EXIT_RESTART} so the service manager "
        "tries again"
    )


def banner(config: Config, gateway: Gateway) -> str:
    """What `gateway run` says first: what runs, from where, with which model (and why that one),
    where to look."""
    from gateway.llm.factory import model_problem
    from gateway.ops.status import model_name, package_version

    path = config.home / "config.yaml"
    model, problem = model_name(gateway.llm), model_problem(gateway.llm)
    lines = [
        f"agent-gateway {package_version()}",
        f"  home       {config.home}",
        f"  config     {path}"
        if path.exists()
        else f"  config     none at {path} (defaults; `gateway init` writes one)",
        f"  model      {model} ({gateway.model_source})"
        if model
        else f"  model      {gateway.model_source}, but it cannot answer: {problem}"
        if problem
        else "  model      none: every message is answered with how to set one (`gateway init`)",
        f"  platforms  {', '.join(gateway.adapters) or 'none'}",
    ]
    if not config.web.enabled:  # otherwise the daemon adds the web lines once the port is bound
        lines.append("  web chat   off (web.enabled: false)")
    return "\n".join(lines)


def _print_login(url: str) -> None:
    base = url.split("?", 1)[0].rstrip("/")
    print(
        f"  web chat   {url}\n             (this link logs "
        "a browser in; `gateway web-url` prints it again)\n"
        f"  dashboard  {base}/dashboard",
        flush=True,
    )


def _print_address(url: str) -> None:
    """Under a service manager: the address without the
    login secret (the journal is readable by admins)."""
    base = url.split("?", 1)[0].rstrip("/")
    where = "`gateway web-url` prints its login link"
    if os.environ.get("INVOCATION_ID"):  # systemd's unit: the system one runs as its own user
        where += ";\n             as a system service: `gw web-url`, see docs/operations.md"
    print(f"  web chat   {base}/ ({where})\n  dashboard  {base}/dashboard", flush=True)


def cmd_web_url(args: argparse.Namespace) -> int:
    """The same link `gateway run` prints on a terminal: the public URL, or where this machine
    reaches the port."""
    from gateway.ops.web_guard import WebGuard
    from gateway.telemetry.status_client import connect_host

    config = config_of(args)
    web = config.web
    if not web.enabled:
        print("the web chat is off (web.enabled: false)", file=sys.stderr)
        return EXIT_ERROR
    guard = WebGuard.for_config(web, config.home)
    print(guard.login_url(f"http://{connect_host(web.host)}:{web.port}"))
    if guard.secret is None:
        print("note: web.auth is none, so the web chat asks nobody to log in", file=sys.stderr)
    return EXIT_OK


def port_hint(exc: OSError, config: Config) -> str:
    """A taken port is either the old process still stopping (a restart fixes it) or another program
    (it won't)."""
    if exc.errno != errno.EADDRINUSE or not config.web.enabled:
        return ""
    return (
        f" (if another program uses {config.web.host}:{config.web.port}, set web.port in "
        f"{config.home / 'config.yaml'} to a free port, or web.enabled: false)"
    )


def cmd_chat(args: argparse.Namespace) -> int:
    import asyncio

    from adapters.console import ConsoleAdapter
    from gateway.ops.home import hold_home

    config = config_of(args)
    setup_logging(args, config, environ(), level="WARNING")
    console = ConsoleAdapter(prompt="you> ")
    # Exclusive, like the daemon: two processes would both run the idle timers and flushes of the
    # same sessions.
    lock = hold_home(config.home, command="chat")
    try:
        gateway = _build(config, environ(), [console])
        asyncio.run(_chat(config, gateway, console))
    finally:
        lock.release()
    if console.all_failed:  # a script piping into `gateway chat` learns that nothing was answered
        return EXIT_ERROR
    return EXIT_OK


async def _chat(config: Config, gateway: Gateway, console: ConsoleAdapter) -> None:
    await console.start(gateway.sessions.submit)
    lifecycle = gateway.lifecycle
    try:
        if lifecycle is not None:
            # the same pipeline as the daemon: idle timers, and /new flushes the old session
            await lifecycle.start()
        if gateway.mcp is not None:
            await gateway.mcp.start()
        if gateway.jobs is not None:  # the console's own scheduled jobs run while it is open
            await gateway.jobs.start()
        await gateway.outbox.deliver_pending()
        await console.run()
        await gateway.sessions.wait_idle()
    finally:
        if gateway.jobs is not None:
            await gateway.jobs.stop(config.daemon.drain_seconds)
        if lifecycle is not None:
            await lifecycle.stop(config.daemon.drain_seconds)  # what does not fit stays pending
        await gateway.llm.close()
        await gateway.close_tools()
        gateway.store.close()
