"""Code-shape checks from STYLE.md: mypy --strict passes, and imports point one way (no back-edges)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Each core module may import only modules of a lower rank (the data flow read top-down). Same rank = peers
# that must not import each other.
RANKS: dict[str, int] = {
    "errors": 0, "events": 0, "scan": 0, "search_schema": 0, "notify": 0, "service": 0,
    "yamlload": 1, "markup_base": 1, "markup_tree": 1, "config": 2, "markup_telegram": 2, "markup_text": 2,
    "hints": 3, "markup": 3, "metrics": 3, "ratelimit": 3, "history_cache": 0, "rows": 1, "schema": 1,
    "llm_http": 1, "chunking": 4, "store": 4, "logs": 4, "llm_sdk": 4,
    "pairing": 5, "lifecycle": 5, "llm": 5, "prompt": 5, "tools": 5, "supervisor": 5, "ops": 5, "catchup": 5,
    "prompt_inputs": 6, "agent": 6, "outbox": 6, "transcript": 6, "session_report": 6,
    "flush": 7, "access": 7, "session_prompt": 7, "compression": 8,
    "lanes": 8, "sessions": 9, "commands": 10, "scheduler": 10,
    "daemon": 11, "doctor": 11, "cli": 12,
}
ADAPTER_MAY_IMPORT = {"gateway.events", "gateway.errors", "gateway.config"}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def _type_checking_lines(path: Path) -> set[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in ast.walk(node):
                if hasattr(child, "lineno"):
                    lines.add(child.lineno)
    return lines


def _core_name(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "gateway" else None


def test_core_imports_point_one_way() -> None:
    problems = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        rel = path.relative_to(ROOT / "gateway")
        me = rel.parts[0].removesuffix(".py") if rel.parts[0] != "__init__.py" else None
        if me is None or me == "__init__":
            continue
        assert me in RANKS, f"gateway/{rel}: give the new module a rank in RANKS"
        skip = _type_checking_lines(path)
        for line, module in _imports(path):
            if module.startswith("adapters") and me not in ("daemon", "cli"):
                problems.append(f"gateway/{rel}:{line} imports {module}: only daemon and cli may import adapters")
            other = _core_name(module)
            if other is None or other == me or line in skip:
                continue
            if RANKS.get(other, 99) >= RANKS[me]:
                problems.append(f"gateway/{rel}:{line} imports gateway.{other} (rank {RANKS.get(other)}) "
                                f"from rank {RANKS[me]}")
    assert problems == []


def test_adapters_import_only_the_edge_of_the_core() -> None:
    problems = []
    for path in sorted((ROOT / "adapters").glob("*.py")):
        for line, module in _imports(path):
            if module.startswith("gateway") and module not in ADAPTER_MAY_IMPORT:
                problems.append(f"adapters/{path.name}:{line} imports {module}")
    assert problems == []


@pytest.mark.skipif(shutil.which("mypy") is None and not (Path(sys.executable).parent / "mypy").exists(),
                    reason="mypy not installed (pip install -e '.[test]' brings it)")
def test_mypy_strict() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
