"""memcore is pure: standard library only, no clock, no environment, no I/O."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

MEMCORE = Path(__file__).resolve().parents[2] / "memcore"
SOURCES = sorted(MEMCORE.glob("*.py"))

# Names whose use would read the clock, the environment, randomness or do I/O.
FORBIDDEN_ATTRIBUTES = {
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("time", "time"),
    ("time", "monotonic"),
    ("time", "perf_counter"),
    ("os", "environ"),
    ("os", "getenv"),
}
FORBIDDEN_MODULES = {"os", "time", "random", "socket", "subprocess", "pathlib", "io", "secrets"}
FORBIDDEN_CALLS = {"open", "input", "print"}


def imported_modules(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_sources_found() -> None:
    assert len(SOURCES) >= 10


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_only_standard_library_and_memcore(path: Path) -> None:
    modules = imported_modules(ast.parse(path.read_text()))
    foreign = {m for m in modules if m not in sys.stdlib_module_names and m not in {"memcore"}}
    assert foreign == set()
    assert modules & FORBIDDEN_MODULES == set()


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_clock_environment_or_io(path: Path) -> None:
    tree = ast.parse(path.read_text())
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            used.add((node.value.id, node.attr))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{path.name} calls {node.func.id}()"
    assert used & FORBIDDEN_ATTRIBUTES == set()


def test_the_scanner_catches_a_clock_read() -> None:
    tree = ast.parse("import time\nfrom datetime import datetime\nx = datetime.now()\n")
    assert "time" in imported_modules(tree) & FORBIDDEN_MODULES
    attrs = {
        (n.value.id, n.attr)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
    }
    assert ("datetime", "now") in attrs & FORBIDDEN_ATTRIBUTES
