"""gateway config check and gateway doctor: is this install ready, and what is wrong if not."""

from __future__ import annotations

import argparse
import sys

from gateway.cli.context import EXIT_CONFIG, EXIT_OK, config_of, environ, home_of
from gateway.errors import ConfigError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cfg = sub.add_parser("config", help="configuration commands")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True)
    cfg_sub.add_parser(
        "check", help="validate config.yaml; print ok or every error with its line"
    ).set_defaults(func=cmd_config_check)
    doc = sub.add_parser(
        "doctor", help="check config, home, database, platform tokens and the model; one line each"
    )
    doc.add_argument(
        "--fix",
        action="store_true",
        help="first repair what is safe to repair: missing folders, loose permissions",
    )
    doc.set_defaults(func=cmd_doctor)


def cmd_config_check(args: argparse.Namespace) -> int:
    from gateway.voice.speaker import config_problems

    try:
        config = config_of(args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG
    # programs voice.tts needs that are not installed
    problems = config_problems(config.voice, home_of(args) / "config.yaml")
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return EXIT_CONFIG
    print("ok")
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    import asyncio

    from gateway.ops.doctor import Doctor, exit_code, render

    doctor = Doctor(home_of(args), environ())
    if args.fix:
        repaired = doctor.repair()
        for line in repaired:
            print(f"fix  {line}")
        if not repaired:
            print("fix  nothing to repair (folders and permissions are as they should be)")
    checks = asyncio.run(doctor.run())
    print(render(checks))
    return exit_code(checks)
