"""The suite does not depend on the environment it is started from: a developer's proxy, platform
tokens or service manager (NOTIFY_SOCKET) change nothing (tests/conftest.py scrubs them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.daemon_proc import free_port

ROOT = Path(__file__).resolve().parent.parent
# Real requests through the openai and anthropic SDKs (httpx) and through aiogram (aiohttp) to the
# fakes on 127.0.0.1.
TESTS = [
    "tests/test_llm.py::test_anthropic_request_carries_the_breakpoints_and_history_is_untouched",
    "tests/adapters/test_telegram.py::test_dm_round_trip_through_the_gateway",
]


def test_a_proxy_tokens_and_a_notify_socket_in_the_environment_change_nothing(
    tmp_path: Path,
) -> None:
    refused = f"http://127.0.0.1:{free_port()}"  # nothing listens: a request sent there fails
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env.update(
        {
            "HTTP_PROXY": refused,
            "HTTPS_PROXY": refused,
            "ALL_PROXY": refused,
            "http_proxy": refused,
            "https_proxy": refused,
            "all_proxy": refused,
            "TELEGRAM_BOT_TOKEN": "1:real-looking",
            "NOTIFY_SOCKET": str(tmp_path / "nowhere"),
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed in " in done.stdout and "skipped" not in done.stdout, done.stdout[-3000:]
