"""The README's first command, run as written in a fresh copy of the project: a venv, `pip install
-e .`, `gateway init` (answered on stdin, as a person would) and `gateway run`, which then answers
the web chat.

It installs the project and its dependencies from the package index into a new venv, which takes a
minute or more, so it runs in CI (GATEWAY_CI=1, set by .ci/run, which itself runs the README's test
command as written) or when GATEWAY_README_TEST=1 asks for it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from gateway.config.settings import load_config
from tests.daemon_proc import NotifySocket, WebChatClient, free_port
from tests.fakes.llm import FakeLLM

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(
    not (os.environ.get("GATEWAY_CI") or os.environ.get("GATEWAY_README_TEST")),
    reason="installs the project into a fresh venv (GATEWAY_README_TEST=1 runs it)",
)


def first_command() -> str:
    block = re.search(
        r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL
    )
    assert block is not None
    return block.group(1)


def fresh_copy(into: Path) -> None:
    """The project as a clone would have it: the tracked
    files only (no venv, no build leftovers)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)


@pytest.mark.timeout(1200)
async def test_the_readme_first_command_works_as_written(tmp_path: Path, fake_llm: FakeLLM) -> None:
    project, gw_home = tmp_path / "agent-gateway", tmp_path / "home" / ".agent-gateway"
    fresh_copy(project)
    notify = NotifySocket(tmp_path / "notify.sock")
    # gateway init's questions: another OpenAI-compatible server (the fake model, on 127.0.0.1), its
    # URL, the model's name, no key variable, the test request (yes), no chat platforms, no pairing,
    # no service.
    answers = "".join(
        f"{line}\n" for line in ("5", fake_llm.openai_base_url, "local-model", "", "", "", "n", "n")
    )
    # The web port comes from the OS: 8765, init's default, may be the developer's own gateway.
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "NOTIFY_SOCKET": str(notify.path),
        "GATEWAY_WEB_PORT": str(free_port()),
    }
    if "PIP_CACHE_DIR" not in os.environ:
        # the developer's pip cache, so the index is asked, not downloaded from
        env["PIP_CACHE_DIR"] = str(Path.home() / ".cache" / "pip")
    shell = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        first_command(),
        cwd=project,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert shell.stdin is not None and shell.stdout is not None
    shell.stdin.write(answers.encode())
    await shell.stdin.drain()
    shell.stdin.close()
    output = bytearray()

    async def pump() -> None:
        assert shell.stdout is not None
        while chunk := await shell.stdout.read(65536):
            output.extend(chunk)

    reader = asyncio.create_task(pump())
    try:
        ready = asyncio.create_task(notify.wait_for("READY=1", 1000))
        # ready, or the shell gave up
        await asyncio.wait({ready, reader}, return_when=asyncio.FIRST_COMPLETED)
        assert ready.done() and ready.exception() is None, output.decode(errors="replace")[-3000:]
        assert b"ok   model     openai/local-model answered" in output
        assert f"wrote {gw_home}/config.yaml".encode() in output
        port = load_config(gw_home, env={}).web.port
        assert port == int(env["GATEWAY_WEB_PORT"])
        async with WebChatClient(port, "readme", home=gw_home) as tab:
            await tab.say("hello from the README")
            reply = await tab.next("message")
        assert reply["text"] == "echo: hello from the README [users=1]"
    finally:
        lock = gw_home / "gateway.lock"  # `gateway run` holds it and writes its PID there
        if shell.returncode is None and lock.exists() and lock.read_text().strip().isdigit():
            # it drains, exits 0, and so does the shell
            os.kill(int(lock.read_text().strip()), signal.SIGTERM)
        elif shell.returncode is None:
            os.killpg(shell.pid, signal.SIGKILL)
        code = await asyncio.wait_for(shell.wait(), 120)
        await reader
        notify.close()
    assert code == 0, output.decode(errors="replace")[-3000:]
