"""What every `gateway` command shares: exit codes, the home and config it works on, and logging."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.config.settings import Config, default_home, load_config

if TYPE_CHECKING:
    from gateway.telemetry.logs import Redactor

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_RESTART = 75
EXIT_CONFIG = 78
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it: `gateway init && gateway run` stops at Ctrl-C

log = logging.getLogger("gateway")


def setup_logging(args: argparse.Namespace, config: Config | None, env: dict[str, str], *, level: str | None = None,
             fmt: str | None = None) -> Redactor:
    """Logging for this command, with every secret of the config and the environment masked (the redactor is
    returned so that secrets found later, such as the web login secret, can be added)."""
    from gateway.telemetry.logs import redactor_for
    from gateway.telemetry.logs import setup_logging as configure
    chosen_level = args.log_level or level or (config.logging.level if config else "INFO")
    chosen_fmt = args.log_format or fmt or (config.logging.format if config else "auto")
    return configure(chosen_level, chosen_fmt,  # type: ignore[arg-type]
                     redactor=redactor_for(config, env))


def home_of(args: argparse.Namespace) -> Path:
    return Path(args.home).expanduser() if args.home else default_home()


def known_secret(config: Config) -> str | None:
    """The web login secret if this user can read it (never created here: the daemon makes it)."""
    from gateway.ops.web_guard import SECRET_FILE
    if config.web.auth_token:
        return config.web.auth_token.value
    try:
        return (config.home / SECRET_FILE).read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def config_of(args: argparse.Namespace) -> Config:
    """The loaded config, with the checks that need more than one key (tool names in agent.tools,
    the agents and accounts bindings name)."""
    from gateway.agent.tools.catalog import check_tool_names
    from gateway.config.agents import check_agents
    config = load_config(home_of(args))
    check_tool_names(config)
    check_agents(config)
    return config
