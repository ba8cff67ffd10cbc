"""Tool policy: agent.tools as an allow list of names and globs, agent.tools_by_platform per
platform, the config check that names every unknown tool with its file and line, and a daemon
without mcp_servers never loads `mcp`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway.agent.tools.policy import TOOL_ORDER, ToolPolicy, name_problems
from gateway.cli.main import main
from gateway.config.settings import load_config
from gateway.errors import ConfigErrors
from gateway.ops.wiring import build_gateway
from tests.helpers import write_config

ROOT = Path(__file__).resolve().parent.parent


def test_globs_and_platform_lists() -> None:
    policy = ToolPolicy(("memory", "web_*", "mcp_github_*"), {"slack": ("mcp_github_list_*",)})
    assert policy.enabled("memory", "telegram") and policy.enabled("web_fetch", "telegram")
    assert policy.enabled("mcp_github_create_issue", "discord")
    assert not policy.enabled("mcp_jira_search", "telegram") and not policy.enabled(
        "skill_view", "web"
    )
    assert policy.enabled("mcp_github_list_issues", "slack") and not policy.enabled(
        "memory", "slack"
    )
    assert ToolPolicy().enabled("anything", "cli")


def test_new_sessions_get_what_the_policy_allows_per_platform(home: Path) -> None:
    write_config(
        home,
        extra="""\
        agent:
          tools: [memory, web_fetch]
          tools_by_platform:
            telegram: [memory, session_search]
        """,
    )
    gw = build_gateway(load_config(home), env={}, probe_ollama=False)
    try:
        assert gw.tool_names("web") == ["memory", "web_fetch"]
        assert gw.tool_names("telegram") == ["memory", "session_search"]
    finally:
        gw.store.close()


def _problems(home: Path, extra: str) -> list[tuple[str, str]]:
    write_config(home, extra=extra)
    return name_problems(load_config(home), TOOL_ORDER)


def test_name_check_accepts_builtins_globs_and_configured_servers(home: Path) -> None:
    assert (
        _problems(
            home,
            """\
        agent:
          tools: [memory, "skill_*", "mcp_github_*", mcp_github_create_issue, "mcp_*"]
        mcp_servers:
          github: {command: github-mcp}
        """,
        )
        == []
    )


def test_name_check_finds_typos_and_unknown_servers(home: Path) -> None:
    problems = _problems(
        home,
        """\
        agent:
          tools: [memroy, mcp_jira_search, web_search]
          tools_by_platform:
            slack: ["mcp_gitlab_*"]
        mcp_servers:
          github: {command: github-mcp}
        """,
    )
    keys = [k for k, _ in problems]
    assert keys == [
        "agent.tools[0]",
        "agent.tools[1]",
        "agent.tools[2]",
        "agent.tools_by_platform.slack[0]",
    ]
    assert "unknown tool 'memroy'" in problems[0][1] and "mcp_servers (github)" in problems[0][1]
    assert "web_search needs tools.web_search" in problems[2][1]


def test_config_check_reports_an_unknown_tool_with_its_line(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (home / "config.yaml").write_text(
        textwrap.dedent("""\
        agent:
          max_iterations: 5
          tools:
            - memory
            - web_fecth
        """),
        encoding="utf-8",
    )
    assert main(["--home", str(home), "config", "check"]) == 78
    err = capsys.readouterr().err
    assert f"{home / 'config.yaml'}:5: agent.tools[1]: unknown tool 'web_fecth'" in err
    with pytest.raises(ConfigErrors):
        build_gateway(load_config(home), env={}, probe_ollama=False)


def test_bad_server_definitions_are_config_errors(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (home / "config.yaml").write_text(
        textwrap.dedent("""\
        mcp_servers:
          both:
            command: x
            url: http://127.0.0.1:1/mcp
          plain:
            url: http://127.0.0.1:1/mcp
            env: {A: b}
        """),
        encoding="utf-8",
    )
    assert main(["--home", str(home), "config", "check"]) == 78
    err = capsys.readouterr().err
    assert (
        "mcp_servers.both: give either `command`" in err
        and "mcp_servers.plain: `args`, `env` and `cwd`" in err
    )


def test_a_daemon_without_mcp_servers_never_imports_mcp(home: Path) -> None:
    write_config(home)  # the web chat on a port from the OS
    code = textwrap.dedent(f"""\
        import asyncio, sys
        from pathlib import Path
        from gateway.config.settings import load_config
        from gateway.ops.daemon import Daemon
        from gateway.ops.wiring import build_gateway
        async def run():
            config = load_config(Path({str(home)!r}))
            gw = build_gateway(config, env={{}}, probe_ollama=False)
            daemon = Daemon(gw, install_signals=False)
            await daemon.start()
            await daemon.stop()
        asyncio.run(run())
        prefixes = ("mcp.", "mcp_types", "trafilatura")
        loaded = sorted(m for m in sys.modules if m == "mcp" or m.startswith(prefixes))
        print(loaded)
        """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_server_names_whose_tool_names_could_clash_are_a_config_error(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`github` with a tool `work_issues` and `github_work` with a tool `issues` would both be
    mcp_github_work_issues: two tools of one name, which the model APIs refuse on every request."""
    (home / "config.yaml").write_text(
        textwrap.dedent("""\
        mcp_servers:
          github:
            command: x
          github_work:
            command: y
          github-home:
            command: z
        """),
        encoding="utf-8",
    )
    assert main(["--home", str(home), "config", "check"]) == 78
    err = capsys.readouterr().err
    assert f"{home / 'config.yaml'}:" in err
    assert "mcp_servers.github_work: the server names 'github' and 'github_work' overlap" in err
    assert "rename one (e.g. 'github-work')" in err and "github-home" not in err
