"""How the code is laid out, checked so it stays that way: the engine imports no UI and none of its
workbench, no import goes round in a circle, no module, class or function outgrows a reader's head,
and ruff's layout and checks (ruff.toml: lines of at most 100 characters) hold everywhere."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "ouroboros_core"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 150
MAX_FUNCTION_LINES = 50  # the engine, the app and the workbench
MAX_TEST_FUNCTION_LINES = 60  # a test reads top to bottom: its set-up, its action, its checks


def python_files() -> list[Path]:
    """The repository's Python files: what git tracks, and new files it does not ignore (never a
    .venv)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(ROOT / name for name in listed if (ROOT / name).is_file())


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports, at the top or inside a function, relative imports resolved."""
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module:
                found.add(module)
            # `from . import x` names a module, `from .m import f` a name in one: keep both readings
            found.update(f"{module}.{alias.name}" if module else alias.name for alias in node.names)
    return found


def engine_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in ENGINE.rglob("*.py")}
    return {
        name: {m for m in imports_of(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def test_no_import_circle_inside_the_engine():
    graph = engine_graph()
    assert "ouroboros_core.engine" in graph and graph["ouroboros_core.engine"], (
        "the graph reads no imports"
    )
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for other in sorted(graph[node]):
            if other == "ouroboros_core" or (node == "ouroboros_core" and other.count(".") == 1):
                continue  # the package's __init__ re-exports its modules; they never import it back
            if state.get(other) == 1:
                pytest.fail("import circle: " + " -> ".join(path[path.index(other) :] + [other]))
            if other not in state:
                visit(other, path + [other])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_the_engine_imports_neither_gradio_nor_the_app_nor_its_workbench():
    for path in ENGINE.rglob("*.py"):
        name = module_name(path)
        imported = imports_of(path)
        roots = {m.split(".")[0] for m in imported}
        if name.startswith("ouroboros_core.tools"):
            # The workbench may talk to a running app as any client does (the soak), never import
            # it.
            assert not roots & {"gradio", "app", "ui"}, f"{name} imports the app"
            continue
        assert not roots & {"gradio", "gradio_client", "app", "ui"}, f"{name} imports the UI"
        # the CLI's bench command runs the workbench's benchmark
        if name != "ouroboros_core.__main__":
            assert not any(m.startswith("ouroboros_core.tools") for m in imported), (
                f"{name} imports the workbench"
            )


def test_no_module_is_too_long():
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in python_files()}
    long = {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def function_limit(path: Path) -> int:
    return (
        MAX_TEST_FUNCTION_LINES
        if path.relative_to(ROOT).parts[0] == "tests"
        else MAX_FUNCTION_LINES
    )


def test_no_function_is_too_long():
    long = [
        f"{path.relative_to(ROOT)}:{line} {name} ({lines} lines, at most {function_limit(path)})"
        for path in python_files()
        for line, name, lines in definition_lengths(path.read_text())
        if lines > function_limit(path)
    ]
    assert not long, f"functions over their limit: {long}"


def test_no_class_is_too_long():
    long = [
        f"{path.relative_to(ROOT)}:{line} {name} ({lines} lines)"
        for path in python_files()
        for line, name, lines in definition_lengths(path.read_text(), ast.ClassDef)
        if lines > MAX_CLASS_LINES
    ]
    assert not long, f"classes over {MAX_CLASS_LINES} lines: {long}"


def definition_lengths(source: str, kinds=(ast.FunctionDef, ast.AsyncFunctionDef)):
    """(line, name, length) of every definition of these kinds (by default def and async def):
    methods, nested ones and ones that share a name each count on their own, so a short definition
    never hides a long one of the same name. A length runs from the def (or class) line to its last
    line; decorators are not counted."""
    return [
        (node.lineno, node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, kinds)
    ]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True
    )


def test_ruff_lays_out_and_checks_the_code():
    # The project's style is ruff's: `ruff format` layout and `ruff check` (pyflakes, pycodestyle,
    # lines of at most 100 characters), both read from ruff.toml.
    layout = ruff("format", "--check", ".")
    assert layout.returncode == 0, "not in ruff format's layout (run `ruff format .`):\n" + (
        layout.stdout + layout.stderr
    )
    checks = ruff("check", "--output-format", "concise", ".")
    assert checks.returncode == 0, "ruff check:\n" + checks.stdout + checks.stderr


def test_the_readers_see_relative_imports_and_count_lines(tmp_path):
    # The checks above must be able to fail: a relative import inside a function is read and
    # resolved, and a 71-line function is counted as 71 lines.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from .b import g\n    from .. import other\n")
    assert {"pkg.b", "pkg.b.g", "other"} <= imports_of(package / "a.py", tmp_path)
    assert definition_lengths("def f():\n" + "    x = 1\n" * 70) == [(1, "f", 71)]
    # A long definition among short ones of the same name, top-level, nested and as a method, is
    # still read; a class counts from its line to its last.
    source = (
        "def f():\n    def f():\n        pass\n\n\nclass C:\n    async def f(self):\n"
        + "        x = 1\n" * 70
        + "\n\ndef f():\n    pass\n"
    )
    lengths = [(1, "f", 3), (2, "f", 2), (7, "f", 71), (80, "f", 2)]
    assert sorted(definition_lengths(source)) == lengths
    assert definition_lengths(source, ast.ClassDef) == [(6, "C", 72)]
    assert function_limit(ROOT / "tests" / "test_x.py") == MAX_TEST_FUNCTION_LINES
    assert function_limit(ROOT / "ouroboros_core" / "engine.py") == MAX_FUNCTION_LINES


def test_ruff_reads_the_projects_rules(tmp_path):
    # The ruff check above must be able to fail: with the project's ruff.toml, a 101-character
    # line and a layout ruff would change are both refused.
    (tmp_path / "ruff.toml").write_text((ROOT / "ruff.toml").read_text())
    (tmp_path / "long.py").write_text("x = '" + "a" * 95 + "'\n")
    assert len((tmp_path / "long.py").read_text().splitlines()[0]) == 101
    checked = ruff("check", "--output-format", "concise", ".", cwd=tmp_path)
    assert checked.returncode == 1 and "E501" in checked.stdout, checked.stdout + checked.stderr
    (tmp_path / "long.py").write_text("x = [1,2]\n")
    assert ruff("format", "--check", ".", cwd=tmp_path).returncode == 1


def test_the_architecture_page_names_every_module():
    # docs/ARCHITECTURE.md is where a newcomer looks a module up: a new one is named there too.
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    modules = [
        p for p in python_files() if p.relative_to(ROOT).parts[0] in ("ouroboros_core", "ui")
    ]
    assert len(modules) > 40, "the module list reads nothing"
    unnamed = [str(p.relative_to(ROOT)) for p in modules if p.name != "__init__.py"]
    unnamed = [name for name in unnamed if Path(name).name not in page]
    assert not unnamed, f"modules docs/ARCHITECTURE.md does not name: {unnamed}"
