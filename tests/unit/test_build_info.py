"""The compiled build's module list and which build a test run exercises."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from leveret import build_info

# Set by scripts/test for its second run, on the compiled build (python -m tools.compile).
EXPECT_COMPILED = "LEVERET_EXPECT_COMPILED"

ROOT = Path(__file__).resolve().parents[2]


def test_hot_path_list_is_the_one_pyproject_compiles() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    paths = config["tool"]["leveret"]["compiled"]["modules"]
    names = tuple(path.removesuffix(".py").replace("/", ".") for path in paths)
    assert names == build_info.HOT_PATH_MODULES


def test_this_run_exercises_the_build_it_claims() -> None:
    compiled = build_info.compiled_modules()
    if os.environ.get(EXPECT_COMPILED):
        assert compiled == list(build_info.HOT_PATH_MODULES)
        assert build_info.describe().startswith("compiled (mypyc)")
    else:
        # The default run must test the pure-Python source, not a stray build in src/.
        assert compiled == []
        assert build_info.describe() == "pure Python"


def test_each_hot_path_module_loads_first_in_a_fresh_process() -> None:
    # A compiled module that needs a class from a module nobody imported yet crashes the
    # process when it loads (mypyc builds NamedTuples from their field types): the broker's
    # own import order hid this once; each module must load on its own.
    code = "import importlib, sys; importlib.import_module(sys.argv[1])"
    for name in build_info.HOT_PATH_MODULES:
        result = subprocess.run(
            [sys.executable, "-c", code, name], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, f"{name}: exit {result.returncode} {result.stderr[-500:]}"
