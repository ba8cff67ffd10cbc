"""Files a shell command wrote, taken out of the workspace for the chat (gateway/sandbox/files.py):
only regular files inside the workspace, links followed but never out of it, within the size
limit; and a chat whose platform cannot take files is told so in words (the console)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gateway.events import SubmitOutcome
from gateway.sandbox.files import Refused, shown_name, take
from tests.fakes.llm import FakeLLM, Reply, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, llm_url, require, write_config


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "home" / "workspace"
    folder.mkdir(parents=True)
    (tmp_path / "home" / "config.yaml").write_text("telegram: {token: secret}\n")
    return folder


def refusal(workspace: Path, path: str, max_bytes: int = 1000) -> str:
    with pytest.raises(Refused) as refused:
        take(workspace, path, workspace.parent / "copy", max_bytes)
    assert not (workspace.parent / "copy").exists()
    return str(refused.value)


def test_a_file_inside_and_a_link_to_it_are_copied(workspace: Path, tmp_path: Path) -> None:
    (workspace / "out").mkdir()
    (workspace / "out" / "a.txt").write_bytes(b"abc")
    (workspace / "link.txt").symlink_to("out/a.txt")
    assert take(workspace, "out/a.txt", tmp_path / "one", 3) == 3
    assert take(workspace, "./link.txt", tmp_path / "two", 3) == 3
    assert (tmp_path / "two").read_bytes() == b"abc"
    assert oct((tmp_path / "two").stat().st_mode & 0o777) == "0o600"


def test_links_and_paths_out_of_the_workspace_are_refused(workspace: Path) -> None:
    home = workspace.parent
    (workspace / "home").symlink_to(home)
    (workspace / "passwd").symlink_to("/etc/passwd")
    (workspace / "cfg").symlink_to("../config.yaml")
    (workspace / "self").symlink_to(".")
    for path in (
        "home/config.yaml",
        "passwd",
        "cfg",
        "../config.yaml",
        "self/../config.yaml",
        "self",
    ):
        assert "not inside the workspace" in refusal(workspace, path), path
    assert "relative to the workspace" in refusal(workspace, "/etc/passwd")
    assert "relative to the workspace" in refusal(workspace, str(workspace / "x"))


def test_what_is_no_regular_file_within_the_limit_is_refused(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")  # opening it must not wait for a writer
    (workspace / "dir").mkdir()
    (workspace / "big").write_bytes(b"x" * 1001)
    assert refusal(workspace, "pipe") == "not a regular file"
    assert refusal(workspace, "dir") == "not a regular file"
    assert refusal(workspace, "missing") == "no such file"
    assert refusal(workspace, "big") == "1001 bytes, over the limit of 1000 bytes"
    assert refusal(workspace, "") == "an empty path"


def test_the_name_shown_is_the_last_part_without_control_characters() -> None:
    assert shown_name("out/report\x1b[31m.txt") == "report[31m.txt"
    assert shown_name("a/" + "x" * 300 + ".pdf").endswith("….pdf")
    assert len(shown_name("x" * 300)) <= 120


async def test_a_chat_that_cannot_take_files_is_told_in_words(
    home: Path, fake_llm: FakeLLM
) -> None:
    """The console has no file ability: the chat gets a line naming the files left in the
    workspace, the model is told, nothing is queued."""
    require(None if shutil.which("bwrap") else "bubblewrap is not installed")
    write_config(
        home,
        base_url=llm_url(fake_llm, "anthropic"),
        extra="tools:\n  shell:\n    enabled: true\n    approve: never\n",
    )
    fake_llm.script(
        ToolCall("shell", {"command": "echo hi > a.txt", "attach": ["a.txt"]}),
        Reply("It is in the workspace."),
    )
    console = RecordingAdapter("cli")
    gw = gateway_for(home, [console])
    try:
        result = await gw.sessions.submit(inbound("write a file"))
        assert result.outcome is SubmitOutcome.ACCEPTED
        await console.wait_for(2)
        await gw.sessions.wait_idle()
        texts = console.texts()
        kinds = [r["kind"] for r in gw.store.all("SELECT kind FROM outbound ORDER BY id")]
    finally:
        await gw.close_tools()
        await gw.llm.close()
        gw.store.close()
    assert texts == [
        "📎 Files cannot be sent in this chat; a.txt stayed in the workspace.",
        "It is in the workspace.",
    ]
    assert "file" not in kinds
    said = str(fake_llm.anthropic_requests()[1]["messages"][-1]["content"])
    assert "this chat cannot receive files (a.txt)" in said
    assert (home / "workspace" / "a.txt").read_text() == "hi\n"
