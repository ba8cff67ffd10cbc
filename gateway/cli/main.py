"""The `gateway` command: run the daemon, chat in the terminal, check config, show prompts.

The only place that maps errors to exit codes (78 = bad config, so systemd does not restart-loop) and
configures logging.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import getpass
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway.config.settings import Config, default_home, environ, load_config
from gateway.errors import ConfigError, GatewayError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_RESTART = 75
EXIT_CONFIG = 78

log = logging.getLogger("gateway")


def _logging(args: argparse.Namespace, config: Config | None, env: dict[str, str], *, level: str | None = None,
             fmt: str | None = None) -> None:
    """Logging for this command, with every secret of the config and the environment masked."""
    from gateway.telemetry.logs import config_secrets, env_secrets, setup_logging
    chosen_level = args.log_level or level or (config.logging.level if config else "INFO")
    chosen_fmt = args.log_format or fmt or (config.logging.format if config else "auto")
    key_envs = [m.api_key_env for m in (config.model, config.model.fallback if config.model else None)
                if m is not None and m.api_key_env] if config else []
    setup_logging(chosen_level, chosen_fmt,  # type: ignore[arg-type]
                  secrets=[*config_secrets(config), *env_secrets(env, also=key_envs)])


def _home(args: argparse.Namespace) -> Path:
    return Path(args.home).expanduser() if args.home else default_home()


def _config(args: argparse.Namespace) -> Config:
    return load_config(_home(args))


def cmd_config_check(args: argparse.Namespace) -> int:
    try:
        _config(args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG
    print("ok")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """Exit 0 after a clean drain, 75 when a restart would help (SIGHUP, the port is still taken), 78 on bad config."""
    from gateway.ops.daemon import build_gateway, check_web_binding, platform_adapters, run_daemon
    from gateway.ops.notify import Notifier
    config = _config(args)
    env = environ()
    _logging(args, config, env)
    check_web_binding(config)
    notifier = Notifier.from_env(env, pid=os.getpid(), watchdog=config.daemon.watchdog)
    try:
        gateway = build_gateway(config, env=env, adapters=platform_adapters(config))
        # The libraries' import-time heap (~400k objects) lives forever; left to the collector, every full
        # collection walks it and stalls the loop for ~200 ms. Frozen, and with young collections less often
        # (a turn allocates thousands of short-lived objects), bench/overhead.py's p99.9 went from ~165 to ~8 ms.
        gc.freeze()
        gc.set_threshold(10_000, 20, 10)
        return asyncio.run(run_daemon(gateway, notifier=notifier))
    except (ConfigError, KeyboardInterrupt):
        raise
    except asyncio.CancelledError:  # a second SIGTERM/SIGINT during the drain: stop now, as asked
        log.warning("stopped before the drain finished (second signal); unfinished turns stay stored for replay")
        return EXIT_OK
    except OSError as exc:  # e.g. the web port is still held by the previous instance
        log.error("cannot start: %s; exiting %s so the service manager restarts it", exc, EXIT_RESTART)
        return EXIT_RESTART
    except Exception:
        log.exception("the daemon crashed")
        return EXIT_ERROR


def cmd_chat(args: argparse.Namespace) -> int:
    from adapters.console import ConsoleAdapter
    from gateway.ops.daemon import build_gateway
    config = _config(args)
    _logging(args, config, environ(), level="WARNING")
    console = ConsoleAdapter(prompt="you> ")
    gateway = build_gateway(config, env=environ(), adapters=[console])

    async def main() -> None:
        await console.start(gateway.sessions.submit)
        lifecycle = gateway.lifecycle
        try:
            if lifecycle is not None:  # the same pipeline as the daemon: idle timers, and /new flushes the old session
                await lifecycle.start()
            await gateway.outbox.deliver_pending()
            await console.run()
            await gateway.sessions.wait_idle()
        finally:
            if lifecycle is not None:
                await lifecycle.stop(config.daemon.drain_seconds)  # what does not fit stays pending
            await gateway.llm.close()
            gateway.store.close()

    asyncio.run(main())
    return EXIT_OK


def cmd_prompt(args: argparse.Namespace) -> int:
    from gateway.ops.daemon import build_gateway
    config = _config(args)
    _logging(args, config, environ(), level="WARNING")
    gateway = build_gateway(config, env=environ(), probe_ollama=False)
    try:
        if args.session:
            row = gateway.store.active_session(args.session) or gateway.store.latest_session(args.session)
            if row is None and args.session.isdigit():
                row = gateway.store.session(int(args.session))
            if row is None or row.system_prompt is None:
                print(f"no stored prompt for session {args.session!r}", file=sys.stderr)
                return EXIT_ERROR
            sys.stdout.write(row.system_prompt + "\n")
            return EXIT_OK
        model = args.model or gateway.llm.model
        built = gateway.prompts.build_full(platform=args.platform, chat_type=args.chat_type, model=model,
                                           provider=gateway.llm.provider, tool_names=gateway.tools.names(),
                                           today=gateway.clock().date())
        sys.stdout.write((built.tiers_view() if args.tiers else built.text) + "\n")
        return EXIT_OK
    finally:
        gateway.store.close()


def cmd_pairing(args: argparse.Namespace) -> int:
    """Works beside a running daemon: both use the same database and the same pairing key file."""
    from gateway.access.gate import Rules, platform_rules
    from gateway.access.pairing import PairingBook, load_key, render_listing
    from gateway.store.database import Store
    from gateway.store.rows import utcnow
    config = _config(args)
    store = Store(config.db_path)
    try:
        book = PairingBook(store, load_key(config.home))
        if args.pairing_command == "list":
            print(render_listing(book, utcnow()))
            return EXIT_OK
        if args.pairing_command == "approve":
            approval = book.approve(args.code, by="cli", now=utcnow())
            ok = approval.status == "approved"
            print(approval.describe(), file=sys.stdout if ok else sys.stderr)
            return EXIT_OK if ok else EXIT_ERROR
        platform, _, user_id = args.who.partition(":")
        if not platform or not user_id:
            print(f"expected PLATFORM:ID (e.g. telegram:123); got {args.who!r}", file=sys.stderr)
            return EXIT_ERROR
        revoked = book.revoke(platform, user_id)
        print(f"revoked {platform}:{user_id}" if revoked else f"{platform}:{user_id} was not approved by pairing")
        if user_id in platform_rules(config).get(platform, Rules()).user_ids:
            print(f"note: {user_id} is still in {platform}.allowed_users in config.yaml; remove it there too")
        return EXIT_OK if revoked else EXIT_ERROR
    finally:
        store.close()


def cmd_status(args: argparse.Namespace) -> int:
    """Ask the running daemon (GET /status on the web listener, loopback only) and print its answer."""
    from gateway.ops.status import fetch_status, render_status
    config = _config(args)
    if not config.web.enabled:
        print("the web listener is off (web.enabled: false), so there is no daemon to ask", file=sys.stderr)
        return EXIT_ERROR
    try:
        data = fetch_status(config.web.host, config.web.port)
    except OSError as exc:
        print(f"no daemon answers on {config.web.host}:{config.web.port} ({exc}); is `gateway run` running?",
              file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(data, indent=2) if args.json else render_status(data))
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from gateway.ops.doctor import Doctor, exit_code, render
    checks = asyncio.run(Doctor(_home(args), environ()).run())
    print(render(checks))
    return exit_code(checks)


def cmd_install_service(args: argparse.Namespace) -> int:
    from gateway.ops.service import (
        SYSTEM_ENV_FILE,
        SYSTEM_HOME,
        Mode,
        ServiceError,
        UnitSpec,
        gateway_executable,
        install,
        plan_install,
        unit_dir_for,
        user_env_file,
    )
    env = environ()
    mode: Mode = "system" if args.system else "user"
    try:
        if mode == "system":  # only an explicit --home counts: $GATEWAY_HOME is the invoking user's
            home = Path(args.home).expanduser().absolute() if args.home else Path(SYSTEM_HOME)
        else:
            home = _home(args).absolute()
        drain = _drain_seconds(home)
        env_file = Path(SYSTEM_ENV_FILE) if mode == "system" else user_env_file(env)
        spec = UnitSpec(mode=mode, exec_path=gateway_executable(sys.argv[0]), home=str(home),
                        env_file=str(env_file), drain_seconds=drain)
        unit_dir = Path(args.unit_dir) if args.unit_dir else unit_dir_for(mode, env)
        plan = plan_install(spec, unit_dir=unit_dir, env_file=env_file,
                            user=None if mode == "system" else getpass.getuser())
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return install(plan, dry_run=args.dry_run, enable=args.enable)


def _drain_seconds(home: Path) -> float:
    try:
        return load_config(home).daemon.drain_seconds
    except (ConfigError, OSError):
        return 20.0


def cmd_sessions(args: argparse.Namespace) -> int:
    from gateway.sessions.lifecycle import Policies
    from gateway.sessions.report import find_session, list_sessions, show_session
    from gateway.store.database import Store
    config = _config(args)
    store = Store(config.db_path)
    try:
        policies = Policies(config.session_reset, config.sessions.timezone)
        if args.sessions_command == "list":
            active = True if args.active else False if args.ended else None
            print(list_sessions(store, policies, active=active, limit=args.limit))
            return EXIT_OK
        row = find_session(store, args.key_or_id)
        if row is None:
            print(f"no session {args.key_or_id!r}", file=sys.stderr)
            return EXIT_ERROR
        print(show_session(store, policies, row))
        return EXIT_OK
    finally:
        store.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="One LLM agent on your chat platforms.")
    parser.add_argument("--home", help="gateway home (default: $GATEWAY_HOME or ~/.agent-gateway)")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", choices=["auto", "human", "json"],
                        help="auto (default): human on a terminal, JSON lines otherwise (journald)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the daemon (web chat + configured platforms)").set_defaults(func=cmd_run)
    sub.add_parser("chat", help="talk to the agent in this terminal (stdin lines → replies)").set_defaults(
        func=cmd_chat)
    cfg = sub.add_parser("config", help="configuration commands")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True)
    cfg_sub.add_parser("check", help="validate config.yaml; print ok or every error with its line").set_defaults(
        func=cmd_config_check)
    pr = sub.add_parser("prompt", help="print the system prompt a new session would get, or a stored one")
    pr.add_argument("--platform", default="cli", choices=["telegram", "discord", "slack", "web", "cli", "cron"])
    pr.add_argument("--chat-type", default="dm", choices=["dm", "group", "channel"])
    pr.add_argument("--model", help="model name to build for (default: the configured one)")
    pr.add_argument("--tiers", action="store_true", help="show tier boundaries and each block's source")
    pr.add_argument("--session", help="print the stored prompt bytes of a session (key or id)")
    pr.set_defaults(func=cmd_prompt)
    se = sub.add_parser("sessions", help="sessions with their reset policy, deadline, end reason and flush state")
    se_sub = se.add_subparsers(dest="sessions_command", required=True)
    ls = se_sub.add_parser("list", help="sessions, newest first")
    which = ls.add_mutually_exclusive_group()
    which.add_argument("--active", action="store_true", help="only sessions still open")
    which.add_argument("--ended", action="store_true", help="only ended sessions")
    ls.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    ls.set_defaults(func=cmd_sessions)
    sh = se_sub.add_parser("show", help="one session in full (a session id, or a key for its latest session)")
    sh.add_argument("key_or_id")
    sh.set_defaults(func=cmd_sessions)
    pa = sub.add_parser("pairing", help="pairing codes: list requests, approve a code, revoke a user")
    pa_sub = pa.add_subparsers(dest="pairing_command", required=True)
    pa_sub.add_parser("list", help="pending requests, approved users, lockouts").set_defaults(func=cmd_pairing)
    ap = pa_sub.add_parser("approve", help="approve the user who was given CODE")
    ap.add_argument("code")
    ap.set_defaults(func=cmd_pairing)
    rv = pa_sub.add_parser("revoke", help="remove a user approved by pairing")
    rv.add_argument("who", metavar="PLATFORM:ID")
    rv.set_defaults(func=cmd_pairing)
    st = sub.add_parser("status", help="what the running daemon reports: adapters, sessions, cache, backlog")
    st.add_argument("--json", action="store_true", help="print the raw JSON")
    st.set_defaults(func=cmd_status)
    sub.add_parser("doctor", help="check config, home, database, platform tokens and the model; one line each"
                   ).set_defaults(func=cmd_doctor)
    ins = sub.add_parser("install-service", help="write the systemd unit (user or system) for this install")
    where = ins.add_mutually_exclusive_group(required=True)
    where.add_argument("--user", action="store_true", help="a user unit (~/.config/systemd/user)")
    where.add_argument("--system", action="store_true", help="a system unit (/etc/systemd/system; needs root)")
    ins.add_argument("--dry-run", action="store_true", help="print the unit and the commands; change nothing")
    ins.add_argument("--enable", action="store_true",
                     help="also run daemon-reload and enable --now (and enable linger for a user unit)")
    ins.add_argument("--unit-dir", help="write the unit here instead of the standard directory")
    ins.set_defaults(func=cmd_install_service)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"config error:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    except GatewayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
