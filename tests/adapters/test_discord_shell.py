"""The shell's files on Discord end to end: real discord.py against the fake Discord, the whole
daemon, the fake LLM and the real bubblewrap (`approve: never` here: the asking is tested on
Telegram and Slack). The file the command wrote is posted as an attachment under its own name,
with the stored row's nonce, before the agent's answer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.adapters.test_discord import DM, running
from tests.fakes.discord import USER_ID, FakeDiscord
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import require


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require(
        None if shutil.which("bwrap") else "bubblewrap is not installed (apt install bubblewrap)"
    )


async def test_the_file_a_command_wrote_is_posted_as_an_attachment(
    home: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    shell = (
        f"access:\n  admins: ['discord:{USER_ID}']\n"
        "tools:\n  shell:\n    enabled: true\n    approve: never\n"
    )
    fake_llm.script(
        ToolCall("shell", {"command": "seq 3 > numbers.txt", "attach": ["numbers.txt"]}),
        Reply("Attached."),
    )
    async with running(home, fake_llm, fake_discord, shell):
        await fake_discord.push_message(DM, "count to three into a file")
        await fake_discord.wait_for_sent(DM, count=2)
        posted, answer = fake_discord.sent_messages(DM)
    assert answer.content == "Attached."
    assert [(f["filename"], f["data"]) for f in posted.files] == [("numbers.txt", b"1\n2\n3\n")]
    assert "sent to the chat as numbers.txt (6 bytes)" in str(fake_llm.anthropic_requests()[1])
