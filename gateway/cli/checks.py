"""gateway config check and gateway doctor: is this install ready, and what is wrong if not."""

from __future__ import annotations

import argparse
import asyncio
import sys

from gateway.cli.context import EXIT_CONFIG, EXIT_OK, config_of, home_of
from gateway.config.settings import environ
from gateway.errors import ConfigError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cfg = sub.add_parser("config", help="configuration commands")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True)
    cfg_sub.add_parser("check", help="validate config.yaml; print ok or every error with its line").set_defaults(
        func=cmd_config_check)
    sub.add_parser("doctor", help="check config, home, database, platform tokens and the model; one line each"
                   ).set_defaults(func=cmd_doctor)


def cmd_config_check(args: argparse.Namespace) -> int:
    try:
        config_of(args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG
    print("ok")
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from gateway.ops.doctor import Doctor, exit_code, render
    checks = asyncio.run(Doctor(home_of(args), environ()).run())
    print(render(checks))
    return exit_code(checks)
