"""Code-shape checks (docs/architecture.md, "Packages"): mypy passes (strict on gateway/ and
adapters/, checked on tests/ and bench/) and ruff passes, imports point one way (no back-edges,
inside packages too), adapters stay at the edge, and packages stay small and say what they hold."""

from __future__ import annotations

import ast
import io
import re
import shutil
import statistics
import subprocess
import sys
import tokenize
import tomllib
from pathlib import Path

from tests.early_checks import mypy_result
from tests.helpers import require

ROOT = Path(__file__).resolve().parent.parent

# gateway/'s packages (and its few top-level modules), bottom-up: each may import only those of a
# lower rank. Same rank = peers that must not import each other. docs/architecture.md draws the same
# map.
LAYERS: dict[str, int] = {
    "events": 0,
    "errors": 0,
    "confusables": 0,
    "scan": 1,
    "config": 1,
    "telemetry": 2,
    "worker": 2,
    "sandbox": 2,
    "llm": 3,
    "store": 4,
    "knowledge": 5,
    "mcp": 5,
    "net": 5,
    "media": 5,
    "voice": 5,
    "agent": 6,
    "prompt": 7,
    "delivery": 8,
    "agents": 8,
    "approvals": 9,
    "sessions": 10,
    "access": 10,
    "scheduling": 11,
    "webui": 12,
    "ops": 13,
    "cli": 14,
}
# Inside a package, the same rule between its modules (and sub-packages): listed bottom-up, a tuple
# = peers.
INNER: dict[str, list[str | tuple[str, ...]]] = {
    "config": [
        "yamlload",
        "shell",
        ("accounts", "media", "tools", "schedule", "voice", "platforms"),
        "settings",
        "agents",
        "starter",
    ],
    "telemetry": ["repeats", ("logs", "metrics", "status_client")],
    "llm": [
        "types",
        "streams",
        "http",
        "sdk",
        "transport",
        ("anthropic_wire", "openai_wire"),
        "factory",
    ],
    "store": [
        ("history_cache", "search_index", "media_files", "agents_schema"),
        ("rows", "schema"),
        "connection",
        ("delivery_queries", "session_queries"),
        "message_queries",
        "database",
        "transcript",
    ],
    "knowledge": ["files", ("memory", "skills", "search"), "people", "forget"],
    "mcp": [("names", "content", "vet"), "link", "hub"],
    "worker": ["wire", ("child", "parent")],
    "sandbox": [("output", "spec", "files"), ("bwrap", "process"), ("report", "runner")],
    "net": [("guard", "pages", "readable"), "fetch", ("extract", "search")],
    "media": [("download", "images", "documents", "transcribe"), "office", "prepare", "turns"],
    "voice": [("speech", "process"), ("encode", "tts"), "speaker"],
    "agent": ["tools", "holds", "loop"],
    "agents": ["runtime", "build"],
    "events": [("choices", "files")],
    "approvals": [
        ("request", "menus"),
        "book",
        ("policy", "closing", "checkpoint"),
        "waits",
        "answers",
        "turns",
    ],
    "scheduling": ["when", "jobstore", "text", "book", "turn", "runner", "command"],
    "webui": [("series", "chat_history", "panels"), "routes"],
    "agent.tools": [
        "schema",
        "registry",
        ("memory", "search", "skills", "web", "mcp", "policy", "schedule", "deferred", "ask"),
        "catalog",
    ],
    "prompt": ["hints", "builder", "inputs", "session_tools", "session_prompt"],
    "delivery": [
        "ratelimit",
        "pacing",
        "markup",
        "chunking",
        "partial",
        "previews",
        "rows",
        "outbox",
        ("stream", "voice", "files"),
    ],
    "delivery.markup": ["tree", "base", ("telegram", "text"), "render"],
    "sessions": [
        ("keys", "turn_text", "lanes", "lifecycle", "catchup", "outage"),
        ("report", "flush"),
        "compression",
        "manager",
        ("commands", "timers"),
    ],
    "access": ["pairing", "gate", "roles", "linking"],
    "ops": [
        (
            "notify",
            "service",
            "supervisor",
            "status",
            "web_guard",
            "home",
            "access_watch",
            "http_limits",
            "waiting",
        ),
        "wiring",
        ("doctor", "daemon"),
    ],
    "cli": [
        "context",
        ("run", "checks", "prompt", "sessions", "pairing", "service", "tools", "jobs", "users"),
        "init",
        "main",
    ],
}
ADAPTER_MAY_IMPORT = ("gateway.events", "gateway.errors", "gateway.config")
ADAPTER_PLATFORMS = ("telegram", "discord", "slack")
MODULE_LINES = 400
FUNCTION_LINES = 50


def _imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every module a file imports, by its absolute name: a relative import (`from ..ops import
    daemon`) is resolved against the file's package, so it cannot slip past the map."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    package = list(path.relative_to(root).parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.extend((node.lineno, f"{module}.{a.name}") for a in node.names)
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, module) for line, module in found if line not in skip]


def test_relative_imports_are_checked_by_their_absolute_name(tmp_path: Path) -> None:
    module = tmp_path / "gateway" / "sessions" / "manager.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        "from ..ops import daemon\nfrom . import lanes\nfrom .keys import session_key\n"
    )
    found = _imports(module, tmp_path)
    assert found == [
        (1, "gateway.ops.daemon"),
        (2, "gateway.sessions.lanes"),
        (3, "gateway.sessions.keys.session_key"),
    ]
    problem = _edge_problem(["sessions", "manager"], found[0][1].split(".")[1:])
    assert problem == "rank 13 from rank 10"


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in ast.walk(node):
                if hasattr(child, "lineno"):
                    lines.add(child.lineno)
    return lines


def _ranks(order: list[str | tuple[str, ...]]) -> dict[str, int]:
    return {
        name: rank
        for rank, names in enumerate(order)
        for name in ((names,) if isinstance(names, str) else names)
    }


def _edge_problem(me: list[str], other: list[str]) -> str | None:
    """Why `me` (a module path under gateway/, as parts)
    may not import `other`, or None when it may."""
    if other[:1] == me[:1] and len(me) > 1:  # same package: its own bottom-up order decides
        depth = 1
        while depth < len(me) - 1 and other[depth : depth + 1] == me[depth : depth + 1]:
            depth += 1
        package = ".".join(me[:depth])
        if package not in INNER:
            return f"give package gateway.{package} an order in INNER"
        ranks = _ranks(INNER[package])
        mine, theirs = me[depth], other[depth] if len(other) > depth else None
        if theirs is None or mine not in ranks or theirs not in ranks:
            return (
                None if theirs is None else f"list {package}.{mine} and {package}.{theirs} in INNER"
            )
        return (
            None
            if ranks[theirs] < ranks[mine]
            else f"rank {ranks[theirs]} from rank {ranks[mine]} in {package}"
        )
    if me[0] not in LAYERS or other[0] not in LAYERS:
        return f"give gateway.{me[0] if me[0] not in LAYERS else other[0]} a rank in LAYERS"
    return (
        None
        if LAYERS[other[0]] < LAYERS[me[0]]
        else f"rank {LAYERS[other[0]]} from rank {LAYERS[me[0]]}"
    )


def _module_parts(path: Path, base: Path) -> list[str]:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def test_core_imports_point_one_way() -> None:
    problems = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        me = _module_parts(path, ROOT / "gateway")
        if not me:
            continue
        for line, module in _imports(path):
            if module.startswith("adapters") and me[0] not in ("ops", "cli"):
                problems.append(
                    f"gateway/{path.relative_to(ROOT / 'gateway')}:{line} imports {module}: "
                    "only ops and cli may import adapters"
                )
            if not module.startswith("gateway."):
                continue
            other = module.split(".")[1:]
            if other[: len(me)] == me:  # itself, or a name from its own package's __init__
                continue
            why = _edge_problem(me, other)
            if why:
                problems.append(
                    f"gateway/{path.relative_to(ROOT / 'gateway')}:{line} imports {module} ({why})"
                )
    assert problems == []


def test_every_module_has_a_place_in_the_map() -> None:
    missing = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        parts = _module_parts(path, ROOT / "gateway")
        if not parts:
            continue
        if parts[0] not in LAYERS:
            missing.append(".".join(parts))
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            if parts[depth] not in _ranks(INNER.get(package, [])):
                missing.append(".".join(parts))
    assert missing == []


def test_adapters_import_only_the_vocabulary_and_their_own_platform() -> None:
    problems = []
    for path in sorted((ROOT / "adapters").rglob("*.py")):
        rel = path.relative_to(ROOT / "adapters")
        mine = rel.parts[0] if len(rel.parts) > 1 else None
        for line, module in _imports(path):
            if module.startswith("gateway") and not module.startswith(ADAPTER_MAY_IMPORT):
                problems.append(f"adapters/{rel}:{line} imports {module}")
            if module.startswith("adapters."):
                theirs = module.split(".")[1]
                if theirs != mine:
                    problems.append(
                        f"adapters/{rel}:{line} imports {module}: another platform's code"
                    )
    assert problems == []


def test_packages_stay_small() -> None:
    """The top of gateway/ holds packages and a handful of
    modules; no package holds more than ~12 modules."""
    top = sorted(p.name for p in (ROOT / "gateway").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 5, top
    for package in [p for p in (ROOT / "gateway").rglob("*") if (p / "__init__.py").exists()]:
        modules = [p for p in package.glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= 12, f"{package.relative_to(ROOT)} holds {len(modules)} modules"
    flat = sorted(p.name for p in (ROOT / "adapters").glob("*.py") if p.name != "__init__.py")
    assert flat == ["console.py", "webchat.py"], flat


def test_every_package_says_what_it_holds() -> None:
    """Its docstring names each of its modules and sub-packages,
    so a module added later cannot go unmentioned."""
    unnamed = []
    for init in [
        *(ROOT / "gateway").rglob("__init__.py"),
        *(ROOT / "adapters").rglob("__init__.py"),
    ]:
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 40, (
            f"{init.relative_to(ROOT)}: say what the package holds and may import"
        )
        parts = [p.stem for p in init.parent.glob("*.py") if p.name != "__init__.py"]
        parts += [d.name for d in init.parent.iterdir() if (d / "__init__.py").exists()]
        unnamed += [
            f"{init.parent.relative_to(ROOT)}/{name}"
            for name in sorted(parts)
            if not re.search(rf"\b{re.escape(name)}\b", doc)
        ]
    assert unnamed == [], "name these in their package's __init__.py docstring"


def test_the_architecture_map_names_every_package() -> None:
    """docs/architecture.md opens with the map of packages: every package of gateway/ is on it."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"## Packages\n.*?```\n(.*?)```", text, re.DOTALL)
    assert block is not None
    packages = sorted(d.name for d in (ROOT / "gateway").iterdir() if (d / "__init__.py").exists())
    assert [
        p for p in packages if not re.search(rf"(^|\s){p}/", block.group(1), re.MULTILINE)
    ] == []
    assert sorted(p for p in LAYERS if (ROOT / "gateway" / p).is_dir()) == packages


def test_the_architecture_map_draws_the_ranks() -> None:
    """The map reads top-down in LAYERS order, and the names on one line are peers (one rank), so a
    reader who trusts it never learns an import the test then refuses."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"## Packages\n.*?```\ngateway/\n(.*?)\nadapters/", text, re.DOTALL)
    assert block is not None
    rows = [
        re.findall(r"(\w+)(?:/|\.py)", re.split(r"\s{3,}", line.strip())[0])
        for line in block.group(1).splitlines()
        if re.match(r"  \w", line)
    ]
    ranks = [{LAYERS[name] for name in row} for row in rows]
    assert all(len(r) == 1 for r in ranks), [
        (row, sorted(r)) for row, r in zip(rows, ranks, strict=True) if len(r) > 1
    ]
    order = [min(r) for r in ranks]
    assert order == sorted(order), rows
    assert {name for row in rows for name in row} == set(LAYERS)


def test_modules_and_functions_stay_short() -> None:
    """Modules under MODULE_LINES lines, no function over
    FUNCTION_LINES, most of them a few lines (STYLE).

    A line here is one a reader reads (a statement, a comment line, a docstring line), so the count
    does not change when the formatter lays a call out one argument a line."""
    long_modules, long_functions, lengths = [], [], []
    for path in sorted([*(ROOT / "gateway").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        rows = _read_rows(text, tree)
        if len(rows) > MODULE_LINES:
            long_modules.append(f"{path.relative_to(ROOT)}: {len(rows)} lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = sum(node.lineno <= row <= (node.end_lineno or node.lineno) for row in rows)
                lengths.append(length)
                if length > FUNCTION_LINES:
                    long_functions.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines"
                    )
    assert long_modules == [], "split these along a seam"
    assert long_functions == [], "split these"
    assert statistics.median(lengths) <= 10


def _read_rows(text: str, tree: ast.Module) -> set[int]:
    """The first row of each statement, each comment row and each docstring row."""
    rows: set[int] = set()
    starts = True
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            rows.add(tok.start[0])
        elif tok.type == tokenize.NEWLINE:
            starts = True
        elif (
            tok.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
            and starts
        ):
            rows.add(tok.start[0])
            starts = False
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            doc = node.body[0]
            if (
                isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant)
                and isinstance(doc.value.value, str)
            ):
                rows.update(range(doc.lineno, (doc.end_lineno or doc.lineno) + 1))
    return rows


def test_mypy_clean() -> None:
    """One run over every package in [tool.mypy] `packages`: gateway/ and adapters/ strict, tests/
    and bench/ with annotations optional but every body checked (the overrides in pyproject.toml).
    It started when the tests were collected (tests/early_checks.py); its cache is .mypy_cache."""
    missing = shutil.which("mypy") is None and not (Path(sys.executable).parent / "mypy").exists()
    require("mypy not installed (pip install -e '.[test]' brings it)" if missing else None)
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"][
        "packages"
    ]
    assert {"gateway", "adapters", "tests", "bench"} <= set(packages)
    code, output = mypy_result(timeout=900)
    assert code == 0, output


def test_ruff_check() -> None:
    missing = shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists()
    require("ruff not installed (pip install -e '.[test]' brings it)" if missing else None)
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    # cached
    result = subprocess.run(
        [ruff, "check", "."], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_check() -> None:
    """The code is in ruff's format at 100 columns (scripts/wrap100.py also rewraps comments and
    docstrings, which the formatter leaves alone)."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    require(None if Path(ruff).exists() else "ruff not installed (pip install -e '.[test]')")
    dirs = ["gateway", "adapters", "tests", "bench", "scripts"]
    result = subprocess.run(
        [ruff, "format", "--check", "--force-exclude", *dirs],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
