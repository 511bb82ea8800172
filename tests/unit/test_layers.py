"""The layering rules of DESIGN.md: protocol/ and model/ import nothing else from leveret
(but leveret.errors); convert/ (message conversion) imports only them; none of the three
imports asyncio or reads the clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

# Left out of the compiled pass (scripts/test): reads the source, imports none of it.
pytestmark = pytest.mark.pure_only

SRC = Path(__file__).resolve().parents[2] / "src" / "leveret"
ALLOWED = {
    "protocol": ("leveret.protocol", "leveret.errors"),
    "model": ("leveret.model", "leveret.errors"),
    "convert": ("leveret.convert", "leveret.protocol", "leveret.model", "leveret.errors"),
}
FORBIDDEN_MODULES = ("asyncio", "socket", "time")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports(layer: str) -> None:
    files = sorted((SRC / layer).rglob("*.py"))
    assert files
    for path in files:
        for name in _imports(path):
            if name == "leveret" or name.startswith("leveret."):
                assert name.startswith(ALLOWED[layer]), f"{path}: imports {name}"
            assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{path}: imports {name}"
