"""What every `gateway` command shares: exit codes, the home and config it works on, logging, and
whether another program holds a port (init chooses the web port, run explains a taken one).

Every command module imports it when the parser is built, so at the top it imports only the
standard library: the config loader and the rest come in with the command that needs them.
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config.settings import Config
    from gateway.telemetry.logs import Redactor

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_RESTART = 75
EXIT_CONFIG = 78
# 128 + SIGINT, as shells report it: `gateway init && gateway run` stops at Ctrl-C
EXIT_INTERRUPTED = 130

log = logging.getLogger("gateway")


def setup_logging(
    args: argparse.Namespace,
    config: Config | None,
    env: dict[str, str],
    *,
    level: str | None = None,
    fmt: str | None = None,
) -> Redactor:
    """Logging for this command, with every secret of the config and the environment masked (the
    redactor is returned so that secrets found later, such as the web login secret, are added)."""
    from gateway.telemetry.logs import redactor_for
    from gateway.telemetry.logs import setup_logging as configure

    chosen_level = args.log_level or level or (config.logging.level if config else "INFO")
    chosen_fmt = args.log_format or fmt or (config.logging.format if config else "auto")
    return configure(
        chosen_level,
        chosen_fmt,  # type: ignore[arg-type]
        redactor=redactor_for(config, env),
    )


def environ() -> dict[str, str]:
    """The process environment, as gateway.config.settings (the one reader of it) gives it."""
    from gateway.config.settings import environ as read

    return read()


def check_base_url(url: str | None, *, flag: str = "") -> str | None:
    """gateway.config.settings's check of a base URL,
    imported when used (the parser stays light)."""
    from gateway.config.settings import check_base_url as check

    return check(url, flag=flag)


def home_of(args: argparse.Namespace) -> Path:
    from gateway.config.settings import default_home

    return Path(args.home).expanduser() if args.home else default_home()


def known_secret(config: Config) -> str | None:
    """The web login secret if this user can read it (never created here: the daemon makes it)."""
    if config.web.auth_token:
        return config.web.auth_token.value
    try:
        return config.web_key_path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def config_of(args: argparse.Namespace) -> Config:
    """The loaded config, with the checks that need more than one key (tool names in agent.tools,
    the agents and accounts bindings name)."""
    from gateway.agent.tools.policy import check_tool_names
    from gateway.config.agents import check_agents
    from gateway.config.settings import load_config

    config = load_config(home_of(args))
    check_tool_names(config)
    check_agents(config)
    return config


def installed_version() -> str:
    """The installed package's version, from its metadata (`gateway --version` loads no more)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agent-gateway")
    except PackageNotFoundError:
        return "unknown"


PORT_VAR = "GATEWAY_WEB_PORT"  # a container or a test run chooses the port init writes


def port_from_env(env: Mapping[str, str]) -> int | None:
    """$GATEWAY_WEB_PORT as a port number, or None when it is not set."""
    text = env.get(PORT_VAR, "").strip()
    if text and not text.isdigit():
        raise ValueError(f"{PORT_VAR}={text!r}: expected a port number")
    return int(text) if text else None


def port_in_use(port: int) -> bool:
    """Would `gateway run` fail to listen on 127.0.0.1:port now? (SO_REUSEADDR, as aiohttp listens:
    a connection still closing does not count, a listener does.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False
