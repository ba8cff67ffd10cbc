"""The `gateway` command: one sub-command group per module of this package, registered here.

The only place that maps errors to exit codes (78 = bad config or an unusable home, so systemd does
not restart-loop; 75 = the home is held by another process). Building the parser imports no more
than the standard library: each command imports what it needs when it runs
(tests/test_cli_imports.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from gateway.cli.context import (
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_RESTART,
    installed_version,
)
from gateway.errors import ConfigError, GatewayError, HomeLocked, HomeUnusable

# The modules of gateway/cli/ that add sub-commands, each with register(sub), in the order of
# `gateway --help`. A new command group is a new module named here.
COMMANDS = (
    "init",
    "run",
    "checks",
    "prompt",
    "sessions",
    "jobs",
    "pairing",
    "users",
    "service",
    "tools",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway", description="One LLM agent on your chat platforms."
    )
    parser.add_argument("--version", action=_Version, help="print the installed version and exit")
    parser.add_argument("--home", help="gateway home (default: $GATEWAY_HOME or ~/.agent-gateway)")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument(
        "--log-format",
        choices=["auto", "human", "json"],
        help="auto (default): human on a terminal, JSON lines otherwise (journald)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"gateway.cli.{name}").register(sub)
    return parser


class _Version(argparse.Action):
    """`gateway --version`; the version is looked up only
    when asked for (every other command skips it)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"agent-gateway {installed_version()}")
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Everything a command creates in the home (state.db and its -wal/-shm, keys, memories) is the
    # owner's alone, however the process was started; restored after, for callers in the same
    # process (tests).
    umask = os.umask(0o077)
    try:
        code: int = args.func(args)
        # here, where a reader that left (`gateway doctor | head -3`) can be caught
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_ERROR
    except ConfigError as exc:
        print(f"config error:\n{exc}", file=sys.stderr)
        return EXIT_CONFIG
    except HomeUnusable as exc:  # restarting cannot help: 78, so systemd does not restart-loop
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except HomeLocked as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RESTART
    except GatewayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        # not a success: the README's `gateway init && gateway run` ran on after Ctrl-C
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        os.umask(umask)
    return code


def _stdout_to_devnull() -> None:
    """The reader of our output is gone: no traceback, and nothing more written at exit (Python's
    own flush)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a captured stdout in tests has no descriptor
        pass


if __name__ == "__main__":
    sys.exit(main())
