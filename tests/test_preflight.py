"""What `gateway run` refuses at start-up, `gateway config check` and `gateway doctor` refuse too,
with the same file:line: no config is "ok" to the checks and exit 78 to the daemon."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.daemon_proc import GATEWAY, free_port

BAD_CONFIGS = {
    "web off loopback without a token": "web:\n  port: {port}\n  host: 0.0.0.0\n",
    "an unknown tool": "web:\n  port: {port}\nagent:\n  tools: [memory, web_fetx]\n",
    "an unknown tool for one platform": "web:\n  port: {port}\nagent:\n  "
    "tools_by_platform:\n    telegram: [memroy]\n",
    "auth none off loopback": "web:\n  port: {port}\n  host: 0.0.0.0\n  "
    "auth: none\n  auth_token: a-long-token\n",
    "slack http mode without a signing secret": (
        "web:\n  port: {port}\nslack:\n  bot_token: xoxb-1\n  mode: http\n"
    ),
    "an unknown time zone": "web:\n  port: {port}\nsessions:\n  timezone: Mars/Olympus\n",
}


async def _gateway(home: Path, *args: str) -> tuple[int, str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home.parent)}
    proc = await asyncio.create_subprocess_exec(
        GATEWAY,
        "--home",
        str(home),
        *args,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.parametrize("name", list(BAD_CONFIGS))
async def test_config_check_and_doctor_refuse_what_run_refuses(tmp_path: Path, name: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.yaml"
    config.write_text(BAD_CONFIGS[name].format(port=free_port()), encoding="utf-8")
    (
        (run_code, _, run_err),
        (check_code, _, check_err),
        (doctor_code, doctor_out, _),
    ) = await asyncio.gather(
        _gateway(home, "--log-format", "json", "run"),
        _gateway(home, "config", "check"),
        _gateway(home, "doctor"),
    )
    assert run_code == 78, run_err
    assert check_code == 78, check_err
    errors = check_err.splitlines()
    assert errors and all(
        line.startswith(f"{config}:") and line.split(":")[1].isdigit() for line in errors
    ), errors
    assert all(line in run_err for line in errors), (errors, run_err)
    assert doctor_code == 78
    assert f"FAIL config    {errors[0]} — fix:" in doctor_out
