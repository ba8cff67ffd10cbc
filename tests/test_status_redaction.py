"""What reaches an operator is masked like the logs: an upstream that echoed the bot token into an
adapter's error must not put it into /status, `gateway status` or the dashboard."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp

from gateway.config.settings import load_config
from gateway.errors import PlatformUnavailable
from gateway.events import OutboundMessage, Submit
from gateway.ops.daemon import Daemon
from gateway.ops.web_guard import load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.fakes.llm import FakeLLM
from tests.helpers import write_config

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"  # telegram.token in the config
STRAY = "xoxb-1111-2222-abcdefghijkl"  # in no config at all: masked by its shape


class EchoingUpstream:
    """A platform whose API answered with an error page quoting the request URL (token and all)."""

    platform = "telegram"

    async def start(self, submit: Submit) -> None:
        raise PlatformUnavailable(
            "telegram",
            f"GET https://api.telegram.org/bot{TOKEN}/getMe: 502 Bad Gateway (proxy said: {STRAY})",
        )

    async def send(self, message: OutboundMessage) -> str:
        raise AssertionError("never started")

    async def stop(self) -> None:
        return None


async def test_an_adapter_error_quoting_the_token_is_masked_in_status(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra=f"web:\n  port: 0\ntelegram:\n  token: '{TOKEN}'\n  allowed_users: [1]\n",
    )
    config = load_config(home, env={})
    web = [a for a in platform_adapters(config) if a.platform == "web"]
    daemon = Daemon(
        build_gateway(config, env={}, adapters=[*web, EchoingUpstream()], probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    try:
        async with asyncio.timeout(10):
            while not (
                daemon.ops.health().get("telegram") and daemon.ops.health()["telegram"].last_error
            ):
                await asyncio.sleep(0.01)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{daemon.web_port}/status") as resp:
                raw = await resp.text()
        error = json.loads(raw)["adapters"]["telegram"]["last_error"]
        assert "502 Bad Gateway" in error and "/bot***/getMe" in error
        assert TOKEN not in raw and TOKEN.split(":")[1] not in raw and STRAY not in raw
        async with aiohttp.ClientSession() as http:
            # the dashboard shows the same error, masked the same way
            async with http.get(
                f"http://127.0.0.1:{daemon.web_port}/dashboard/api/state",
                headers={"Authorization": f"Bearer {load_web_secret(home)}"},
            ) as resp:
                assert resp.status == 200
                state = await resp.text()
        shown = next(a for a in json.loads(state)["adapters"] if a["platform"] == "telegram")[
            "last_error"
        ]
        assert "502 Bad Gateway" in shown and "/bot***/getMe" in shown
        assert TOKEN.split(":")[1] not in state and STRAY not in state

        (home / "config.yaml").write_text(
            (home / "config.yaml").read_text().replace("port: 0", f"port: {daemon.web_port}")
        )
        gateway = str(Path(sys.executable).parent / "gateway")
        for args in ((), ("--json",)):
            proc = await asyncio.create_subprocess_exec(
                gateway,
                "--home",
                str(home),
                "status",
                *args,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err.decode()
            assert "502 Bad Gateway" in out.decode() and TOKEN.split(":")[1] not in out.decode()
            assert STRAY not in out.decode()
    finally:
        await daemon.stop()
