"""Wrap the Python tree at the ruff line length (100): `ruff format`, then what it leaves over.

Run from the repository root in the project's venv; it rewrites files in place, and a second run
changes nothing:

    python scripts/wrap100.py                # gateway/ adapters/ tests/ bench/ scripts/
    python scripts/wrap100.py gateway/x.py   # only these files or folders
    python scripts/wrap100.py --no-mypy      # skip step 4 (minutes on a cold mypy cache)

1. Long lines' trailing comments move to their own lines, then `ruff format` ([tool.ruff.format]
   in pyproject.toml), which would otherwise wrap the code to make room for the comment.
2. On lines still over the limit, until nothing changes:
   - a trailing comment moves above its line (below it after a block's `:`); pragmas stay;
   - comment blocks and docstrings reflow from the long line to the end of its paragraph; list
     items wrap under their own text; tables (two spaces inside a line), code, doctest lines and
     ``` fences are left alone; a line that follows a sentence with a `label:` starts anew;
   - a long string literal splits at spaces into adjacent literals as even as their number allows,
     and a stack of adjacent literals refills from its long one down; f-strings split outside
     their `{fields}` only, and a piece left with no field loses its `f`;
   then ruff's ISC004 fix (parentheses for adjacent literals in a list, tuple or set) and `ruff
   format` again.
3. Verify: each file's AST equals the one it had before step 1, except docstrings, which must keep
   their paragraphs once whitespace is collapsed. Any other difference restores every file and
   exits 1 naming it; each rewrap is checked the same way before it is kept.
4. Pragmas ruff format carried to another line of their statement go back where their finding is:
   `# noqa` by ruff's RUF100, `# type: ignore` by one mypy run (unused ignore + error in the same
   statement). mypy's remaining error count is printed.
5. Print the E501 findings left, by file: those are for a person (a long name, a URL, a table, a
   triple-quoted string that is data, a regex or an f-string with no space outside its fields).

Docstrings read at run time keep every byte: a module's when its code reads `__doc__` other than
as `__doc__.split("\\n\\n")[0]` or `description=__doc__` (argparse collapses the whitespace of
either unless a Raw formatter is in the file; `__doc__.splitlines()[0]` stays exact); a function's
when the file reads `x.__doc__` or builds an MCP server and passes the function as a value (its
docstring is a tool description, as in tests/fakes/mcp_server.py). The gateway's own tools take
their description from `inspect.getdoc` in gateway/agent/tools/schema.py, which keeps the first
paragraph with its whitespace collapsed, so reflowing those docstrings changes no byte of any
prompt.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import json
import re
import shutil
import subprocess
import sys
import time
import tokenize
import tomllib
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("gateway", "adapters", "tests", "bench", "scripts")
MAX_ROUNDS = 8
PRAGMA = re.compile(r"#\s*(type:|noqa|pragma|fmt:|pyright:|mypy:|ruff:|isort:)", re.IGNORECASE)
TRAILING_PRAGMA = re.compile(r"(?<=\S)\s+#\s*(type:|noqa|pyright:|pylint:)[^#]*$", re.IGNORECASE)
# A comment that stops mid-sentence goes on in the comment lines below it.
UNFINISHED = re.compile(r"(,|\bor|\band)\s*$")
FENCE = re.compile(r"(```|~~~)[\w+.-]*$")  # a Markdown fence line, with its language
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+$")
LABEL = re.compile(r"[`'\"]?[\w.()\[\]/-]+[`'\"]?:\s")
BULLET = re.compile(r"([-*+•]|\d{1,2}[.)]|\([0-9a-z]\))( +)(?=\S)")
TABLE = re.compile(r"\S {2,}\S|^\||^\+[-=]")
BANNER = re.compile(r"^(?P<head>.*?)(?P<run>([-=~#*])\3{9,})(?P<tail>.*)$")
# A word that would read as a bullet, a doctest or a comment if a wrapped line began with it.
NO_LINE_START = re.compile(r"([-*+•#]|\d{1,2}[.)]|>>>|\.\.\.)$")
BLOCK_HEADS = {
    "if",
    "elif",
    "else",
    "try",
    "except",
    "finally",
    "for",
    "while",
    "with",
    "def",
    "class",
    "async",
    "match",
    "case",
}
# `__doc__.split("\n\n")[0]`: the first paragraph, whose whitespace argparse collapses.
FIRST_PARAGRAPH = [".", "split", "(", '"\\n\\n"', ")", "[", "0", "]"]
MCP_SERVERS = {"FastMCP", "MCPServer"}

Fixer = Callable[[str, "FileInfo"], str]


@dataclass(frozen=True)
class Exact:
    """Which docstrings of a file are read at run time and so keep every byte."""

    module: bool
    functions: frozenset[str]

    @classmethod
    def of(cls, text: str) -> Exact:
        """The module's docstring when code reads `__doc__` other than as its first paragraph.
        Where code reads `x.__doc__` or builds an MCP server, every function used as a value (a
        tool handed over, not just called)."""
        words = [
            t.string
            for t in tokens(text)
            if t.type in (tokenize.NAME, tokenize.OP, tokenize.STRING, tokenize.NUMBER)
        ]
        module = reads_functions = False
        values: set[str] = set()
        for i, word in enumerate(words):
            after_dot = i > 0 and words[i - 1] == "."
            if word == "__doc__" and not after_dot:
                module |= not _read_loosely(words, i, raw="Raw" in text)
            reads_functions |= word == "__doc__" and after_dot
            reads_functions |= word in MCP_SERVERS or (word == "add_tool" and after_dot)
            called = i + 1 < len(words) and words[i + 1] == "("
            if word.isidentifier() and not called and (i == 0 or words[i - 1] not in ("def", ".")):
                values.add(word)
        return cls(module, frozenset(values) if reads_functions else frozenset())

    def covers(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Module):
            return self.module
        return (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in self.functions
        )


def _read_loosely(words: list[str], i: int, raw: bool) -> bool:
    """Whether `__doc__` at words[i] is read with its whitespace collapsed: as its first paragraph,
    or as a whole argparse description (unless a raw formatter keeps its lines)."""
    if words[i + 1 : i + 1 + len(FIRST_PARAGRAPH)] == FIRST_PARAGRAPH:
        return True
    return not raw and words[i - 2 : i] == ["description", "="] and words[i + 1] in (",", ")")


@dataclass(frozen=True)
class FileInfo:
    path: Path
    limit: int
    exact: Exact


@dataclass
class Line:
    """One line of a paragraph: `lead` is what precedes the text, `room` the columns for it."""

    lead: str
    text: str
    room: int


# ---------------------------------------------------------------------------------------- widths
def cell_width(text: str) -> int:
    """Columns as ruff counts them: wide East Asian characters take two, combining marks none."""
    if text.isascii():
        return len(text)
    width = 0
    for char in text:
        if unicodedata.combining(char) or char in "\u200b\u200c\u200d\ufeff":
            continue
        width += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return width


def line_width(line: str) -> int:
    """Width as E501 sees it: 0 for a line that is one word (a regex, a path) or ends with a URL
    that starts within the limit, else without a trailing pragma comment (`# noqa`, `# type:`)."""
    words = line.split()
    if len(words) == 1 or (words and URL.match(words[-1])):
        return 0 if len(words) == 1 else cell_width(line[: line.rindex(words[-1])])
    pragma = TRAILING_PRAGMA.search(line)
    return cell_width(line[: pragma.start()] if pragma else line)


def long_rows(text: str, limit: int) -> set[int]:
    return {n for n, line in enumerate(text.split("\n"), 1) if line_width(line) > limit}


# ---------------------------------------------------------------------------------------- tokens
def tokens(text: str) -> list[tokenize.TokenInfo]:
    """The file's tokens; on Python 3.12+ an f-string is merged back into one STRING token."""
    found = list(tokenize.generate_tokens(io.StringIO(text).readline))
    fstart, fend = getattr(tokenize, "FSTRING_START", -1), getattr(tokenize, "FSTRING_END", -1)
    if fstart < 0:
        return found
    lines = text.split("\n")
    merged: list[tokenize.TokenInfo] = []
    depth, start = 0, None
    for tok in found:
        if tok.type == fstart:
            depth += 1
            start = start or tok
            continue
        if depth:
            if tok.type == fend:
                depth -= 1
                if depth == 0 and start is not None:
                    body = _slice(lines, start.start, tok.end)
                    merged.append(
                        tokenize.TokenInfo(tokenize.STRING, body, start.start, tok.end, start.line)
                    )
                    start = None
            continue
        merged.append(tok)
    return merged


def _slice(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    if start[0] == end[0]:
        return lines[start[0] - 1][start[1] : end[1]]
    middle = lines[start[0] - 1 : end[0]]
    middle[0], middle[-1] = middle[0][start[1] :], middle[-1][: end[1]]
    return "\n".join(middle)


def apply_edits(text: str, edits: list[tuple[int, int, list[str]]]) -> str:
    """Replace rows first..last (1-based, inclusive) by new lines; edits must not overlap."""
    lines = text.split("\n")
    for first, last, new in sorted(edits, key=lambda e: e[0], reverse=True):
        lines[first - 1 : last] = new
    return "\n".join(lines)


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


# ---------------------------------------------------------------------------------------- reflow
def take(words: list[str], room: int) -> int:
    """How many of `words` go on a line of `room` columns: at least one."""
    count, used = 0, -1
    for word in words:
        used += 1 + cell_width(word)
        if used > room and count:
            break
        count += 1
    while 1 < count < len(words) and NO_LINE_START.match(words[count]):
        count -= 1
    return count


def fill(words: list[str], first: int, rest: int, tail: int) -> list[str]:
    """Greedy lines: the first gets `first` columns, the others `rest`; the last keeps `tail`
    free."""
    chunks: list[str] = []
    while words:
        room = first if not chunks else rest
        count = take(words, room)
        if count == len(words) and count > 1:
            count = take(words, room - tail)
        chunks.append(" ".join(words[:count]))
        words = words[count:]
    return chunks


def balance(words: list[str], first: int, second: int) -> list[str] | None:
    """`words` on two lines as even as the rooms allow: a wrapped one-liner leaves no word alone."""
    best: tuple[int, int] | None = None
    for count in range(1, len(words)):
        one, two = " ".join(words[:count]), " ".join(words[count:])
        if cell_width(one) > first or cell_width(two) > second:
            continue
        if NO_LINE_START.match(words[count]):
            continue
        score = max(cell_width(one), cell_width(two))
        if best is None or score <= best[0]:
            best = (score, count)
    if best is None:
        return None
    return [" ".join(words[: best[1]]), " ".join(words[best[1] :])]


def push_down(lines: list[Line], cont: Line, tail: int) -> list[str] | None:
    """Rewrap a paragraph from its first long line on: words past the edge start the next line.

    Lines before the first long one and after the last one touched keep their breaks; `cont` gives
    the lead and room of added lines; the last line keeps `tail` columns free (closing quotes).
    """
    out: list[str] = []
    carry: list[str] = []
    changed = False
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        room = line.room - (tail if last else 0)
        if not carry and cell_width(line.text) <= room:
            out.append(line.lead + line.text)
            continue
        words = carry + line.text.split()
        if last:
            chunks = fill(words, line.room, cont.room, tail)
            if len(lines) == 1 and len(chunks) == 2 and " " not in chunks[1]:
                # a one-liner would leave its last word alone: two even lines instead
                chunks = balance(words, line.room, cont.room - tail) or chunks
            out.append(line.lead + chunks[0])
            out += [cont.lead + chunk for chunk in chunks[1:]]
            carry = []
        else:
            count = take(words, room)
            out.append(line.lead + " ".join(words[:count]))
            carry = words[count:]
        changed = True
    return out if changed else None


# ---------------------------------------------------------------------------------------- comments
def fix_trailing_comments(text: str, info: FileInfo) -> str:
    """A long line's trailing comment moves to its own lines, wrapped at the limit; so does one that
    goes on below in comment lines at its column (ruff would leave those at the code's)."""
    lines = text.split("\n")
    toks = tokens(text)
    spanned = {
        row
        for tok in toks
        if tok.start[0] != tok.end[0]
        for row in range(tok.start[0] + 1, tok.end[0] + 1)
    }
    edits: list[tuple[int, int, list[str]]] = []
    for n, tok in enumerate(toks):
        row, col = tok.start
        line = lines[row - 1]
        if tok.type != tokenize.COMMENT or not line[:col].strip() or row in spanned:
            continue
        more = _continued(lines, row, col)
        if not more and UNFINISHED.search(tok.string):
            more = _continued(lines, row, len(indent_of(line)))
        too_long = line_width(line) > info.limit
        if not (too_long or more) or (row > 1 and lines[row - 2].endswith("\\")):
            continue
        comment, keep = _movable(tok.string)
        if not comment:
            continue
        code = line[:col].rstrip()
        below = code.endswith(":") and toks[n + 1].type == tokenize.NEWLINE
        code += f"  {keep}" if keep else ""
        last = row + len(more)
        where = _next_indent(lines, last) if below else indent_of(line)
        words = [*comment.lstrip("#").split(), *(w for c in more for w in c.split())]
        room = info.limit - cell_width(where) - 2
        moved = [f"{where}# {chunk}" for chunk in fill(words, room, room, 0)]
        edits.append((row, last, [code, *moved] if below else [*moved, code]))
    return apply_edits(text, edits) if edits else text


def _continued(lines: list[str], row: int, col: int) -> list[str]:
    """The text of the comment lines right below `row` whose `#` stands at column `col` (where the
    trailing comment's did, or where the code starts when that one stops mid-sentence)."""
    more = []
    for line in lines[row:]:
        if not line.lstrip().startswith("#") or len(indent_of(line)) != col:
            break
        more.append(line.strip().lstrip("#"))
    return more


def _movable(comment: str) -> tuple[str, str]:
    """(the part of a trailing comment that may move, the pragma that stays on the line)."""
    parts = re.split(r"\s{2,}(?=#)", comment)
    pragmas = [p for p in parts if PRAGMA.match(p)]
    prose = [p for p in parts if not PRAGMA.match(p)]
    return "  ".join(prose), "  ".join(pragmas)


def _next_indent(lines: list[str], row: int) -> str:
    for line in lines[row:]:
        if line.strip():
            return indent_of(line)
    return indent_of(lines[row - 1]) + "    "


def fix_comment_blocks(text: str, info: FileInfo) -> str:
    lines = text.split("\n")
    rows = sorted(
        {
            tok.start[0]
            for tok in tokens(text)
            if tok.type == tokenize.COMMENT and not lines[tok.start[0] - 1][: tok.start[1]].strip()
        }
    )
    edits: list[tuple[int, int, list[str]]] = []
    for block in _runs(rows, lines):
        if any(cell_width(lines[r - 1]) > info.limit for r in block):
            new = _reflow_comment_block([lines[r - 1] for r in block], info.limit)
            if new is not None:
                edits.append((block[0], block[-1], new))
    return apply_edits(text, edits) if edits else text


def _runs(rows: list[int], lines: list[str]) -> Iterator[list[int]]:
    """Consecutive own-line comment rows at one indentation."""
    block: list[int] = []
    for row in rows:
        same = block and row == block[-1] + 1
        if same and indent_of(lines[row - 1]) == indent_of(lines[block[-1] - 1]):
            block.append(row)
            continue
        if block:
            yield block
        block = [row]
    if block:
        yield block


def _reflow_comment_block(block: list[str], limit: int) -> list[str] | None:
    parsed = [_comment_parts(line) for line in block]
    base = min((len(spaces) for _, spaces, body in parsed if _prose(body)), default=1)
    out: list[str] = []
    para: list[Line] = []
    cont = Line("", "", 0)
    changed = False

    def flush() -> None:
        nonlocal para, changed
        new = push_down(para, cont, 0) if para else None
        changed = changed or new is not None
        out.extend(new if new is not None else [p.lead + p.text for p in para])
        para = []

    for line, (hash_, spaces, body) in zip(block, parsed, strict=True):
        lead = hash_ + spaces
        room = limit - cell_width(lead)
        bullet = BULLET.match(body)
        if (
            para
            and not bullet
            and lead == cont.lead
            and _prose(body)
            and not _breaks(para[-1].text, body)
        ):
            para.append(Line(lead, body, room))
            continue
        flush()
        if _prose(body) and len(spaces) == base and not body.startswith(("!", ":")):
            para = [Line(lead, body, room)]
            hang = lead + " " * (bullet.end() if bullet else 0)
            cont = Line(hang, "", limit - cell_width(hang))
            continue
        banner = _shrink_banner(line, limit)
        changed = changed or banner != line
        out.append(banner)
    flush()
    return out if changed else None


def _comment_parts(line: str) -> tuple[str, str, str]:
    """(indentation and `#`, the spaces after it, the text)."""
    match = re.match(r"^(\s*#)( *)(.*?)\s*$", line)
    assert match is not None
    return match[1], match[2], match[3]


def _breaks(before: str, after: str) -> bool:
    """Whether `after` starts a new point though no blank line separates it: the line before ends a
    sentence and this one opens with a label (`logger: ...`, `` `x`: ...``)."""
    return before.rstrip().endswith((".", "!", "?", ";")) and bool(LABEL.match(after))


def _prose(body: str) -> bool:
    return (
        bool(body)
        and not PRAGMA.match("#" + body)
        and not TABLE.search(body)
        and not BANNER.match(body)
    )


def _shrink_banner(line: str, limit: int) -> str:
    """`# ------ name` past the limit: the run of dashes gets shorter (to no less than ten)."""
    match = BANNER.match(line)
    over = cell_width(line) - limit
    if not match or over <= 0:
        return line
    run = match["run"]
    keep = max(10, len(run) - over)
    return match["head"] + run[:keep] + match["tail"]


# --------------------------------------------------------------------------------------- docstrings
def docstring_nodes(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.Constant]]:
    """(owner, docstring) of the module and every class and function, nested ones too."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                yield node, first.value
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack.extend(child for child in getattr(node, name, ()) if isinstance(child, ast.AST))


def fix_docstrings(text: str, info: FileInfo) -> str:
    lines = text.split("\n")
    toks = {tok.start: tok for tok in tokens(text) if tok.type == tokenize.STRING}
    too_long = long_rows(text, info.limit)
    edits: list[tuple[int, int, list[str]]] = []
    for owner, const in docstring_nodes(ast.parse(text)):
        row, end_row = const.lineno, const.end_lineno or const.lineno
        if info.exact.covers(owner) or not too_long.intersection(range(row, end_row + 1)):
            continue
        byte_col = const.col_offset
        col = len(lines[row - 1].encode()[:byte_col].decode())
        tok = toks.get((row, col))
        if tok is None or tok.end[0] != end_row:
            continue
        new = _reflow_docstring(tok.string, col, info.limit, isinstance(owner, ast.Module))
        if new is None:
            continue
        first, last = lines[row - 1][:col], lines[end_row - 1][tok.end[1] :]
        edits.append((row, end_row, (first + new + last).split("\n")))
    return apply_edits(text, edits) if edits else text


def _reflow_docstring(token: str, col: int, limit: int, is_module: bool) -> str | None:
    match = re.match(r"^([a-zA-Z]*)('''|\"\"\")(.*)\2$", token, re.DOTALL)
    if not match or re.search(r"\\\n", token):
        return None
    prefix, quotes, body = match.groups()
    rows = body.split("\n")
    base = " " * col
    single = len(rows) == 1
    closing_own_line = not rows[-1].strip() and not single
    tail = 0 if closing_own_line else 3
    first_room = limit - col - len(prefix) - 3
    new = _reflow_doc_rows(rows, base, limit, first_room, tail)
    if new is None:
        return None
    if single and is_module:
        new.append("")
    return prefix + quotes + "\n".join(new) + quotes


def _reflow_doc_rows(
    rows: list[str], base: str, limit: int, first_room: int, tail: int
) -> list[str] | None:
    out: list[str] = []
    para: list[Line] = []
    cont = Line(base, "", limit - len(base))
    changed = fenced = False
    last_text = max((i for i, r in enumerate(rows) if r.strip()), default=0)

    def flush(at_end: bool) -> None:
        nonlocal para, changed
        new = push_down(para, cont, tail if at_end else 0) if para else None
        changed = changed or new is not None
        out.extend(new if new is not None else [p.lead + p.text for p in para])
        para = []

    for i, row in enumerate(rows):
        lead = base if i else ""
        body = row.strip()
        indent = indent_of(row) if i else base
        fence = bool(FENCE.match(body))
        fenced ^= fence
        bullet = BULLET.match(body)
        plain = _doc_prose(body) and not fenced and not fence
        room = (limit - len(indent)) if i else first_room
        if (
            para
            and plain
            and not bullet
            and indent == cont.lead
            and not _breaks(para[-1].text, body)
        ):
            para.append(Line(indent, body, room))
            continue
        flush(at_end=False)
        if plain and (indent == base or not i or (bullet and len(indent) > len(base))):
            para = [Line(indent if i else lead, body, room)]
            hang = indent + " " * (bullet.end() if bullet else 0)
            cont = Line(hang, "", limit - len(hang))
            if i == last_text:
                flush(at_end=True)
            continue
        out.append(row)
    flush(at_end=True)
    return out if changed else None


def _doc_prose(body: str) -> bool:
    return (
        bool(body)
        and not TABLE.search(body)
        and not body.startswith((">>>", "... "))
        and not body.endswith("::")
    )


# ---------------------------------------------------------------------------------------- strings
@dataclass(frozen=True)
class Unit:
    text: str
    kind: str  # "lit", "space" or "field"


def string_units(body: str, raw: bool, is_f: bool) -> list[Unit] | None:
    """The literal's body cut where a split may not fall inside; None when it cannot be read."""
    units: list[Unit] = []
    i = 0
    while i < len(body):
        char = body[i]
        if is_f and body[i : i + 2] in ("{{", "}}"):
            units.append(Unit(body[i : i + 2], "lit"))
            i += 2
        elif is_f and char == "{":
            end = _field_end(body, i)
            if end is None:
                return None
            units.append(Unit(body[i:end], "field"))
            i = end
        elif is_f and char == "}":
            return None
        elif char == "\\" and not raw and body[i + 1 : i + 3] == "N{":
            end = body.find("}", i) + 1
            if not end:
                return None
            units.append(Unit(body[i:end], "lit"))
            i = end
        elif char == "\\":
            units.append(Unit(body[i : i + 2], "lit"))
            i += 2
        else:
            units.append(Unit(char, "space" if char == " " else "lit"))
            i += 1
    return units


def _field_end(body: str, start: int) -> int | None:
    depth, i = 0, start
    while i < len(body):
        char = body[i]
        if char in "'\"":
            close = body.find(char, i + 1)
            if close < 0:
                return None
            i = close
        elif char in "{[(":
            depth += 1
        elif char in "}])":
            depth -= 1
            if depth == 0:
                return i + 1 if char == "}" else None
        i += 1
    return None


def split_literal(token: str, first: int, rest: int, last: int) -> list[str] | None:
    """The literal as adjacent literals: the first `first` columns wide, the others `rest`, the
    last `last`; None if it has no space to split at or reads differently split."""
    match = re.match(r"^([a-zA-Z]*)(['\"])(.*)\2$", token, re.DOTALL)
    if not match or token.endswith(match[2] * 3):
        return None
    prefix, quote, body = match.groups()
    units = string_units(body, "r" in prefix.lower(), "f" in prefix.lower())
    if not units:
        return None
    pieces = _pieces(prefix, quote, units, first, rest, last)
    if len(pieces) < 2:
        return None
    if _fits(prefix, quote, pieces, first, rest, last):
        # As even as the same number of pieces allows: no word left alone on the last line.
        low, high = 1, max(first, rest)
        while low < high:
            cap = (low + high) // 2
            trial = _pieces(prefix, quote, units, min(first, cap), min(rest, cap), last)
            fits = _fits(prefix, quote, trial, min(first, cap), min(rest, cap), last)
            if len(trial) <= len(pieces) and fits:
                high = cap
            else:
                low = cap + 1
        pieces = _pieces(prefix, quote, units, min(first, low), min(rest, low), last)
    return [_render(prefix, quote, piece) for piece in pieces]


def _fits(
    prefix: str, quote: str, pieces: list[list[Unit]], first: int, rest: int, last: int
) -> bool:
    rooms = [first, *[rest] * (len(pieces) - 2), min(rest, last)][-len(pieces) :]
    rooms[0] = min(rooms[0], first)
    widths = [cell_width(_render(prefix, quote, piece)) for piece in pieces]
    return all(w <= room for w, room in zip(widths, rooms, strict=True))


def _pieces(
    prefix: str, quote: str, units: list[Unit], first: int, rest: int, last: int
) -> list[list[Unit]]:
    pieces: list[list[Unit]] = []
    while True:
        if pieces and cell_width(_render(prefix, quote, units)) <= min(last, rest):
            break
        cut = _cut(prefix, quote, units, first if not pieces else rest)
        if cut is None:
            break
        pieces.append(units[:cut])
        units = units[cut:]
    pieces.append(units)
    return pieces


def _cut(prefix: str, quote: str, units: list[Unit], room: int) -> int | None:
    """Index just past the last space that keeps the piece within `room`; with no such space, past
    the last `{field}` or `|` that does; else past the first space."""
    spaces = [i + 1 for i, u in enumerate(units[:-1]) if u.kind == "space" and i > 0]
    others = [i + 1 for i, u in enumerate(units[:-1]) if u.kind == "field" or u.text == "|"]
    for candidates in (spaces, others):
        fitting = [i for i in candidates if cell_width(_render(prefix, quote, units[:i])) <= room]
        if fitting:
            return fitting[-1]
    return spaces[0] if spaces else None


def _render(prefix: str, quote: str, units: list[Unit]) -> str:
    if "f" in prefix.lower() and not any(u.kind == "field" for u in units):
        prefix = prefix.replace("f", "").replace("F", "")
        body = "".join(u.text[0] if u.text in ("{{", "}}") else u.text for u in units)
        return prefix + quote + body + quote
    return prefix + quote + "".join(u.text for u in units) + quote


def _same_value(toks: list[tokenize.TokenInfo], replace: dict[int, str]) -> bool:
    """Whether the implicit concatenation holding the literals in `replace` keeps its value with
    them replaced (a piece that loses its `f` changes nothing while another piece has one)."""
    span = _concatenation(toks, min(replace))
    old = " ".join(toks[i].string for i in span)
    new = " ".join(replace.get(i, toks[i].string) for i in span)
    return _same_text_value(old, new)


def _concatenation(toks: list[tokenize.TokenInfo], n: int) -> list[int]:
    skip = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    lo = hi = n
    while lo > 0 and (toks[lo - 1].type in skip or toks[lo - 1].type == tokenize.STRING):
        lo -= 1
    while hi + 1 < len(toks) and (
        toks[hi + 1].type in skip or toks[hi + 1].type == tokenize.STRING
    ):
        hi += 1
    return [i for i in range(lo, hi + 1) if toks[i].type == tokenize.STRING]


def _same_text_value(old: str, new: str) -> bool:
    try:
        before = ast.dump(ast.parse(f"({old})", mode="eval"))
        return before == ast.dump(ast.parse(f"({new})", mode="eval"))
    except SyntaxError:
        return False


def fix_strings(text: str, info: FileInfo) -> str:
    lines = text.split("\n")
    toks = tokens(text)
    docs = {(c.lineno, c.col_offset) for _, c in docstring_nodes(ast.parse(text))}
    by_row: dict[int, list[int]] = {}
    for n, tok in enumerate(toks):
        row = tok.start[0]
        if tok.type == tokenize.STRING and tok.end[0] == row:
            byte_col = len(lines[row - 1][: tok.start[1]].encode())
            if (row, byte_col) not in docs and line_width(lines[row - 1]) > info.limit:
                by_row.setdefault(row, []).append(n)
    edits: list[tuple[int, int, list[str]]] = []
    done: set[int] = set()
    for row, found in sorted(by_row.items()):
        for n in reversed(found):  # the rightmost literal first: a dict value before its key
            edit = _rebalance(toks, _stack(toks, n), lines, info.limit)
            if edit is None:
                new = _split_in_line(toks, n, lines[row - 1], info.limit)
                edit = None if new is None else (row, row, [new])
            if edit is not None and not done.intersection(range(edit[0], edit[1] + 1)):
                edits.append(edit)
                done.update(range(edit[0], edit[1] + 1))
                break
    return apply_edits(text, edits) if edits else text


def _stack(toks: list[tokenize.TokenInfo], n: int) -> list[int]:
    """Literal `n` with the adjacent literals stacked above and below it, one a line in one column
    (the first may follow other code on its line)."""
    sig = [
        i
        for i, t in enumerate(toks)
        if t.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
    ]
    at = sig.index(n)

    def joined(a: int, b: int) -> bool:
        first, second = toks[a], toks[b]
        return (
            first.type == second.type == tokenize.STRING
            and first.start[0] == first.end[0]
            and second.start[0] == first.end[0] + 1
            and second.end[0] == second.start[0]
        )

    lo = hi = at
    while lo > 0 and joined(sig[lo - 1], sig[lo]):
        lo -= 1
    while hi + 1 < len(sig) and joined(sig[hi], sig[hi + 1]):
        hi += 1
    members = [sig[i] for i in range(lo, hi + 1)]
    columns = {toks[i].start[1] for i in members[1:]}
    return members if len(columns) == 1 else [n]


def _rebalance(
    toks: list[tokenize.TokenInfo], members: list[int], lines: list[str], limit: int
) -> tuple[int, int, list[str]] | None:
    """Stacked literals refilled from the first long one down: words past the edge start the
    next."""
    if len(members) < 2:
        return None
    parsed = [re.match(r"^([a-zA-Z]*)(['\"])(.*)\2$", toks[i].string, re.DOTALL) for i in members]
    if any(
        m is None or toks[i].string.endswith(m[2] * 3) for m, i in zip(parsed, members, strict=True)
    ):
        return None
    matches = [m for m in parsed if m is not None]
    bases = {m[1].lower().replace("f", "") for m in matches}
    if len(bases) != 1 or len({m[2] for m in matches}) != 1:
        return None
    base, quote = bases.pop(), matches[0][2]
    is_f = any("f" in m[1].lower() for m in matches)
    found = [_words(m[3], "r" in base, "f" in m[1].lower(), is_f) for m in matches]
    words = [w for w in found if w]
    if len(words) < len(found) or any(not _ends_in_space(w) for w in words[:-1]):
        return None
    prefix = base + ("f" if is_f else "")
    first_tok, last_tok = toks[members[0]], toks[members[-1]]
    column = toks[members[1]].start[1]
    rooms = [limit - cell_width(lines[toks[i].start[0] - 1][: toks[i].start[1]]) for i in members]
    tail_line = lines[last_tok.start[0] - 1]
    pragma = TRAILING_PRAGMA.search(tail_line)
    suffix = tail_line[last_tok.end[1] :]
    tail = cell_width(suffix[: pragma.start() - last_tok.end[1] if pragma else None].rstrip())
    pieces = _refill([w for w in words if w], rooms, limit - column, tail, len(prefix) + 2)
    if pieces is None:
        return None
    parts = [_render(prefix, quote, [u for word in piece for u in word]) for piece in pieces]
    replace = dict.fromkeys(members, "")
    replace[members[0]] = " ".join(parts)
    if not _same_value(toks, replace):
        return None
    head = lines[first_tok.start[0] - 1][: first_tok.start[1]]
    new = [head + parts[0], *(" " * column + part for part in parts[1:])]
    new[-1] += suffix
    return first_tok.start[0], last_tok.start[0], new


Word = list[Unit]


def _words(body: str, raw: bool, is_f: bool, group_f: bool) -> list[Word] | None:
    """A literal's units in words (each ending at a space); braces escaped as an f-string's when
    the stack holds one."""
    units = string_units(body, raw, is_f)
    if units is None:
        return None
    if group_f and not is_f:
        units = [Unit(u.text * 2, u.kind) if u.text in "{}" else u for u in units]
    words: list[Word] = [[]]
    for unit in units:
        words[-1].append(unit)
        if unit.kind == "space":
            words.append([])
    return [w for w in words if w]


def _ends_in_space(words: list[Word]) -> bool:
    return words[-1][-1].kind == "space"


def _refill(
    stack: list[list[Word]], rooms: list[int], cont: int, tail: int, overhead: int
) -> list[list[Word]] | None:
    """push_down for literals: `rooms` per literal, `cont` for added ones, the last also `tail`."""

    def width(words: list[Word]) -> int:
        return overhead + sum(cell_width(u.text) for word in words for u in word)

    def count(words: list[Word], room: int) -> int:
        n = 1
        while n < len(words) and width(words[: n + 1]) <= room:
            n += 1
        return n

    out: list[list[Word]] = []
    carry: list[Word] = []
    changed = False
    for k, own in enumerate(stack):
        words, last = carry + own, k == len(stack) - 1
        if not carry and width(own) <= rooms[k] - (tail if last else 0):
            out.append(own)
            continue
        changed = True
        if not last:
            n = count(words, rooms[k])
            out.append(words[:n])
            carry = words[n:]
            continue
        room = rooms[k]
        while width(words) > room - tail and len(words) > 1:
            n = count(words, room)
            n = n - 1 if n == len(words) else n
            out.append(words[:n])
            words, room = words[n:], cont
        out.append(words)
    return out if changed else None


def _split_in_line(toks: list[tokenize.TokenInfo], n: int, line: str, limit: int) -> str | None:
    tok = toks[n]
    prev, after = _neighbours(toks, n)
    if prev.type == tokenize.STRING and prev.end[0] == tok.start[0]:
        return None  # already adjacent literals on one line: ruff would not lay them out
    if after.type == tokenize.STRING and after.start[0] == tok.end[0]:
        return None
    opened_on = _open_bracket_row(toks, n)
    first_on_line = prev.end[0] < tok.start[0]
    indent = len(indent_of(line))
    if first_on_line:
        column = start = tok.start[1]
    elif opened_on is not None and opened_on < tok.start[0]:
        column, start = indent, tok.start[1]
    else:
        column = start = indent + 4
    pragma = TRAILING_PRAGMA.search(line)
    suffix = line[tok.end[1] : pragma.start() if pragma else None].rstrip()
    first = limit - cell_width(line[:start]) if start == tok.start[1] else limit - column
    parts = split_literal(tok.string, first, limit - column, limit - column - cell_width(suffix))
    if parts is None or not _same_value(toks, {n: " ".join(parts)}):
        return None
    joined = " ".join(parts)
    if opened_on is None or (after.type == tokenize.OP and after.string in ".[("):
        joined = f"({joined})"
    return line[: tok.start[1]] + joined + line[tok.end[1] :]


def _neighbours(
    toks: list[tokenize.TokenInfo], n: int
) -> tuple[tokenize.TokenInfo, tokenize.TokenInfo]:
    skip = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    before = [t for t in toks[:n] if t.type not in skip]
    after = [t for t in toks[n + 1 : n + 4] if t.type not in skip]
    blank = tokenize.TokenInfo(tokenize.ENDMARKER, "", (0, 0), (0, 0), "")
    return (before[-1] if before else blank), (after[0] if after else blank)


def _open_bracket_row(toks: list[tokenize.TokenInfo], n: int) -> int | None:
    """The row of the innermost bracket open at token `n`, or None outside brackets."""
    stack: list[int] = []
    for tok in toks[:n]:
        if tok.type == tokenize.NEWLINE:
            stack.clear()
        elif tok.type == tokenize.OP and tok.string in "([{":
            stack.append(tok.start[0])
        elif tok.type == tokenize.OP and tok.string in ")]}" and stack:
            stack.pop()
    return stack[-1] if stack else None


# ---------------------------------------------------------------------------------------- pragmas
TYPE_IGNORE = re.compile(r"\s*#\s*type:\s*ignore(?:\[(?P<codes>[^\]]*)\])?")
NOQA = re.compile(r"\s*#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?")
MYPY_LINE = re.compile(
    r"^(?P<path>[^:\s]+\.py):(?P<row>\d+): error: (?P<msg>.*?)  \[(?P<code>[a-z-]+)\]$"
)


@dataclass(frozen=True)
class Finding:
    """A checker's finding: an unused pragma (`unused` = the codes it names in vain) or an error."""

    path: Path
    row: int
    code: str
    unused: frozenset[str] = frozenset()


def statement_rows(text: str) -> dict[int, tuple[int, int]]:
    """Each row's logical line (first row, last row)."""
    spans: dict[int, tuple[int, int]] = {}
    start = None
    for tok in tokens(text):
        if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            continue
        start = start or tok.start[0]
        if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            spans.update(dict.fromkeys(range(start, tok.end[0] + 1), (start, tok.end[0])))
            start = None
    return spans


def move_pragmas(
    findings: list[Finding],
    pattern: re.Pattern[str],
    render: Callable[[list[str]], str],
    copy: bool,
) -> set[Path]:
    """A pragma left unused where ruff format put it goes to the line of its statement that holds
    the finding it was for (a `# type: ignore` that followed an argument onto another line). With
    `copy`, a finding its statement ignores on another line gets the pragma too (one pragma
    covered both lines when they were one)."""
    moved: set[Path] = set()
    for path in sorted({f.path for f in findings}):
        text = path.read_text(encoding="utf-8")
        lines, spans = text.split("\n"), statement_rows(text)
        comments, inside = _comment_columns(text)
        mine = [f for f in findings if f.path == path and f.row not in inside]
        added: dict[int, set[str]] = {}
        for pragma in (f for f in mine if f.unused and f.row in comments):
            span = spans.get(pragma.row)
            wanted = pragma.unused
            targets = [
                f
                for f in mine
                if not f.unused
                and f.row != pragma.row
                and spans.get(f.row) == span
                and (f.code in wanted or "*" in wanted)
            ]
            if not targets:
                continue
            at = comments[pragma.row]
            line = lines[pragma.row - 1]
            lines[pragma.row - 1] = line[:at] + _drop_codes(line[at:], pattern, wanted, render)
            lines[pragma.row - 1] = lines[pragma.row - 1].rstrip()
            for target in targets:
                added.setdefault(target.row, set()).add("*" if "*" in wanted else target.code)
        for error in (f for f in mine if copy and not f.unused and f.row not in added):
            first, last = spans.get(error.row, (error.row, error.row))
            for row in (r for r in range(first, last + 1) if r in comments):
                match = pattern.search(lines[row - 1][comments[row] :])
                names = re.split(r"[,\s]+", match["codes"] or "") if match else []
                if match and (not match["codes"] or error.code in names):
                    added.setdefault(error.row, set()).add(error.code if match["codes"] else "*")
                    break
        for row, codes in added.items():
            line = lines[row - 1]
            at = comments.get(row, len(line))
            code, comment = line[:at].rstrip(), line[at:]
            names = [] if "*" in codes else sorted(codes)
            lines[row - 1] = f"{code}  {render(names)}" + (f"  {comment}" if comment else "")
        if added:
            path.write_text("\n".join(lines), encoding="utf-8")
            moved.add(path)
    return moved


def _drop_codes(
    comment: str,
    pattern: re.Pattern[str],
    unused: frozenset[str],
    render: Callable[[list[str]], str],
) -> str:
    match = pattern.search(comment)
    if match is None:
        return comment
    codes = [c for c in re.split(r"[,\s]+", match["codes"] or "") if c and c not in unused]
    kept = f"  {render(codes)}" if codes else ""
    return (comment[: match.start()] + kept + comment[match.end() :]).strip()


def _comment_columns(text: str) -> tuple[dict[int, int], set[int]]:
    """The column of each row's comment, and the rows a string goes on past (no comment fits)."""
    comments: dict[int, int] = {}
    inside: set[int] = set()
    for tok in tokens(text):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.start[1]
        inside.update(range(tok.start[0], tok.end[0]))
    return comments, inside


def mypy_findings(files: set[Path]) -> tuple[list[Finding], int]:
    """mypy over the project (its own config): unused ignores and errors in `files`; error count."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    findings = []
    errors = 0
    for line in result.stdout.splitlines():
        match = MYPY_LINE.match(line)
        if not match:
            continue
        errors += 1
        path = (ROOT / match["path"]).resolve()
        if path not in files:
            continue
        if match["code"] == "unused-ignore":
            named = re.search(r"ignore\[([^\]]*)\]", match["msg"])
            text = path.read_text(encoding="utf-8").split("\n")[int(match["row"]) - 1]
            pragma = TYPE_IGNORE.search(text)
            codes = named[1] if named else (pragma["codes"] if pragma else None) or ""
            unused = frozenset(c.strip() for c in codes.split(",") if c.strip())
            unused = unused or frozenset({"*"})
            findings.append(Finding(path, int(match["row"]), "unused", unused))
        else:
            findings.append(Finding(path, int(match["row"]), match["code"]))
    return findings, errors


def ruff_findings(files: set[Path]) -> list[Finding]:
    command = [
        ruff(),
        "check",
        "--output-format",
        "json",
        "--no-cache",
        "--exit-zero",
        *map(str, sorted(files)),
    ]
    result = subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True)
    findings = []
    for item in json.loads(result.stdout or "[]"):
        path, row = Path(item["filename"]).resolve(), item["location"]["row"]
        if item["code"] == "RUF100":
            unused = frozenset(re.findall(r"`([A-Z]+[0-9]+)`", item["message"]))
            findings.append(Finding(path, row, "RUF100", unused))
        elif item["code"]:
            findings.append(Finding(path, row, item["code"]))
    return findings


def _type_ignore(codes: list[str]) -> str:
    return "# type: ignore" + (f"[{', '.join(codes)}]" if codes else "")


def repair_pragmas(files: set[Path], with_mypy: bool) -> None:
    """Put back on the right line the `# noqa` and `# type: ignore` comments ruff format moved."""
    moved = move_pragmas(ruff_findings(files), NOQA, lambda c: "# noqa: " + ", ".join(c), False)
    if with_mypy:
        started = time.monotonic()
        findings, _ = mypy_findings(files)
        moved |= move_pragmas(findings, TYPE_IGNORE, _type_ignore, True)
        left = mypy_findings(files)[1] if moved else sum(not f.unused for f in findings)
        print(f"wrap100: mypy run in {time.monotonic() - started:.0f} s; {left} error(s) left")
    if moved:
        ruff_format(sorted(moved))
        print(
            "wrap100: pragmas moved in "
            + ", ".join(str(p.relative_to(ROOT)) for p in sorted(moved))
        )


# ---------------------------------------------------------------------------------------- checks
def paragraphs(doc: str) -> str:
    parts = re.split(r"\n[ \t]*\n", doc.strip())
    return "\n\n".join(" ".join(p.split()) for p in parts if p.strip())


def shape(text: str, exact: Exact) -> str:
    """The AST as text, docstrings reduced to their paragraphs unless they must stay exact."""
    tree = ast.parse(text)
    for owner, const in docstring_nodes(tree):
        if not exact.covers(owner):
            const.value = paragraphs(str(const.value))
    return ast.dump(tree)


def guarded(fixer: Fixer, text: str, info: FileInfo, notes: list[str]) -> str:
    """The fixer's result if it reads the same as `text`, else `text` and a note."""
    new = fixer(text, info)
    if new == text:
        return text
    try:
        same = shape(new, info.exact) == shape(text, info.exact)
    except SyntaxError:
        same = False
    if same:
        return new
    notes.append(f"{info.path}: {fixer.__name__} skipped (its result read differently)")
    return text


FIXERS: tuple[Fixer, ...] = (fix_trailing_comments, fix_comment_blocks, fix_docstrings, fix_strings)


def rewrap(text: str, info: FileInfo, notes: list[str], fixers: tuple[Fixer, ...] = FIXERS) -> str:
    """All fixers, checked once at the end; one at a time, each checked, if that fails."""
    new = text
    for fixer in fixers:
        if fixer is fix_trailing_comments or long_rows(new, info.limit):
            new = fixer(new, info)
    try:
        if new == text or shape(new, info.exact) == shape(text, info.exact):
            return new
    except SyntaxError:
        pass
    for fixer in fixers:
        text = guarded(fixer, text, info, notes)
    return text


# ---------------------------------------------------------------------------------------- driver
def ruff() -> str:
    found = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(found).exists():
        sys.exit("wrap100: ruff not found (pip install -e '.[test]')")
    return found


def ruff_fix_concatenations(paths: list[Path]) -> None:
    """Adjacent literals split inside a list, tuple or set get parentheses (ISC004: a missing comma
    looks the same)."""
    for start in range(0, len(paths), 200):
        batch = [str(p) for p in paths[start : start + 200]]
        subprocess.run(
            [
                ruff(),
                "check",
                "--select",
                "ISC004",
                "--fix",
                "--unsafe-fixes",
                "--quiet",
                "--no-cache",
                "--exit-zero",
                *batch,
            ],
            check=True,
            cwd=ROOT,
        )


def ruff_format(paths: list[Path]) -> None:
    for start in range(0, len(paths), 200):
        batch = [str(p) for p in paths[start : start + 200]]
        subprocess.run([ruff(), "format", "--quiet", *batch], check=True, cwd=ROOT)


def python_files(args: list[str]) -> list[Path]:
    found: set[Path] = set()
    for arg in args or DEFAULT_PATHS:
        path = (ROOT / arg).resolve()
        if path.is_file():
            found.add(path)
            continue
        for file in path.rglob("*.py"):
            parts = file.relative_to(ROOT).parts
            if not any(
                p.startswith(".") or p == "__pycache__" or p.endswith(".egg-info") for p in parts
            ):
                found.add(file)
    return sorted(found)


def line_length() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return int(config["tool"]["ruff"].get("line-length", 88))


def verify(originals: dict[Path, str], exact: dict[Path, Exact]) -> list[str]:
    problems = []
    for path, before in originals.items():
        after = path.read_text(encoding="utf-8")
        if after == before:
            continue
        old, new = shape(before, exact[path]), shape(after, exact[path])
        if old != new:
            old_lines = ast.dump(ast.parse(before), indent=1).splitlines()
            new_lines = ast.dump(ast.parse(after), indent=1).splitlines()
            diff = list(difflib.unified_diff(old_lines, new_lines, lineterm="", n=1))[2:12]
            problems.append(f"{path.relative_to(ROOT)}: the AST changed\n  " + "\n  ".join(diff))
    return problems


def report_e501(paths: list[Path]) -> int:
    command = [
        ruff(),
        "check",
        "--select",
        "E501",
        "--output-format",
        "json",
        "--no-cache",
        "--exit-zero",
        *map(str, paths),
    ]
    result = subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True)
    by_file: dict[str, list[int]] = {}
    for finding in json.loads(result.stdout or "[]"):
        name = str(Path(finding["filename"]).resolve().relative_to(ROOT))
        by_file.setdefault(name, []).append(finding["location"]["row"])
    total = sum(len(rows) for rows in by_file.values())
    print(f"E501 left: {total} line(s) in {len(by_file)} file(s)")
    for name, rows in sorted(by_file.items(), key=lambda item: (-len(item[1]), item[0])):
        print(f"  {name}: {len(rows)} (lines {', '.join(map(str, sorted(rows)))})")
    return total


def rewrite(
    files: list[Path],
    exact: dict[Path, Exact],
    limit: int,
    notes: list[str],
    fixers: tuple[Fixer, ...],
) -> list[Path]:
    """Apply `fixers` to each file; the files that changed."""
    changed = []
    for path in files:
        info = FileInfo(path.relative_to(ROOT), limit, exact[path])
        text = path.read_text(encoding="utf-8")
        new = rewrap(text, info, notes, fixers)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def wrap(files: list[Path], exact: dict[Path, Exact], limit: int, notes: list[str]) -> None:
    """Steps 1 and 2: format and rewrap until nothing changes."""
    # Trailing comments first: with one in the way, ruff would wrap the code instead.
    rewrite(files, exact, limit, notes, (fix_trailing_comments,))
    ruff_format(files)
    pending = files
    for _ in range(MAX_ROUNDS):
        before = {path: path.read_text(encoding="utf-8") for path in pending}
        pending = rewrite(pending, exact, limit, notes, FIXERS)
        ruff_fix_concatenations(pending)
        ruff_format(pending)
        # what ruff puts back as it was (adjacent literals it joins again) is not tried again
        pending = [p for p in pending if p.read_text(encoding="utf-8") != before[p]]
        if not pending:
            return
    names = ", ".join(str(p.relative_to(ROOT)) for p in pending)
    print(f"wrap100: still changing after {MAX_ROUNDS} rounds: {names}")


def read_sources(files: list[Path]) -> dict[Path, str]:
    """Each file's text; a file Python cannot parse is skipped and named."""
    sources = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            ast.parse(text)
        except SyntaxError as error:
            print(f"wrap100: skipping {path.relative_to(ROOT)}: {error}")
            continue
        sources[path] = text
    return sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS), help="files or folders")
    parser.add_argument("--no-mypy", action="store_true", help="skip step 4's mypy run")
    args = parser.parse_args(argv)
    started = time.monotonic()
    originals = read_sources(python_files(args.paths))
    exact = {path: Exact.of(text) for path, text in originals.items()}
    files, notes = list(originals), list[str]()
    wrap(files, exact, line_length(), notes)
    changed = {path for path in files if path.read_text(encoding="utf-8") != originals[path]}
    repair_pragmas(changed, with_mypy=not args.no_mypy)
    problems = verify(originals, exact)
    if problems:
        for path, text in originals.items():
            path.write_text(text, encoding="utf-8")
        print("wrap100: stopped, every file restored:\n" + "\n".join(problems))
        return 1
    for note in sorted(set(notes)):
        print(f"note: {note}")
    elapsed = time.monotonic() - started
    print(f"wrap100: {len(changed)} of {len(files)} files rewritten in {elapsed:.0f} s")
    report_e501(files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
