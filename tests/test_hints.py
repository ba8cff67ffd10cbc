"""platform_hints.yaml: the shipped file is complete
and valid, overrides resolve, bad files are located.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gateway.errors import ConfigError, ConfigErrors
from gateway.events import PLATFORMS
from gateway.prompt.hints import (
    FLAVORS,
    HintOverride,
    PlatformFacts,
    ResolvedHint,
    load_platform_facts,
    parse_platform_facts,
    resolve_hint,
)

REPO = Path(__file__).resolve().parent.parent

GOOD_ENTRY = "  hint: Be brief.\n  max_length: 100\n  length_unit: chars\n  flavor: plain\n"


def full_file(**overrides: str) -> str:
    """A valid file with every platform; `overrides` swaps in raw YAML bodies for some platforms."""
    return "".join(f"{p}:\n{overrides.get(p, GOOD_ENTRY)}" for p in PLATFORMS)


def test_packaged_file_loads_with_the_documented_facts() -> None:
    facts = load_platform_facts()
    assert list(facts) == list(PLATFORMS)
    got = {p: (f.max_length, f.length_unit, f.flavor, f.max_lines) for p, f in facts.items()}
    assert got == {
        "telegram": (4096, "utf16", "telegram", None),
        "discord": (2000, "chars", "discord", None),
        "slack": (3000, "chars", "slack", None),
        "web": (100000, "chars", "markdown", None),
        "cli": (100000, "chars", "plain", None),
        "cron": (4096, "chars", "markdown", None),
    }
    assert all(f.source == "platform_hints.yaml" and f.name == p for p, f in facts.items())


def test_hints_speak_about_each_platforms_real_rendering() -> None:
    facts = load_platform_facts()
    assert "4096" in facts["telegram"].hint and "tables" in facts["telegram"].hint
    assert "2000" in facts["discord"].hint and "@everyone" in facts["discord"].hint
    assert "mrkdwn" in facts["slack"].hint and "thread" in facts["slack"].hint
    assert "Markdown" in facts["web"].hint
    assert "terminal" in facts["cli"].hint
    assert "no user is present" in facts["cron"].hint
    assert all("\n" not in f.hint for f in facts.values())  # folded scalars: one paragraph each


def test_package_copy_is_the_repo_root_file() -> None:
    link = REPO / "gateway" / "prompt" / "platform_hints.yaml"
    assert link.is_symlink() and link.resolve() == (REPO / "platform_hints.yaml").resolve()
    assert load_platform_facts(REPO / "platform_hints.yaml") == {
        p: dataclasses.replace(f, source=str(REPO / "platform_hints.yaml"))
        for p, f in load_platform_facts().items()
    }


FACTS = PlatformFacts(
    name="telegram", hint="Base hint.", max_length=4096, length_unit="utf16", flavor="telegram"
)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (None, ResolvedHint("Base hint.", "platform_hints.yaml")),
        (HintOverride(), ResolvedHint("Base hint.", "platform_hints.yaml")),
        (
            HintOverride(append="  Use emoji.  "),
            ResolvedHint("Base hint.\n\nUse emoji.", "platform_hints.yaml + config override"),
        ),
        (
            HintOverride(replace="Only this."),
            ResolvedHint("Only this.", "config override (replace)"),
        ),
        (
            HintOverride(replace="Only this.", append="And this."),
            ResolvedHint("Only this.\n\nAnd this.", "config override (replace + append)"),
        ),
        (HintOverride(replace=""), ResolvedHint("", "config override (replace)")),
        (
            HintOverride(replace="", append="Just this."),
            ResolvedHint("Just this.", "config override (replace + append)"),
        ),
        (HintOverride(append="   "), ResolvedHint("Base hint.", "platform_hints.yaml")),
    ],
    ids=[
        "none",
        "empty",
        "append",
        "replace",
        "both",
        "replace-empty",
        "replace-empty-append",
        "blank-append",
    ],
)
def test_resolve_hint_replaces_then_appends(
    override: HintOverride | None, expected: ResolvedHint
) -> None:
    assert resolve_hint(FACTS, override) == expected


def test_bare_string_override_means_append() -> None:
    # config.py turns `platform_hints: {telegram: "text"}` into HintOverride(append="text").
    assert resolve_hint(FACTS, HintOverride("Be playful.")).text == "Base hint.\n\nBe playful."


def test_max_lines_is_optional_and_parsed() -> None:
    text = full_file(
        discord=GOOD_ENTRY + "  max_lines: 40\n", slack=GOOD_ENTRY + "  max_lines: null\n"
    )
    facts = parse_platform_facts(text, file="h.yaml")
    assert facts["discord"].max_lines == 40 and facts["slack"].max_lines is None


def test_flavor_markdown_is_a_known_flavor() -> None:
    assert set(FLAVORS) == {"telegram", "discord", "slack", "markdown", "plain"}


def error_of(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_platform_facts(text, file="platform_hints.yaml")
    return info.value


def test_unknown_platform_is_an_error_with_its_line() -> None:
    err = error_of(full_file() + "whatsapp:\n" + GOOD_ENTRY)
    assert (err.file, err.line, err.key) == ("platform_hints.yaml", 6 * 5 + 1, "whatsapp")
    assert str(err).startswith(
        "platform_hints.yaml:31: whatsapp: unknown platform (known: telegram, discord"
    )


def test_bad_value_names_file_line_and_key() -> None:
    bad = "  hint: Be brief.\n  max_length: lots\n  length_unit: chars\n  flavor: plain\n"
    err = error_of(full_file(discord=bad))
    assert (err.line, err.key) == (8, "discord.max_length")
    assert (
        str(err)
        == "platform_hints.yaml:8: discord.max_length: expected a positive integer; got 'lots'"
    )


@pytest.mark.parametrize(
    ("body", "key", "line", "message"),
    [
        (
            "  hint: ''\n  max_length: 1\n  length_unit: chars\n  flavor: plain\n",
            "slack.hint",
            12,
            "expected non-empty text",
        ),
        (
            "  hint: x\n  max_length: 0\n  length_unit: chars\n  flavor: plain\n",
            "slack.max_length",
            13,
            "positive integer",
        ),
        (
            "  hint: x\n  max_length: 9\n  length_unit: bytes\n  flavor: plain\n",
            "slack.length_unit",
            14,
            "expected one of utf16, chars; got 'bytes'",
        ),
        (
            "  hint: x\n  max_length: 9\n  length_unit: chars\n  flavor: html\n",
            "slack.flavor",
            15,
            "got 'html'",
        ),
        (
            "  hint: x\n  max_length: 9\n  length_unit: chars\n  flavour: plain\n",
            "slack.flavour",
            15,
            "unknown key",
        ),
        (
            "  hint: x\n  max_length: 9\n  length_unit: chars\n",
            "slack.flavor",
            11,
            "required key is missing",
        ),
        ("  - a list\n", "slack", 12, "expected a mapping"),
        (
            "  hint: [a, b]\n  max_length: 9\n  length_unit: chars\n  flavor: plain\n",
            "slack.hint",
            12,
            "got a sequence",
        ),
    ],
)
def test_each_malformed_entry_is_located(body: str, key: str, line: int, message: str) -> None:
    err = error_of(full_file(slack=body))
    errors = err.errors if isinstance(err, ConfigErrors) else [err]
    assert any((e.key, e.line) == (key, line) and message in e.message for e in errors), str(err)


def test_missing_platform_is_an_error() -> None:
    text = "".join(f"{p}:\n{GOOD_ENTRY}" for p in PLATFORMS if p != "cron")
    err = error_of(text)
    assert (err.key, err.line) == ("cron", 1)
    assert "missing" in err.message


def test_several_problems_are_reported_together_in_line_order() -> None:
    err = error_of(
        full_file(
            web="  hint: x\n",
            telegram="  hint: x\n  max_length: -1\n  length_unit: c\n  flavor: plain\n",
        )
    )
    assert isinstance(err, ConfigErrors)
    assert [(e.key, e.line) for e in err.errors] == [
        ("telegram.max_length", 3),
        ("telegram.length_unit", 4),
        ("web.max_length", 16),
        ("web.length_unit", 16),
        ("web.flavor", 16),
    ]


def test_invalid_yaml_is_located() -> None:
    err = error_of("telegram:\n  hint: [unclosed\n  max_length: 1\n")
    assert err.file == "platform_hints.yaml" and err.line == 3
    assert err.message.startswith("invalid YAML")


@pytest.mark.parametrize("text", ["", "just a string\n", "- a\n- b\n"])
def test_top_level_must_be_a_mapping(text: str) -> None:
    assert "mapping of platform name" in error_of(text).message


def test_unreadable_path_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_platform_facts(tmp_path / "nope.yaml")
    assert info.value.file == str(tmp_path / "nope.yaml")
