"""Chunking: every chunk fits the platform as the platform counts, and splits never break markup.

The precise concatenation property (see `Piece`): chunk i's text is `head + rendered[start:end] +
tail`, where `head` is the reopen line ("```lang\\n", after the code block's container prefix) when
`start` falls inside a code block, `tail` the close line ("\\n```", or "```" right after a newline)
when `end` does, and both are "" otherwise. Pieces follow one another and only whitespace lies
between them (a piece holding nothing but whitespace is dropped, as platforms refuse blank
messages). So removing the added fence lines and concatenating the chunks gives the rendered text
back, up to whitespace at chunk edges.
"""

from __future__ import annotations

import itertools
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.delivery.chunking import (
    MIN_LIMIT,
    MIN_LIMIT_TEXT,
    MIN_LINES,
    Chunk,
    LengthUnit,
    TextEntity,
    render_chunks,
    split_rendered,
)
from gateway.delivery.markup.render import FENCE, Flavor, Rendered, render, utf16_len

FLAVORS: tuple[Flavor, ...] = ("telegram", "slack", "discord", "plain")
PREFIX_CHARS = " >•-*0123456789."  # what quote and list containers put before a line's content

# -- helpers ---------------------------------------------------------------------------------------


def u16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def measure(chunk: Chunk, flavor: Flavor, unit: LengthUnit) -> int:
    return u16(chunk.text) if flavor == "telegram" or unit == "utf16" else len(chunk.text)


def line_count(text: str) -> int:
    return text.rstrip().count("\n") + 1


def fences_closed(text: str) -> bool:
    """Walk lines; a line whose content (after quote/list/indent
    prefix) starts with ``` toggles a block."""
    inside = False
    for line in text.split("\n"):
        if line.lstrip(PREFIX_CHARS).startswith(FENCE):
            inside = not inside
    return not inside and text.count(FENCE) % 2 == 0


def check_pieces(
    rendered: Rendered,
    chunks: list[Chunk],
    flavor: Flavor,
    limit: int,
    unit: LengthUnit,
    max_lines: int | None,
) -> None:
    text = rendered.text
    pieces = split_rendered(
        rendered, limit=limit, unit="utf16" if flavor == "telegram" else unit, max_lines=max_lines
    )
    assert [p.head + text[p.start : p.end] + p.tail for p in pieces] == [c.text for c in chunks]
    if not pieces:
        assert not text.strip()
        return
    assert not text[: pieces[0].start].strip() and not text[pieces[-1].end :].strip()
    for before, after in itertools.pairwise(pieces):
        assert before.end <= after.start and not text[before.end : after.start].strip()
    for p in pieces:
        assert text[p.start : p.end].strip()
        if p.head:
            # reopens the code block it starts in, with its language (after the continuation prefix)
            opener = p.head.split("\n")[0].lstrip(PREFIX_CHARS)
            last_open = [
                ln.lstrip(PREFIX_CHARS)
                for ln in text[: p.start].split("\n")
                if ln.lstrip(PREFIX_CHARS).startswith(FENCE)
            ]
            assert last_open and last_open[-1] == opener
        if p.tail:
            assert p.tail.endswith(FENCE) and p.tail.strip(" >\n") == FENCE


def check_chunks(
    markdown: str,
    flavor: Flavor,
    limit: int,
    unit: LengthUnit = "chars",
    max_lines: int | None = None,
) -> list[Chunk]:
    chunks = render_chunks(markdown, flavor, limit=limit, unit=unit, max_lines=max_lines)
    for chunk in chunks:
        assert measure(chunk, flavor, unit) <= limit
        chunk.text.encode("utf-16-le")  # strict: a split surrogate would raise
        chunk.plain.encode("utf-16-le")
        assert chunk.text.strip()
        if max_lines is not None:
            assert line_count(chunk.text) <= max_lines
        if flavor in ("slack", "discord"):
            assert fences_closed(chunk.text), chunk.text
            assert chunk.entities == ()
        if flavor == "telegram":
            assert chunk.plain == chunk.text
            for e in chunk.entities:
                assert 0 <= e.offset and e.length > 0 and e.offset + e.length <= u16(chunk.text)
    if markdown.strip():
        check_pieces(render(markdown, flavor), chunks, flavor, limit, unit, max_lines)
    else:
        assert chunks == []
    return chunks


# -- property tests --------------------------------------------------------------------------------

ATOMS = st.sampled_from(
    [
        "**",
        "*",
        "_",
        "~~",
        "`",
        "``",
        "```",
        "```python\n",
        "\n```\n",
        "~~~\n",
        "\n",
        "\n\n",
        "\n\n\n",
        "- ",
        "  - ",
        "    - ",
        "1. ",
        "> ",
        ">> ",
        "# ",
        "### ",
        "| a | b |\n|---|--:|\n| 1 | 2 |\n",
        "[link](https://example.com/a_(b))",
        "<https://x.y/?a=1&b=2>",
        "https://x.y/a_b",
        "<b>x</b>",
        "&",
        "<",
        ">",
        "&amp;",
        "\\",
        "|",
        "||",
        "😀",
        "👨‍👩‍👧",
        "🇫🇷",
        "é",
        "e\u0301",
        "中文字符",
        "\t",
        "    ",
        " ",
        " ",
        " ",
        "---\n",
        "![img](http://i.png)",
        "\U0001f600" * 30,
    ]
)
WORDS = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=10)
LONG_WORDS = st.text(st.sampled_from("ab_*😀中é\u0301"), min_size=40, max_size=600)
INLINE = (
    st.lists(st.one_of(ATOMS, WORDS, WORDS), max_size=30)
    .map("".join)
    .map(lambda s: s.replace("\n", " "))
)
CODE = st.lists(st.one_of(WORDS, LONG_WORDS, st.just("")), max_size=40).map("\n".join)


@st.composite
def _block(draw: st.DrawFn, depth: int = 0) -> str:
    kind = draw(
        st.sampled_from(
            ["para", "fence", "list", "quote", "table"] if depth < 3 else ["para", "fence"]
        )
    )
    if kind == "para":
        return draw(INLINE)
    if kind == "fence":
        lang = draw(st.sampled_from(["", "python", "c++", "weird lang!"]))
        return f"```{lang}\n{draw(CODE)}\n```"
    if kind == "table":
        cells = draw(
            st.lists(
                WORDS.map(lambda w: w.replace("|", "\\|").replace("\n", " ")),
                min_size=4,
                max_size=12,
            )
        )
        return "| a | b |\n|---|:-:|\n" + "".join(
            f"| {x} | {y} |\n" for x, y in zip(cells[::2], cells[1::2], strict=False)
        )
    inner = draw(st.lists(_block(depth + 1), min_size=1, max_size=3))
    if kind == "quote":
        return "\n".join("> " + line for b in inner for line in b.split("\n"))
    marker = draw(st.sampled_from(["- ", "1. ", "* "]))
    pad = " " * len(marker)
    return "\n".join(
        marker + "\n".join(pad + ln if k else ln for k, ln in enumerate(b.split("\n")))
        for b in inner
    )


STRUCTURED = st.lists(_block(), max_size=8).map("\n\n".join)
MARKDOWN = st.one_of(
    st.lists(st.one_of(ATOMS, ATOMS, WORDS, LONG_WORDS), max_size=120).map("".join), STRUCTURED
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    markdown=MARKDOWN,
    flavor=st.sampled_from(FLAVORS),
    limit=st.integers(MIN_LIMIT, 700),
    unit=st.sampled_from(["chars", "utf16"]),
)
def test_chunks_fit_tile_and_keep_fences_balanced(
    markdown: str, flavor: Flavor, limit: int, unit: LengthUnit
) -> None:
    check_chunks(markdown, flavor, limit, unit)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown=MARKDOWN, limit=st.integers(MIN_LIMIT, 2000), max_lines=st.integers(4, 25))
def test_discord_line_cap(markdown: str, limit: int, max_lines: int) -> None:
    check_chunks(markdown, "discord", limit, max_lines=max_lines)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown=MARKDOWN, limit=st.integers(MIN_LIMIT, 700))
def test_telegram_entities_are_clipped_originals(markdown: str, limit: int) -> None:
    """Every chunk entity is a piece of an entity of the whole text, same type, URL and language."""
    rendered = render(markdown, "telegram")
    chunks = check_chunks(markdown, "telegram", limit)
    for piece, chunk in zip(
        split_rendered(rendered, limit=limit, unit="utf16"), chunks, strict=False
    ):
        lo = u16(rendered.text[: piece.start])
        for e in chunk.entities:
            start = lo + e.offset
            assert any(
                o.type == e.type
                and o.url == e.url
                and o.language == e.language
                and o.offset <= start
                and start + e.length <= o.offset + o.length
                for o in rendered.entities
            ), e


# -- the cases the issue names ---------------------------------------------------------------------


def test_discord_fence_across_the_2000_boundary_is_closed_and_reopened() -> None:
    intro = "Here is the script you asked for, with comments.\n\n"
    code = "\n".join(f"value_{i:03d} = compute({i})  # step {i}" for i in range(70))
    markdown = intro + "```python\n" + code + "\n```\n\nThat is all."
    assert 2400 <= len(markdown) <= 2600

    chunks = check_chunks(markdown, "discord", 2000)

    assert len(chunks) == 2
    first, second = chunks[0].text, chunks[1].text
    assert len(first) <= 2000 and len(second) <= 2000
    assert first.startswith(intro + "```python\nvalue_000")
    assert first.endswith("\n```") and first.count("```") == 2
    assert second.startswith("```python\nvalue_") and second.endswith("```\n\nThat is all.")
    # Nothing lost or repeated: the code lines appear once each, in order.
    lines = [ln for c in (first, second) for ln in c.split("\n") if ln.startswith("value_")]
    assert lines == code.split("\n")
    # The split falls on a line boundary, and the plain fallback has no fences.
    assert first.split("\n")[-2].startswith("value_") and first.split("\n")[-2].endswith(
        tuple("0123456789")
    )
    assert "```" not in chunks[0].plain and chunks[0].plain.startswith(intro + "value_000")


def test_paragraph_boundary_preferred_over_line_and_word() -> None:
    para1 = "\n".join(["line of the first paragraph"] * 30)  # 30 * 28 = 839 chars
    para2 = "word " * 300
    chunks = check_chunks(para1 + "\n\n" + para2, "plain", 1000)
    assert chunks[0].text == para1 + "\n\n"


def test_line_boundary_preferred_over_word() -> None:
    text = "\n".join(["some words on a line"] * 100)
    chunks = check_chunks(text, "plain", 200)
    assert all(c.text.endswith("\n") for c in chunks[:-1])
    assert all(c.text.startswith("some") for c in chunks)


def test_word_boundary_then_hard_split() -> None:
    words = check_chunks("lorem ipsum " * 100, "plain", 200)
    assert all(c.text.endswith(" ") for c in words[:-1])
    assert all(set(c.text.split()) <= {"lorem", "ipsum"} for c in words)
    hard = check_chunks("x" * 1000, "plain", 300)
    assert [len(c.text) for c in hard] == [300, 300, 300, 100]


def test_telegram_counts_utf16_and_never_splits_a_surrogate_pair() -> None:
    chunks = check_chunks("😀" * 5000, "telegram", 4096)
    assert [u16(c.text) for c in chunks] == [4096, 4096, 1808]
    assert "".join(c.text for c in chunks) == "😀" * 5000


def test_emoji_sequences_and_combining_marks_stay_whole() -> None:
    family = "👨\u200d👩\u200d👧"
    chunks = check_chunks(family * 300, "discord", 500)
    assert all(c.text.startswith("👨") and c.text.endswith("👧") for c in chunks)
    accents = check_chunks("e\u0301" * 400, "plain", 301)
    assert all(c.text.startswith("e") and c.text.endswith("\u0301") for c in accents)
    flags = check_chunks("🇫🇷🇩🇪" * 200, "slack", 301)
    assert all(c.text.startswith("🇫🇷") and len(c.text) % 2 == 0 for c in flags)


def test_slack_escapes_and_links_are_never_split() -> None:
    amps = check_chunks("&<>" * 700, "slack", 500)
    assert len(amps) > 1
    for c in amps:
        assert re.fullmatch(r"(?:&amp;|&lt;|&gt;)+", c.text), c.text[:20]
    links = check_chunks(
        "see [the docs](https://example.com/docs?page=1&x=2) now " * 60, "slack", 400
    )
    for c in links:
        assert c.text.count("<") == c.text.count(">") == c.text.count("|")
        assert c.plain.count("(https://example.com/docs?page=1&amp;x=2)") == c.text.count("<https")


def test_discord_escape_and_masked_link_never_split() -> None:
    chunks = check_chunks("a*b_c " * 200 + " [link text](https://x.y/p_(q)) " * 30, "discord", 300)
    for c in chunks:
        assert not c.text.endswith("\\")
        assert c.text.count("[link text](") == c.text.count("https://x.y/p_%28q%29)")


def test_telegram_pre_split_in_two_stays_pre_with_language() -> None:
    code = "\n".join(f"let v{i} = {i};" for i in range(600))
    chunks = check_chunks(f"Intro.\n\n```rust\n{code}\n```\n\nOutro.", "telegram", 4096)
    assert len(chunks) >= 2
    pres = [e for c in chunks for e in c.entities if e.type == "pre"]
    assert len(pres) == len(chunks) and all(e.language == "rust" for e in pres)
    body = "".join(
        c.text[e.offset : e.offset + e.length]
        for c in chunks
        for e in c.entities
        if e.type == "pre"
    )
    assert body.replace("\n", "") == code.replace("\n", "")


def test_telegram_entity_that_fits_moves_whole_to_next_chunk() -> None:
    lead = "filler words here " * 12  # 216 chars
    bold = "**" + "important " * 10 + "end**"
    chunks = check_chunks(lead + bold, "telegram", 250)
    assert len(chunks) == 2
    assert chunks[1].text.startswith("important")
    assert chunks[1].entities == (TextEntity("bold", 0, utf16_len("important " * 10 + "end")),)


def test_telegram_entity_longer_than_a_chunk_is_clipped_into_both() -> None:
    chunks = check_chunks("**" + "bold " * 100 + "end**", "telegram", 300)
    assert len(chunks) == 2
    assert all(len(c.entities) == 1 and c.entities[0].type == "bold" for c in chunks)
    assert chunks[0].entities[0].length == len(chunks[0].text.rstrip())


def test_discord_max_lines() -> None:
    chunks = check_chunks("\n".join(f"line {i}" for i in range(100)), "discord", 2000, max_lines=20)
    assert [line_count(c.text) for c in chunks] == [20] * 5


def test_code_block_under_a_line_cap_reopens_each_chunk() -> None:
    markdown = "```sh\n" + "\n".join(f"echo {i}" for i in range(30)) + "\n```"
    chunks = check_chunks(markdown, "discord", 2000, max_lines=10)
    assert all(c.text.startswith("```sh\n") and c.text.endswith("```") for c in chunks)
    assert [line_count(c.text) for c in chunks[:-1]] == [10] * (len(chunks) - 1)


def test_fence_inside_quote_and_list_reopens_with_prefix() -> None:
    quoted = "> ```py\n" + "\n".join(f"> x = {i}" for i in range(60)) + "\n> ```\n"
    chunks = check_chunks(quoted, "discord", 200)
    assert len(chunks) > 2 and all(c.text.startswith("> ```py\n> x = ") for c in chunks)
    assert all(c.text.endswith("> ```") for c in chunks)
    listed = (
        "- item\n\n  ```js\n" + "\n".join(f"  let v{i} = {i};" for i in range(40)) + "\n  ```\n"
    )
    chunks = check_chunks(listed, "slack", 200)
    assert all(c.text.endswith("\n```") or c.text.endswith("    ```") for c in chunks)


def test_unclosed_fence_and_html_like_text() -> None:
    for flavor in FLAVORS:
        check_chunks("```python\n" + "print('x')\n" * 2000, flavor, 1000)
        chunks = check_chunks("<b>x</b> " * 3000, flavor, 1000)
        assert "<b>x</b>" in chunks[0].text or "&lt;b&gt;x&lt;/b&gt;" in chunks[0].text


def test_deeply_nested_lists_keep_every_item() -> None:
    markdown = "".join("  " * i + f"- item{i}\n" for i in range(200))
    for flavor in FLAVORS:
        chunks = check_chunks(markdown, flavor, 1000)
        found = re.findall(r"item(\d+)", "".join(c.text for c in chunks))
        assert found == [str(i) for i in range(200)]


def test_whitespace_only_piece_is_dropped() -> None:
    chunks = check_chunks("```\nstart" + " " * 5000 + "end\n```", "discord", 1000)
    assert chunks[0].text.startswith("```\nstart") and chunks[-1].text.endswith("end\n```")


@pytest.mark.parametrize("blank", ["", "   ", "\n\n\t \n"])
def test_empty_input_gives_no_chunks(blank: str) -> None:
    for flavor in FLAVORS:
        assert render_chunks(blank, flavor, limit=4096) == []


def test_limit_below_minimum_is_refused() -> None:
    with pytest.raises(ValueError):
        render_chunks("text", "discord", limit=MIN_LIMIT - 1)
    with pytest.raises(ValueError):
        render_chunks("text", "telegram", limit=MIN_LIMIT_TEXT - 1)
    with pytest.raises(ValueError):
        render_chunks("text", "discord", limit=2000, max_lines=MIN_LINES - 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    markdown=MARKDOWN,
    flavor=st.sampled_from(["telegram", "plain"]),
    limit=st.integers(MIN_LIMIT_TEXT, 80),
)
def test_small_limits_for_flavours_without_fences(
    markdown: str, flavor: Flavor, limit: int
) -> None:
    check_chunks(markdown, flavor, limit, "utf16")


def test_short_reply_is_one_chunk_unchanged() -> None:
    assert render_chunks("Hello **there**", "discord", limit=2000) == [
        Chunk("Hello **there**", (), "Hello there")
    ]
    assert render_chunks("Hello **there**", "telegram", limit=4096) == [
        Chunk("Hello there", (TextEntity("bold", 6, 5),), "Hello there")
    ]


def test_100k_chars_are_fast() -> None:
    section = (
        "## Section\n\nSome **bold** text, `code`, a "
        "[link](https://example.com/x_(y)) & more 😀 中文.\n\n"
        "- item one\n  - nested item\n- item two\n\n> "
        "a quote\n\n```python\nx = 1\nprint(x)\n```\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n" + "plain words go here " * 20 + "\n\n"
    )
    markdown = (section * (100_000 // len(section) + 1))[:100_000]
    for flavor in FLAVORS:
        started = time.process_time()
        chunks = render_chunks(markdown, flavor, limit=4096 if flavor == "telegram" else 2000)
        assert time.process_time() - started < 1.0, flavor
        assert len(chunks) > 10
