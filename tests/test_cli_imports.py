"""`gateway --version` and `gateway --help` load nothing but the standard library and the CLI's
own parser modules: every command imports what it needs when it runs, so a user's every command
(and every daemon start) skips the rest. The CPU time itself is a bench figure (bench/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# The gateway modules the parser may load: the CLI, the error tree and the starter file's answers.
ALLOWED = {"gateway", "gateway.errors", "gateway.config", "gateway.config.starter"}

PROBE = """
import json, sys
from gateway.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
# the interpreter's own start-up hooks (Debian's python3 has a sitecustomize), not the gateway's
mine = {"__main__", "_distutils_hack", "sitecustomize", "usercustomize"}
print(json.dumps(sorted(m for m in sys.modules
                        if m.split(".")[0] not in sys.stdlib_module_names and m not in mine
                        and not m.startswith("__editable__"))))
"""


def loaded(*argv: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize("argv", [("--version",), ("--help",), ("users", "--help")])
def test_the_parser_loads_only_the_standard_library_and_the_cli(argv: tuple[str, ...]) -> None:
    extra = {m for m in loaded(*argv) if not m.startswith("gateway.cli")} - ALLOWED
    assert extra == set(), f"`gateway {' '.join(argv)}` imported {sorted(extra)}"


# What the two everyday read-only commands must not load: the daemon's network, store and
# platform libraries (each costs a tenth of a second or more of CPU, every time).
HEAVY = {"aiohttp", "sqlite_utils", "aiogram", "pydantic", "discord", "slack_bolt", "openai"}


@pytest.mark.parametrize("argv", [("config", "check"), ("status",)])
def test_config_check_and_status_load_no_network_or_store_library(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        "telegram:\n  token: '1:x'\n  allowed_users: [1]\nweb:\n  port: 1\n", encoding="utf-8"
    )
    tops = {m.split(".")[0] for m in loaded("--home", str(home), *argv)}
    assert "gateway" in tops and not tops & HEAVY, f"`gateway {' '.join(argv)}` imported {tops}"
