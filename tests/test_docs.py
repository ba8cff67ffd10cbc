"""The docs cannot drift: docs/configuration.md lists every key of gateway/config/settings.py's
dataclasses with its type and default (and nothing else), and the other pages exist and point at
real commands and files."""

from __future__ import annotations

import dataclasses
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import gateway.config.settings as config_module
from gateway.cli.main import build_parser
from gateway.config.settings import Config
from gateway.config.yamlload import Secret

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PLACEHOLDERS = {"PlatformName": "<platform>", "ChatTypeName": "<chat_type>"}


def _literal_values(tp: Any) -> tuple[Any, ...] | None:
    return typing.get_args(tp) if typing.get_origin(tp) is Literal else None


def type_text(tp: Any) -> str:
    """How the reference writes a field's type."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        parts = [a for a in args if a is not type(None)]
        return " \\| ".join(type_text(a) for a in parts)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is tuple:
        return "list of integers" if args and args[0] is int else "list of strings"
    return {
        int: "int",
        float: "number",
        bool: "bool",
        str: "string",
        Secret: "secret",
        Path: "path",
    }[tp]


def bounds_text(field: dataclasses.Field[Any]) -> str:
    meta = field.metadata
    if meta.get("positive"):
        return ", > 0"
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None:
        return f", {lo:g}–{hi:g}"
    if lo is not None:
        return f", ≥ {lo:g}"
    return ""


def default_text(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if value is None or (isinstance(value, Secret) and not value):  # an empty secret: no token
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list)):
        return "`[]`" if not value else f"`{list(value)}`"
    if isinstance(value, dict):
        return "`{}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def _dataclass_in(tp: Any) -> type | None:
    for candidate in (tp, *typing.get_args(tp)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _placeholder(key_type: Any) -> str:
    if key_type is str:  # names the user picks (mcp_servers.<name>)
        return "<name>"
    for name, text in PLACEHOLDERS.items():
        if key_type == getattr(config_module, name):
            return text
    raise AssertionError(f"no placeholder for mapping keys of type {key_type}")


def reference_rows(
    cls: type = Config, prefix: str = "", seen: dict[type, str] | None = None
) -> list[tuple[str, str, str]]:
    """(key, type, default) for every leaf key, in declaration order, as docs/configuration.md must
    list them. A section an agent or a bot account repeats (an agent's `model`, `telegram.accounts`)
    is one row: "like `model`"."""
    seen = {} if seen is None else seen
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    rows: list[tuple[str, str, str]] = []
    for field in dataclasses.fields(cls):
        if field.metadata.get("internal"):
            continue
        tp, key = hints[field.name], f"{prefix}{field.name}"
        nested = _dataclass_in(tp)
        bare = _optional(tp)
        if typing.get_origin(bare) is dict or _dataclass_in(_item(bare) or int) is not None:
            rows.extend(_entries(bare, key, seen))
        elif nested is not None:
            rows.extend(_section(nested, key, field, seen))
        else:
            rows.append((key, type_text(tp) + bounds_text(field), default_text(field)))
    return rows


def _optional(tp: Any) -> Any:
    """`X` for `X | None`; anything else as it is."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


def _item(tp: Any) -> Any:
    """The item type of a `tuple[X, ...]`, else None."""
    return typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else None


def _entries(tp: Any, key: str, seen: dict[type, str]) -> list[tuple[str, str, str]]:
    """The rows of a mapping (`key.<name>`) or of a list of mappings (`key[].field`)."""
    if _item(tp) is not None:
        return reference_rows(_item(tp), f"{key}[].", seen)
    key_type, value_type = typing.get_args(tp)
    entry = f"{key}.{_placeholder(key_type)}"
    inner = _dataclass_in(value_type)
    if inner is None:
        return [(entry, type_text(value_type), "none")]
    known = _repeated(inner, entry, seen)
    if known is not None:
        return [(entry, f"like `{known}`", "none")]
    seen.setdefault(inner, entry)
    return reference_rows(inner, f"{entry}.", seen)


def _section(
    nested: type, key: str, field: dataclasses.Field[Any], seen: dict[type, str]
) -> list[tuple[str, str, str]]:
    known = _repeated(nested, key, seen)
    if known is not None:
        return [(key, f"like `{known}`", default_text(field))]
    seen.setdefault(nested, key)
    return reference_rows(nested, f"{key}.", seen)


def _repeated(cls: type, key: str, seen: dict[type, str]) -> str | None:
    """Where a section met again under `agents` or `<platform>.accounts` was documented first."""
    if not key.startswith("agents.") and ".accounts." not in key:
        return None
    return next((k for c, k in seen.items() if issubclass(c, cls)), None)


def documented_rows(text: str) -> list[tuple[str, str, str, str]]:
    """Table rows `| `key` | type | default | meaning |` of the reference."""
    found = []
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        assert len(cells) == 4, line
        found.append((cells[0].strip("`"), cells[1], cells[2], cells[3]))
    return found


def test_configuration_reference_lists_every_key_with_its_type_and_default() -> None:
    documented = documented_rows((DOCS / "configuration.md").read_text(encoding="utf-8"))
    expected = reference_rows()
    doc_keys = [row[0] for row in documented]
    assert len(doc_keys) == len(set(doc_keys)), "a key is documented twice"
    missing = [key for key, _, _ in expected if key not in doc_keys]
    unknown = [key for key in doc_keys if key not in {k for k, _, _ in expected}]
    assert not missing, f"undocumented config keys: {missing}"
    assert not unknown, f"documented keys that config.py does not have: {unknown}"
    by_key = {row[0]: row for row in documented}
    for key, type_, default in expected:
        _, doc_type, doc_default, meaning = by_key[key]
        assert (doc_type, doc_default) == (type_, default), (
            f"{key}: docs say {doc_type} / {doc_default}"
        )
        assert len(meaning) > 10, f"{key}: say what it means"


def test_configuration_sections_follow_the_dataclasses() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## `([a-z_]+)`", text, flags=re.MULTILINE)
    top = [f.name for f in dataclasses.fields(Config) if not f.metadata.get("internal")]
    assert headings == top


def test_reference_generator_sees_nested_and_mapped_keys() -> None:
    keys = {k for k, _, _ in reference_rows()}
    assert {
        "model.fallback.name",
        "session_reset.by_platform.<platform>.idle_minutes",
        "sessions.busy_by_platform.<platform>",
        "platform_hints.<platform>.append",
        "telegram.token",
        "daemon.drain_seconds",
        "logging.format",
    } <= keys
    assert "home" not in keys


def test_docs_pages_exist_and_mention_what_they_must() -> None:
    must = {
        "operations.md": [
            "install-service",
            "Type=notify",
            "WatchdogSec",
            "sqlite3",
            ".backup",
            "/metrics",
            "/healthz",
            "/readyz",
            "gateway status",
            "gateway doctor",
            "journalctl",
            "75",
            "78",
            "drain_seconds",
            "gateway_llm_tokens_total",
        ],
        "architecture.md": [
            "stable",
            "context",
            "volatile",
            "```",
            "SessionManager",
            "Outbox",
            "supervisor",
        ],
        "prompt-cache.md": [
            "gateway prompt",
            "--tiers",
            "--session",
            "cache_control",
            "cached_tokens",
            "gateway_llm_cache_hit_ratio",
        ],
    }
    for page, words in must.items():
        text = (DOCS / page).read_text(encoding="utf-8")
        for word in words:
            assert word in text, f"{page} should mention {word!r}"


def test_commands_named_in_the_docs_exist() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands = set(sub.choices)  # type: ignore[arg-type]
    for page in [*DOCS.glob("*.md"), REPO / "README.md"]:
        for cmd in re.findall(
            r"`gateway (?:--[a-z-]+(?: \S+)? )*([a-z][a-z-]+)", page.read_text(encoding="utf-8")
        ):
            assert cmd in commands, f"{page.name} mentions `gateway {cmd}`, which does not exist"


def test_the_docs_name_the_unit_that_install_service_writes() -> None:
    """`systemctl restart gateway` fails: the unit is
    agent-gateway.service (gateway/ops/service.py)."""
    from gateway.ops.service import UNIT_NAME

    unit = UNIT_NAME.removesuffix(".service")
    for page in [*DOCS.glob("*.md"), REPO / "README.md"]:
        text = page.read_text(encoding="utf-8")
        named = re.findall(
            r"systemctl (?:--user )?(?:start|stop|restart|status|reset-failed|enable|disable)"
            r"(?: --now)? ([\w@.-]+)",
            text,
        )
        named += re.findall(r"journalctl (?:--user )?-u ([\w@.-]+)", text)
        for name in named:
            assert name.removesuffix(".service") == unit, (
                f"{page.name} names the unit {name!r}, not {unit!r}"
            )


def test_ci_runs_exactly_the_readme_commands() -> None:
    """.ci/run's last line is the README's test command as written; the README's first command sets
    up a venv."""
    blocks = re.findall(
        r"```sh\n(.*?)\n```", (REPO / "README.md").read_text(encoding="utf-8"), re.DOTALL
    )
    setup, tests = blocks[0], blocks[1]
    assert (
        setup == "python3 -m venv .venv && . .venv/bin/activate && "
        "pip install -e . && gateway init && gateway run"
    )
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").rstrip("\n").splitlines()
    assert ci[-1] == tests
    assert tests.startswith(
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]'"
    )


# ---------------------------------------------------------------------------- platform set-up pages
# The scopes each Slack Web API method needs (Slack's method reference); a method the adapter starts
# to call that is missing here fails the test below, so the manifest cannot fall behind the code.
SLACK_METHOD_SCOPES: dict[str, frozenset[str]] = {
    "auth.test": frozenset(),
    # the app-level token's connections:write, not a bot scope
    "apps.connections.open": frozenset(),
    **{
        f"chat.{m}": frozenset({"chat:write"})
        for m in (
            "postMessage",
            "postEphemeral",
            "update",
            "delete",
            "startStream",
            "appendStream",
            "stopStream",
        )
    },
    "conversations.info": frozenset({"channels:read", "groups:read", "im:read", "mpim:read"}),
    "conversations.replies": frozenset(
        {"channels:history", "groups:history", "im:history", "mpim:history"}
    ),
    "users.info": frozenset({"users:read"}),
    "reactions.add": frozenset({"reactions:write"}),
    "reactions.remove": frozenset({"reactions:write"}),
    # slack_sdk's files_upload_v2: getUploadURLExternal, the upload, completeUploadExternal
    "files.upload.v2": frozenset({"files:write"}),
}
SLACK_EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
}
_SLACK_FAMILIES = (
    "auth|apps|chat|conversations|users|reactions|files|"
    "team|bots|views|assistant|pins|usergroups|dnd"
)


def _slack_source() -> str:
    return "\n".join(
        p.read_text(encoding="utf-8") for p in sorted((REPO / "adapters" / "slack").glob("*.py"))
    )


def test_slack_manifest_asks_for_the_scope_of_every_method_the_adapter_calls() -> None:
    import yaml

    source = _slack_source()
    method = rf"client(?:\(\))?\.((?:{_SLACK_FAMILIES})_[A-Za-z0-9_]+)\b"
    called = {m.replace("_", ".") for m in re.findall(method, source)}
    assert {
        "chat.postMessage",
        "chat.startStream",
        "reactions.add",
        "conversations.replies",
    } <= called
    unknown = called - set(SLACK_METHOD_SCOPES)
    assert not unknown, (
        f"the Slack adapter calls {sorted(unknown)}: add their scopes here and to the manifest"
    )
    needed = set().union(*(SLACK_METHOD_SCOPES[m] for m in called))
    if "url_private" in source:
        needed.add("files:read")  # downloads with the bot token
    manifest = yaml.safe_load((DOCS / "slack-app-manifest.yaml").read_text(encoding="utf-8"))
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    needed |= {SLACK_EVENT_SCOPES[e] for e in events}
    if manifest["features"].get("slash_commands"):
        needed.add("commands")
    granted = set(manifest["oauth_config"]["scopes"]["bot"])
    assert needed <= granted, f"the manifest misses {sorted(needed - granted)}"
    assert not granted - needed, (
        f"the manifest asks for scopes nothing uses: {sorted(granted - needed)}"
    )
    table = (
        (DOCS / "slack.md")
        .read_text(encoding="utf-8")
        .split("Scopes and why each is needed:")[1]
        .split("\n\n")[1]
    )
    first_cells = [row.split("|")[1] for row in table.splitlines() if row.startswith("| `")]
    assert set(re.findall(r"`([a-z_:]+)`", "".join(first_cells))) == granted, (
        "slack.md's scope table ≠ the manifest"
    )


def test_telegram_page_lists_the_command_menu_the_adapter_registers() -> None:
    from adapters.telegram.adapter import COMMANDS

    text = (DOCS / "telegram.md").read_text(encoding="utf-8")
    menu = text.split("Telegram's command menu lists:")[1].split(". These commands")[0]
    assert re.findall(r"`/(\w+)`", menu) == [name for name, _ in COMMANDS]


def test_discord_page_names_every_slash_command_and_the_invite_permissions_add_up() -> None:
    import discord

    from adapters.discord.commands import COMMANDS

    text = (DOCS / "discord.md").read_text(encoding="utf-8")
    intro = text.split("The slash commands")[1].split("\n\n")[0]
    assert set(re.findall(r"`/(\w+)`", intro)) == {name for name, _ in COMMANDS} | {"ask", "jobs"}
    rows = re.findall(r"^  \| ([A-Z][A-Za-z ]+) \| (\d+) \|", text, flags=re.MULTILINE)
    assert rows, "discord.md's permission table"
    for name, value in rows:
        flag = {"View Channels": "view_channel"}.get(name, name.lower().replace(" ", "_"))
        assert getattr(discord.Permissions, flag).flag == int(value), name
    invite = re.search(r"scope=([\w+.]+)&permissions=(\d+)", text)
    assert invite is not None and invite.group(1) == "bot+applications.commands"
    assert int(invite.group(2)) == sum(int(v) for _, v in rows)


def test_cli_flags_named_in_the_docs_exist() -> None:
    """`gateway users timezone --clear`, `gateway init --web-port` …: every --flag written after a
    command exists."""
    parser = build_parser()

    def subcommands(p: Any) -> dict[str, Any]:
        return next(
            (dict(a.choices) for a in p._actions if a.choices and a.dest.endswith("command")), {}
        )

    def flags(p: Any) -> set[str]:
        return {s for a in p._actions for s in a.option_strings}

    top = flags(parser)
    checked = 0
    for page in [*DOCS.glob("*.md"), REPO / "README.md"]:
        text = page.read_text(encoding="utf-8")
        lines = re.findall(r"`(gateway [^`\n]+)`", text) + re.findall(
            r"^\s*(?:sudo )?(gateway \S[^\n#]*)", text, flags=re.MULTILINE
        )
        for line in lines:
            current = parser
            for token in line.split()[1:]:
                if token in subcommands(current):
                    current = subcommands(current)[token]
                elif token.startswith("--"):
                    flag = token.split("=")[0].rstrip(".,;:)]")
                    assert flag in flags(current) | top, (
                        f"{page.name}: `{line}`: {flag} does not exist"
                    )
                    checked += 1
    assert checked > 20


class _AnyEnv(dict[str, str]):
    """Every `${VAR}` an example names is set (to a token-shaped value)."""

    def __missing__(self, key: str) -> str:
        return key.lower().ljust(40, "x")  # two tokens of an example differ, as two bots' do

    def __contains__(self, key: object) -> bool:
        return True


def test_config_examples_in_the_docs_load(tmp_path: Path) -> None:
    """Each ```yaml block whose keys are config sections is a config.yaml that `gateway config
    check` accepts."""
    import yaml

    from gateway.config.settings import load_config

    sections = {f.name for f in dataclasses.fields(Config) if not f.metadata.get("internal")}
    loaded = 0
    for page in [*DOCS.glob("*.md"), REPO / "README.md"]:
        for i, block in enumerate(
            re.findall(r"```ya?ml\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
        ):
            data = yaml.safe_load(block)
            if not isinstance(data, dict) or not set(data) <= sections:
                continue  # another program's file (Prometheus, a manifest)
            path = tmp_path / f"{page.stem}-{i}.yaml"
            path.write_text(block, encoding="utf-8")
            load_config(tmp_path, env=_AnyEnv(), path=path)  # raises ConfigError naming the line
            loaded += 1
    assert loaded >= 15


def test_tools_page_lists_every_built_in_tool() -> None:
    from gateway.agent.tools.policy import TOOL_ORDER

    text = (DOCS / "tools.md").read_text(encoding="utf-8")
    table = text.split("## Built-in tools")[1].split("\n\n")[1]
    named = {
        n
        for row in table.splitlines()
        if row.startswith("| `")
        for n in re.findall(r"`(\w+)`", row.split("|")[1])
    }
    assert named == set(TOOL_ORDER)


def test_each_platform_page_explains_every_key_of_its_section() -> None:
    from gateway.config.settings import DiscordConfig, SlackConfig, TelegramConfig

    for cls, page in (
        (TelegramConfig, "telegram.md"),
        (DiscordConfig, "discord.md"),
        (SlackConfig, "slack.md"),
    ):
        text = (DOCS / page).read_text(encoding="utf-8")
        missing = [f.name for f in dataclasses.fields(cls) if f"| `{f.name}` |" not in text]
        assert not missing, f"{page} does not explain {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_pages_reach_a_file_and_heading_that_exist() -> None:
    pages = [*DOCS.glob("*.md"), REPO / "README.md"]
    checked = 0
    for page in pages:
        for target, anchor in re.findall(
            r"\]\(((?:docs/)?[\w.-]*\.(?:md|yaml)|)(?:#([^)\s]+))?\)",
            page.read_text(encoding="utf-8"),
        ):
            path = (page.parent / target) if target else page
            assert path.is_file(), f"{page.name} links to {target}, which does not exist"
            if anchor:
                headings = re.findall(
                    r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE
                )
                assert anchor in {_slug(h) for h in headings}, (
                    f"{page.name} links to {target}#{anchor}: no such heading"
                )
            checked += 1
    assert checked > 30
