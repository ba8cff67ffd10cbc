"""The `gateway` command: one sub-command group per module of this package, registered here.

The only place that maps errors to exit codes (78 = bad config, so systemd does not restart-loop).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gateway.cli import checks, pairing, prompt, run, service, sessions, tools
from gateway.cli.context import EXIT_CONFIG, EXIT_ERROR, EXIT_OK
from gateway.errors import ConfigError, GatewayError

# Each module adds its sub-commands with register(sub); the order is the order of `gateway --help`.
COMMANDS = (run, checks, prompt, sessions, pairing, service, tools)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="One LLM agent on your chat platforms.")
    parser.add_argument("--home", help="gateway home (default: $GATEWAY_HOME or ~/.agent-gateway)")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", choices=["auto", "human", "json"],
                        help="auto (default): human on a terminal, JSON lines otherwise (journald)")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
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
