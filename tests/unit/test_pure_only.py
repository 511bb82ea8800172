"""The rule for the ``pure_only`` marker (docs/architecture.md, "How it is tested"): the
compiled pass of ``scripts/test`` leaves those tests out, so a test module marked
``pure_only`` as a whole must not import a module that the compiled build compiles; such a
module's tests belong in both passes."""

from __future__ import annotations

import ast
from pathlib import Path

from leveret.build_info import HOT_PATH_MODULES

TESTS = Path(__file__).resolve().parents[1]


def _marked_pure_only(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return "pure_only" in ast.unparse(node.value)
    return False


def _imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_module_marked_pure_only_imports_a_compiled_module() -> None:
    compiled = set(HOT_PATH_MODULES)
    marked = 0
    offenders: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not _marked_pure_only(tree):
            continue
        marked += 1
        hits = sorted(_imported(tree) & compiled)
        if hits:
            offenders[str(path.relative_to(TESTS))] = hits
    assert marked > 0, "no test module is marked pure_only: the rule checks nothing"
    assert offenders == {}


def test_the_check_sees_a_compiled_import() -> None:
    tree = ast.parse(
        "import pytest\nfrom leveret.model import queue\npytestmark = pytest.mark.pure_only\n"
    )
    assert _marked_pure_only(tree)
    assert "leveret.model.queue" in _imported(tree)
