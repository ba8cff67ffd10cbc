"""gateway status and gateway install-service: the daemon as a service, seen and set up."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.cli.context import EXIT_ERROR, EXIT_OK, config_of, environ, home_of, known_secret
from gateway.errors import ConfigError

if TYPE_CHECKING:
    from gateway.ops.service import ShellNeeds


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    st = sub.add_parser(
        "status", help="what the running daemon reports: adapters, sessions, cache, backlog"
    )
    st.add_argument("--json", action="store_true", help="print the raw JSON")
    st.set_defaults(func=cmd_status)
    ins = sub.add_parser(
        "install-service", help="write the systemd unit (user or system) for this install"
    )
    where = ins.add_mutually_exclusive_group(required=True)
    where.add_argument("--user", action="store_true", help="a user unit (~/.config/systemd/user)")
    where.add_argument(
        "--system", action="store_true", help="a system unit (/etc/systemd/system; needs root)"
    )
    ins.add_argument(
        "--dry-run", action="store_true", help="print the unit and the commands; change nothing"
    )
    ins.add_argument(
        "--enable",
        action="store_true",
        help="also run daemon-reload and enable --now (and enable linger for a user unit)",
    )
    ins.add_argument(
        "--unit-dir",
        help="write the unit here instead of the standard directory (and nothing else: "
        "the env file is left to you)",
    )
    ins.set_defaults(func=cmd_install_service)


def cmd_status(args: argparse.Namespace) -> int:
    """Ask the running daemon (GET /status on the web
    listener, loopback only) and print its answer."""
    from gateway.telemetry.logs import redact_tree, redactor_for
    from gateway.telemetry.status_client import fetch_status, render_status

    config = config_of(args)
    if not config.web.enabled:
        print(
            "the web listener is off (web.enabled: false), so there is no daemon to ask",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        data = fetch_status(config.web.host, config.web.port, secret=known_secret(config))
    except OSError as exc:
        print(
            f"no daemon answers on {config.web.host}:{config.web.port} "
            f"({exc}); is `gateway run` running?",
            file=sys.stderr,
        )
        return EXIT_ERROR
    # again here: the daemon may be an older version
    data = redact_tree(data, redactor_for(config, environ()))
    print(json.dumps(data, indent=2) if args.json else render_status(data))
    return EXIT_OK


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
            home = home_of(args).absolute()
        env_file = Path(SYSTEM_ENV_FILE) if mode == "system" else user_env_file(env)
        # the config as the unit will read it: with the env file's tokens (${VAR} in config.yaml)
        drain, shell = _from_config(_config_home(home, mode), {**env, **_env_values(env_file)})
        spec = UnitSpec(
            mode=mode,
            exec_path=gateway_executable(sys.argv[0]),
            home=str(home),
            env_file=str(env_file),
            drain_seconds=drain,
            shell=shell,
        )
        unit_dir = Path(args.unit_dir) if args.unit_dir else unit_dir_for(mode, env)
        plan = plan_install(
            spec,
            unit_dir=unit_dir,
            env_file=env_file,
            user=None if mode == "system" else getpass.getuser(),
            create_env_file=not args.unit_dir,
        )
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return install(plan, dry_run=args.dry_run, enable=args.enable)


def _config_home(home: Path, mode: str) -> Path:
    """Where the config is read from: a system unit's DynamicUser home lives in /var/lib/private
    until its first start links /var/lib/<name> to it."""
    private = (
        Path("/var/lib/private") / home.relative_to("/var/lib")
        if mode == "system" and home.is_relative_to("/var/lib")
        else home
    )
    return private if not (home / "config.yaml").exists() and private.exists() else home


def _from_config(home: Path, env: dict[str, str]) -> tuple[float, ShellNeeds]:
    """The drain deadline, and what the shell's sandbox needs from the unit (None: no shell). A
    config that cannot be read gives the defaults, said on stderr (the daemon refuses it too)."""
    from gateway.config.settings import load_config

    try:
        config = load_config(home, env=env)
    except (ConfigError, OSError) as exc:
        print(
            f"warning: {home / 'config.yaml'} could not be read ({exc}); the unit is written "
            "for the defaults (no shell): fix it and run install-service again",
            file=sys.stderr,
        )
        return 20.0, None
    shell = config.tools.shell
    needs: ShellNeeds = None
    if shell.enabled and shell.sandbox == "bubblewrap":
        needs = "network" if shell.network else "no-network"
    return config.daemon.drain_seconds, needs


def _env_values(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a systemd EnvironmentFile (comments and blank lines skipped, one level
    of quotes removed); nothing when it is missing or unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or key.startswith(("#", ";")) or not key.strip():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values
