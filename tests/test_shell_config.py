"""`tools.shell`: off by default; a sandbox-less shell, a bad mount or env name, a workspace or
mount that would show the gateway's home: each a config error with file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.agent.tools.policy import check_tool_names
from gateway.config.settings import load_config
from gateway.config.shell import MountConfig
from gateway.errors import ConfigError


def load(home: Path, text: str) -> object:
    (home / "config.yaml").write_text(text, encoding="utf-8")
    return load_config(home, env={"SHELL_TOKEN": "s3cret"})


def test_the_shell_is_off_by_default(tmp_path: Path) -> None:
    shell = load_config(tmp_path, env={}).tools.shell
    assert not shell.enabled and shell.sandbox == "bubblewrap" and shell.approve == "always"
    assert not shell.network and shell.timeout_s == 60
    assert shell.workspace(tmp_path) == tmp_path / "workspace"


BAD = [
    (
        "tools:\n  shell:\n    enabled: true\n    sandbox: none\n",
        "config.yaml:4: tools.shell.sandbox: `sandbox: none` runs the agent's commands with all of",
    ),
    (
        "tools:\n  shell:\n    sandbox: nsjail\n",
        "config.yaml:3: tools.shell.sandbox: expected one of bubblewrap, none",
    ),
    ("tools:\n  shell:\n    mounts: [{path: data}]\n", "tools.shell.mounts[0].path"),
    ("tools:\n  shell:\n    mounts: [{path: /srv, to: /etc}]\n", "/etc is the sandbox's own"),
    ("tools:\n  shell:\n    mounts: [{path: /srv, mode: rwx}]\n", "expected one of ro, rw"),
    (
        "tools:\n  shell:\n    env:\n      'A B': x\n",
        "config.yaml:4: tools.shell.env: not a variable",
    ),
    ("tools:\n  shell:\n    timeout_s: 0\n", "config.yaml:3: tools.shell.timeout_s"),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_a_bad_shell_section_names_file_line_and_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert expected in str(info.value)
    assert str(tmp_path / "config.yaml") in str(info.value)


def test_no_sandbox_needs_both_keys(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "tools:\n  shell:\n    enabled: true\n    sandbox: none\n    unsafe_no_sandbox: true\n",
    )
    assert config.tools.shell.sandbox == "none"  # type: ignore[attr-defined]


def test_mounts_and_env(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "tools:\n  shell:\n    mounts:\n      - {path: /srv/data}\n"
        "      - {path: /srv/out, mode: rw}\n      - {path: /opt/x, to: /x}\n"
        "      - {path: /var/cache/y, to: /y, mode: rw}\n"
        "    env:\n      TOKEN: ${SHELL_TOKEN}\n",
    )
    shell = config.tools.shell  # type: ignore[attr-defined]
    assert shell.mounts == (
        MountConfig(Path("/srv/data")),
        MountConfig(Path("/srv/out"), None, "rw"),
        MountConfig(Path("/opt/x"), Path("/x"), "ro"),
        MountConfig(Path("/var/cache/y"), Path("/y"), "rw"),
    )
    assert shell.env["TOKEN"].value == "s3cret" and "s3cret" not in repr(shell)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("    workdir: ..\n", "tools.shell.workdir"),
        ("    mounts: [{{path: '{home}/memories'}}]\n", "tools.shell.mounts[0]"),
    ],
)
def test_a_workspace_or_mount_showing_the_home_is_refused(
    tmp_path: Path, section: str, key: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    text = "tools:\n  shell:\n    enabled: true\n" + section.format(home=home)
    config = load(home, text)
    with pytest.raises(ConfigError) as info:
        check_tool_names(config)  # type: ignore[arg-type]
    assert f"config.yaml:4: {key}" in str(info.value) and "never shows" in str(info.value)
