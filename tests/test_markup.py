"""Rendering per flavour: golden files for each flavour,
plus the rules the goldens cannot show alone.

Goldens live in tests/golden/markup/: `<case>.md` is the input, `<case>.<flavor>.txt` the expected
output (Telegram's shows the text, then each entity with the text it covers). `UPDATE_GOLDEN=1
pytest tests/test_markup.py` rewrites them; read the diff before committing, as they must be right,
not just current.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.delivery.markup.render import (
    Flavor,
    render,
    to_discord,
    to_plain,
    to_slack_mrkdwn,
    to_telegram,
)

GOLDEN = Path(__file__).parent / "golden" / "markup"
CASES = sorted(p.stem for p in GOLDEN.glob("*.md"))
FLAVORS: tuple[Flavor, ...] = ("telegram", "slack", "discord", "plain")


def show(markdown: str, flavor: Flavor) -> str:
    if flavor != "telegram":
        return render(markdown, flavor).text + "\n"
    text, entities = to_telegram(markdown)
    units = text.encode("utf-16-le")
    lines = [text, "", "==== entities: type offset+length (UTF-16) and the text covered"]
    for e in entities:
        covered = units[2 * e.offset : 2 * (e.offset + e.length)].decode("utf-16-le")
        extra = "".join(f" {k}={v}" for k, v in (("url", e.url), ("language", e.language)) if v)
        lines.append(f"{e.type} {e.offset}+{e.length}{extra}: {covered!r}")
    return "\n".join(lines) + "\n"


def test_goldens_exist() -> None:
    assert {
        "nested_lists",
        "links",
        "code",
        "tables",
        "headings",
        "quotes",
        "emphasis",
        "html",
    } <= set(CASES)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, flavor: Flavor) -> None:
    markdown = (GOLDEN / f"{case}.md").read_text(encoding="utf-8")
    expected_file = GOLDEN / f"{case}.{flavor}.txt"
    got = show(markdown, flavor)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        expected_file.write_text(got, encoding="utf-8")
    assert got == expected_file.read_text(encoding="utf-8")


# -- rules -----------------------------------------------------------------------------------------


def test_slack_escapes_text_but_not_its_own_link_syntax() -> None:
    assert to_slack_mrkdwn("a & b <c> [x](https://e.com/?a=1&b=2)") == (
        "a &amp; b &lt;c&gt; <https://e.com/?a=1&amp;b=2|x>"
    )


def test_slack_link_url_cannot_break_out_of_its_brackets() -> None:
    assert to_slack_mrkdwn("[t](https://e.com/a|b)") == "<https://e.com/a%7Cb|t>"


def test_discord_percent_encodes_parentheses_in_masked_links() -> None:
    assert to_discord("[wiki](https://en.wikipedia.org/wiki/Foo_(bar))") == (
        "[wiki](https://en.wikipedia.org/wiki/Foo_%28bar%29)"
    )


def test_discord_leaves_bare_urls_unescaped() -> None:
    assert (
        to_discord("go to https://x.y/a_b_c now, snake_case \\_x\\_")
        == "go to https://x.y/a_b_c now, snake_case \\_x\\_"
    )


def test_triple_backticks_inside_code_cannot_close_the_fence() -> None:
    for flavor in ("slack", "discord"):
        text = render("```\na ``` b\n```", flavor).text
        assert text.count("```") == 2


def test_fence_language_is_kept_for_discord_only_and_sanitised() -> None:
    assert to_discord("```python\nx\n```") == "```python\nx\n```"
    assert to_slack_mrkdwn("```python\nx\n```") == "```\nx\n```"
    assert to_discord("```rm -rf /; echo\nx\n```") == "```rm\nx\n```"


def test_telegram_shows_raw_html_as_typed() -> None:
    text, entities = to_telegram("a <b>x</b> <div>\n\n<div>\nblock\n</div>")
    assert text == "a <b>x</b> <div>\n\n<div>\nblock\n</div>"
    assert entities == []


def test_telegram_nested_quotes_become_one_quote() -> None:
    text, entities = to_telegram("> outer\n>> inner")
    assert text == "outer\ninner"
    assert [(e.type, e.offset, e.length) for e in entities] == [("blockquote", 0, 11)]


def test_telegram_table_is_a_pre_block() -> None:
    text, entities = to_telegram("| a | b |\n|---|---|\n| 1 | 2 |")
    assert [e.type for e in entities] == ["pre"] and entities[0].offset == 0
    assert entities[0].length == len(text) and "a | b" in text


def test_tables_are_code_blocks_on_slack_and_discord_and_aligned_text_in_plain() -> None:
    table = "| a | b |\n|---|--:|\n| 中文 | 1 |\n| x | 22 |"
    assert to_discord(table) == "```\na    |  b\n-----+---\n中文 |  1\nx    | 22\n```"
    assert to_slack_mrkdwn(table) == "```\na    |  b\n-----+---\n中文 |  1\nx    | 22\n```"
    assert to_plain(table) == "a    |  b\n-----+---\n中文 |  1\nx    | 22"


def test_lone_surrogates_are_replaced_not_sent() -> None:
    for flavor in FLAVORS:
        text = render("bad \ud800 char", flavor).text
        text.encode("utf-16-le")
        assert "\ufffd" in text


def test_too_deep_nesting_falls_back_to_text_without_losing_any() -> None:
    markdown = ">" * 3000 + " deep *x*\n\nnext"
    for flavor in ("slack", "discord", "plain"):
        text = render(markdown, flavor).text
        assert "deep" in text and "next" in text


def test_plain_keeps_link_targets_and_drops_markup() -> None:
    assert to_plain("**Hi** see [docs](https://d.example) or <https://x.y>") == (
        "Hi see docs (https://d.example) or https://x.y"
    )
