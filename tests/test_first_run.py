"""What a newcomer meets first: `gateway --version`,
the start-up banner, readiness without a model.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path

import aiohttp
import pytest

from gateway.cli.main import main
from gateway.config.settings import load_config
from gateway.ops.daemon import Daemon
from gateway.ops.wiring import build_gateway, platform_adapters


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"agent-gateway {version('agent-gateway')}\n"


async def test_readyz_is_not_ready_without_a_model(home: Path) -> None:
    """No model: every message would be answered with "no model is configured", so a probe must not
    say ready."""
    (home / "config.yaml").write_text("web:\n  port: 0\n")
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{daemon.web_port}/readyz") as resp:
                assert resp.status == 503
                assert await resp.json() == {
                    "ready": False,
                    "store": "ok",
                    "draining": False,
                    "model": None,
                    "adapters": {"web": "running"},
                }
    finally:
        await daemon.stop()


def test_the_banner_says_which_model_and_why(home: Path) -> None:
    from gateway.cli.run import banner

    config = load_config(home, env={})
    bare = build_gateway(config, env={}, probe_ollama=False)
    detected = build_gateway(config, env={"OPENAI_API_KEY": "sk-test-123456"}, probe_ollama=False)
    try:
        lines = banner(config, bare).splitlines()
        assert lines[0] == f"agent-gateway {version('agent-gateway')}"
        assert lines[1:] == [
            f"  home       {home}",
            f"  config     none at {home}/config.yaml (defaults; `gateway init` writes one)",
            "  model      none: every message is answered with how to set one (`gateway init`)",
            "  platforms  none",
        ]
        assert (
            banner(config, detected).splitlines()[3]
            == "  model      openai/gpt-4.1-mini (auto-detected from OPENAI_API_KEY)"
        )
    finally:
        bare.store.close()
        detected.store.close()


def test_a_reader_that_leaves_gets_no_traceback(home: Path) -> None:
    """`gateway prompt … | head -1`: the pipe closes
    before the command writes; it exits 1 quietly."""
    import subprocess

    from tests.daemon_proc import GATEWAY

    proc = subprocess.Popen(
        [GATEWAY, "--home", str(home), "prompt", "--platform", "telegram"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": os.environ["PATH"]},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # long before the interpreter has started, let alone written
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, (
        err
    )


async def test_the_banner_ends_before_the_log_says_where_the_web_chat_is(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On a terminal the log (stderr) and the banner (stdout) interleave: the banner's web lines are
    printed before the log line that names the same address, so they are not split by it; the log
    line stays (a log file or the journal's JSON says where the web chat is too)."""
    (home / "config.yaml").write_text("web:\n  port: 0\n")
    config = load_config(home, env={})
    logged_before: list[int] = []

    def announce(url: str) -> None:
        logged_before.append(sum(r.getMessage().startswith("web chat at") for r in caplog.records))

    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
        announce=announce,
    )
    with caplog.at_level("INFO", logger="gateway.ops.daemon"):
        await daemon.start()
        await daemon.stop()
    assert logged_before == [0]
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("web chat at")] == [
        f"web chat at http://127.0.0.1:{daemon.web_port}/ (`gateway web-url` prints its login link)"
    ]


async def test_a_configured_model_without_its_key_says_so_instead_of_asking_for_gateway_init(
    home: Path,
) -> None:
    """`gateway init` wrote the model; the shell that runs the gateway lacks its key. Every surface
    must name the missing variable: "no model is configured, run gateway init" would send the
    newcomer round in a circle."""
    from gateway.cli.run import banner
    from gateway.telemetry.status_client import render_status
    from tests.daemon_proc import WebChatClient

    (home / "config.yaml").write_text(
        "model:\n  provider: anthropic\n  name: claude-sonnet-4-5\n  api_key_env: MY_KEY\n"
        "web:\n  port: 0\n"
    )
    config = load_config(home, env={})
    why = "model claude-sonnet-4-5: no API key (set MY_KEY or model.api_key)"
    gateway = build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False)
    assert (
        banner(config, gateway).splitlines()[3]
        == f"  model      configured, but it cannot answer: {why}"
    )
    daemon = Daemon(gateway, install_signals=False)
    await daemon.start()
    try:
        async with WebChatClient(daemon.web_port or 0, "tab", home=home) as tab:
            greeting = await tab.next("hello")
            reply = (await tab.say("hi"), await tab.next("message"))[1]
        assert greeting == {
            "type": "hello",
            "model": None,
            "notice": (
                f"The configured model can't answer yet: {why}. Set it where the gateway runs (a "
                "service reads its env file), then restart the gateway."
            ),
        }
        assert reply["text"] == why and reply["kind"] == "error"
        assert daemon.dashboard is not None
        assert daemon.dashboard.state()["model"] == {
            "name": None,
            "source": "configured",
            "problem": why,
        }
        status = daemon.ops.snapshot()
        assert status["ready"] is False
        assert (
            render_status(status).splitlines()[1]
            == f"model: configured, but it cannot answer: {why}"
        )
    finally:
        await daemon.stop()
