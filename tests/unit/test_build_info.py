"""The compiled build's module list and which build a test run exercises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tools.backend import leveret_build

from leveret import build_info

# Set by scripts/test for its second run, on the compiled build that pip install . makes
# (python -m tools.builds).
EXPECT_COMPILED = "LEVERET_EXPECT_COMPILED"

ROOT = Path(__file__).resolve().parents[2]


def test_the_build_compiles_the_list_build_info_names() -> None:
    # The build reads the list from the source, without importing it: the same tuple.
    assert leveret_build.hot_path_modules() == build_info.HOT_PATH_MODULES
    assert len(set(build_info.HOT_PATH_MODULES)) == len(build_info.HOT_PATH_MODULES)
    for path in leveret_build.hot_path_sources():
        assert (ROOT / path).is_file(), path


def test_the_build_is_pure_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(leveret_build.PURE, "1")
    assert leveret_build.plan() == (False, "LEVERET_PURE=1")


def test_without_a_compiler_the_build_falls_back_to_pure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(leveret_build.PURE, raising=False)
    monkeypatch.delenv(leveret_build.COMPILE, raising=False)
    assert leveret_build.plan()[0] is True  # this machine has gcc and the headers
    monkeypatch.setenv("CC", "/nonexistent/cc")
    compiled, why = leveret_build.plan()
    assert compiled is False
    assert "no C compiler" in why
    # Asked for explicitly, a missing compiler is an error, not a silent pure build.
    monkeypatch.setenv(leveret_build.COMPILE, "1")
    with pytest.raises(leveret_build.CompilerMissingError, match="no C extension"):
        leveret_build.plan()


def test_the_start_up_line_says_how_to_get_the_other_build() -> None:
    if build_info.compiled_modules():
        assert "LEVERET_PURE=1 pip install ." in build_info.other_build()
    else:
        assert "C compiler" in build_info.other_build()


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
