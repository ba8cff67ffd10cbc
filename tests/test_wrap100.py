"""scripts/wrap100.py, the sweep that wraps the tree at 100 columns: what it rewraps, what it
leaves alone, and that the result reads the same to Python."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wrap100", ROOT / "scripts" / "wrap100.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["wrap100"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


w = _load()


def rewrap(source: str) -> str:
    """The tool's steps on one text: `ruff format` and the rewraps until nothing changes."""
    original = textwrap.dedent(source)
    info = w.FileInfo(Path("x.py"), 100, w.Exact.of(original))
    notes: list[str] = []
    text: str = w.rewrap(original, info, notes, (w.fix_trailing_comments,))
    for _ in range(w.MAX_ROUNDS):
        new = _ruff("format", text=w.rewrap(_ruff("format", text=text), info, notes))
        if new == text:
            break
        text = new
    again = _ruff("format", text=w.rewrap(text, info, notes))
    assert again == text, "a second pass changes nothing"
    assert notes == []
    assert w.shape(text, info.exact) == w.shape(original, info.exact)
    return text


def _ruff(*command: str, text: str = "") -> str:
    result = subprocess.run(
        [w.ruff(), *command, "--stdin-filename", "x.py", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return result.stdout


def widths(text: str) -> list[int]:
    return [len(line) for line in text.split("\n")]


def test_a_long_comment_flows_into_its_paragraph_and_a_list_keeps_its_items() -> None:
    out = rewrap(f"""\
        # {"word " * 22}end
        # of the sentence.
        # - {"item " * 20}tail
        #   still the item
        #   col_a     col_b
        x = 1
        """)
    assert max(widths(out)) <= 100
    lines = out.split("\n")
    assert lines[1].startswith("# word") and lines[1].endswith("of the sentence.")
    assert lines[2] == "# - " + ("item " * 19).strip()
    assert lines[3] == "#   item tail still the item"
    assert "#   col_a     col_b" in lines, "a table row stays as it is"


def test_a_labelled_line_after_a_sentence_is_not_merged_into_it() -> None:
    out = rewrap(f"""\
        # first: {"word " * 20}ends here.
        # logger: another point
        x = 1
        """)
    assert "# logger: another point" in out.split("\n")


def test_a_trailing_comment_moves_above_its_line_or_into_the_block_and_a_pragma_stays() -> None:
    out = rewrap(f"""\
        value = compute(1, 2)  # {"why " * 25}
        if value:  # {"because " * 12}
            pass
        other = compute(3)  # type: ignore[arg-type]  {"# why " * 16}
        """)
    lines = out.split("\n")
    assert lines[0].startswith("# why") and lines[1].startswith("# why")
    assert lines[2] == "value = compute(1, 2)"
    assert lines[3] == "if value:" and lines[4].startswith("    # because")
    assert "other = compute(3)  # type: ignore[arg-type]" in lines
    assert max(widths(out)) <= 100


def test_a_trailing_comment_that_goes_on_below_moves_whole() -> None:
    out = rewrap("""\
        LIMIT = 6  # attempts in all, counting those
                   # a crash cut off
        OTHER = 1  # short
        COUNT = sum(range(10))  # a comment that stops mid-sentence, or
        # goes on below at the code's column
        """)
    assert out.split("\n") == [
        "# attempts in all, counting those a crash cut off",
        "LIMIT = 6",
        "OTHER = 1  # short",
        "# a comment that stops mid-sentence, or goes on below at the code's column",
        "COUNT = sum(range(10))",
        "",
    ]


def test_a_one_line_docstring_wraps_under_its_quotes() -> None:
    out = rewrap(f'''\
        def f() -> None:
            """{"Say " * 22}why."""
        ''')
    lines = out.split("\n")
    assert lines[1].startswith('    """Say') and lines[2].startswith("    Say")
    assert lines[2].endswith('why."""') and max(widths(out)) <= 100
    assert abs(len(lines[1]) - len(lines[2])) < 10, "a one-liner wraps into two even lines"


def test_a_module_docstring_keeps_its_paragraphs_and_closes_on_its_own_line() -> None:
    out = rewrap(f'''\
        """{"Summary " * 13}end."""
        ''')
    assert out.split("\n")[-2] == '"""' and max(widths(out)) <= 100


def test_docstrings_read_at_run_time_keep_every_byte() -> None:
    source = f'''\
        def tool() -> str:
            """{"Describe " * 12}it."""


        server = FastMCP("x")
        server.add_tool(tool)
        '''
    assert rewrap(source) == textwrap.dedent(source)


def test_a_long_literal_splits_into_adjacent_literals_that_mean_the_same() -> None:
    source = f"""\
        call(
            f"{"plain " * 12}{{value!r:>10}} {"more " * 6}{{{{braces}}}} end",
        )
        """
    out = rewrap(source)
    assert max(widths(out)) <= 100
    value = ast.dump(ast.parse(textwrap.dedent(source)))
    assert ast.dump(ast.parse(out)) == value
    parts = [line.strip() for line in out.split("\n")[1:-2]]
    assert parts[0].startswith('"plain'), "a piece with no field loses its f"
    assert any(p.startswith('f"') and "{value!r:>10}" in p for p in parts)


def test_stacked_literals_refill_from_the_long_one_down() -> None:
    out = rewrap(f"""\
        TEXT = (
            "{"alpha " * 17}"
            "omega."
        )
        """)
    lines = out.split("\n")
    assert lines[2].strip().endswith('omega."') and max(widths(out)) <= 100


def test_the_check_sees_a_docstring_paragraph_merged_or_a_value_changed() -> None:
    exact = w.Exact(False, frozenset())
    two = 'def f():\n    """One.\n\n    Two."""\n'
    assert w.shape(two, exact) != w.shape(two.replace("\n\n    Two", "\n    Two"), exact)
    assert w.shape(two, exact) == w.shape(two.replace("\n\n    Two", "\n\n        Two"), exact)
    assert w.shape('x = "a b"\n', exact) != w.shape('x = "a" "b"\n', exact)


def test_a_docstring_argparse_collapses_may_reflow_and_one_read_by_lines_may_not() -> None:
    assert not w.Exact.of("p = ArgumentParser(description=__doc__)\n").module
    assert not w.Exact.of('p = ArgumentParser(description=__doc__.split("\\n\\n")[0])\n').module
    assert w.Exact.of("p = ArgumentParser(description=__doc__.splitlines()[0])\n").module
    raw = "p = ArgumentParser(description=__doc__, formatter_class=RawDescriptionHelpFormatter)\n"
    assert w.Exact.of(raw).module


def test_a_prose_line_that_starts_with_backticks_is_no_fence() -> None:
    out = rewrap(f'''\
        """Summary.

        ``` fences are named here, and the text goes on {"word " * 14}
        and on {"more " * 20}end.
        """
        ''')
    assert max(widths(out)) <= 100


def test_a_type_ignore_moves_to_the_line_of_its_error_and_never_into_a_string(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.py"
    path.write_text(
        '"""Mentions\n# type: ignore[arg-type]\nin prose."""\n'
        "x = f(\n"
        "    a,  # type: ignore[arg-type]\n"
        "    b,\n"
        "    c,\n"
        ")\n"
    )
    findings = [
        w.Finding(path, 5, "unused", frozenset({"arg-type"})),
        w.Finding(path, 6, "arg-type"),
        w.Finding(path, 2, "arg-type"),
    ]
    assert w.move_pragmas(findings, w.TYPE_IGNORE, w._type_ignore, True) == {path}
    lines = path.read_text().split("\n")
    assert lines[1] == "# type: ignore[arg-type]", "the docstring keeps its text"
    assert lines[4:7] == ["    a,", "    b,  # type: ignore[arg-type]", "    c,"]
