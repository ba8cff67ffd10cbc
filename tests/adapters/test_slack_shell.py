"""The shell's files on Slack end to end: real slack-bolt in Socket Mode against the fake Slack,
the whole daemon, the fake LLM and the real bubblewrap. The admin's request offers Allow once and
Deny only; once allowed, the file the command wrote is uploaded to the DM with Slack's upload flow
(files.getUploadURLExternal, the upload, files.completeUploadExternal) under its own name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.adapters.test_slack import ALICE, DM, USERS, dm, running
from tests.adapters.test_slack_approvals import answer_in, request_in
from tests.adapters.test_slack_voice import uploaded_to
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.fakes.slack import FakeSlack
from tests.fakes.slack_events import SocketModeEvents
from tests.helpers import require


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require(
        None if shutil.which("bwrap") else "bubblewrap is not installed (apt install bubblewrap)"
    )


SHELL = f"access:\n  admins: ['slack:{ALICE}']\ntools:\n  shell:\n    enabled: true\n"


async def test_an_allowed_command_uploads_the_file_it_wrote_to_the_dm(
    home: Path, fake_llm: FakeLLM
) -> None:
    command = "printf 'a,b\\n1,2\\n' > out/table.csv"
    fake_llm.script(
        ToolCall("shell", {"command": f"mkdir out; {command}", "attach": ["out/table.csv"]}),
        Reply("Here is the table."),
    )
    async with FakeSlack(users=USERS) as fake, running(home, fake_llm, fake, SHELL) as run:
        socket = SocketModeEvents(fake, retry_delays=(0.0, 0.0, 0.0))
        await socket.deliver(dm("make me a table"), event_id="EvTable")
        request = await request_in(fake, DM)
        assert request.buttons() == ["Allow once", "Deny"]
        assert "out/table.csv" in request.text
        clicked = await socket.interact(fake.block_actions(DM, request.ts, "Allow once"))
        assert clicked.outcome == "ok"
        uploaded = await uploaded_to(fake, DM)
        assert await answer_in(fake, DM, 2) == "Here is the table."  # after the file
        await run.gw.sessions.wait_idle()
        rows = run.gw.store.all("SELECT text, status FROM outbound WHERE kind = 'file'")
    assert uploaded["filename"] == "table.csv" and uploaded["title"] == "table.csv"
    assert uploaded["data"] == b"a,b\n1,2\n"
    assert [(r["text"], r["status"]) for r in rows] == [("table.csv", "sent")]
