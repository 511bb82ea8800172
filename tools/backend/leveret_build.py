"""The PEP 517 build backend: setuptools', deciding which build ``pip install .`` makes.

The compiled build (the hot-path modules compiled by mypyc from the same source; the list
is ``HOT_PATH_MODULES`` in ``src/leveret/build_info.py``) is the default wherever a C
compiler and the Python headers are present, as aiohttp, PyYAML and msgpack build their
extensions from source. Without them, or with ``LEVERET_PURE=1``, the pure-Python package
is built; ``LEVERET_COMPILE=1`` makes a missing compiler an error instead of a fallback.
An editable install (``pip install -e .``) is always pure Python: it is the source a
developer edits and the test command's first pass tests.

``setup.py`` imports this module for the same decision (``plan()``) and the module list.
"""

from __future__ import annotations

import ast
import os
import tempfile
import tomllib
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

PURE = "LEVERET_PURE"
COMPILE = "LEVERET_COMPILE"
ROOT = Path(__file__).resolve().parents[2]
PROBE = "#include <Python.h>\nint leveret_probe(void) { return Py_IsInitialized(); }\n"


class CompilerMissingError(RuntimeError):
    """``LEVERET_COMPILE=1`` asked for the compiled build, and it cannot be built here."""


def hot_path_modules(root: Path = ROOT) -> tuple[str, ...]:
    """``build_info.HOT_PATH_MODULES``, read from the source without importing it (a build
    runs before the package is installed, and in an environment without its dependencies)."""
    tree = ast.parse((root / "src" / "leveret" / "build_info.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.AnnAssign | ast.Assign)
            and "HOT_PATH_MODULES" in ast.unparse(node).split("=", 1)[0]
            and node.value is not None
        ):
            modules: tuple[str, ...] = ast.literal_eval(node.value)
            return modules
    raise LookupError("src/leveret/build_info.py defines no HOT_PATH_MODULES")


def hot_path_sources(root: Path = ROOT) -> list[str]:
    """The source paths, relative to ``root``, that mypyc compiles."""
    return [f"src/{name.replace('.', '/')}.py" for name in hot_path_modules(root)]


def compiler_problem() -> str | None:
    """Why no C extension can be built here (``None``: one can): compiles a file that
    includes ``Python.h`` with the compiler setuptools would use, as a real build would."""
    from setuptools import Distribution
    from setuptools.command.build_ext import build_ext

    command = build_ext(Distribution())
    command.finalize_options()
    from distutils.ccompiler import new_compiler
    from distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory(prefix="leveret-probe-") as tmp:
        source = Path(tmp) / "probe.c"
        source.write_text(PROBE, encoding="utf-8")
        try:
            compiler.compile([str(source)], output_dir=tmp, include_dirs=command.include_dirs)
        except Exception as error:  # whatever the reason, the build cannot compile
            lines = str(error).strip().splitlines() or [type(error).__name__]
            return lines[-1]
    return None


def plan() -> tuple[bool, str]:
    """Whether this build compiles the hot path, and why (for the build's log)."""
    if os.environ.get(PURE) == "1":
        return False, f"{PURE}=1"
    problem = compiler_problem()
    if problem is None:
        return True, "a C compiler and the Python headers are present"
    if os.environ.get(COMPILE) == "1":
        raise CompilerMissingError(f"{COMPILE}=1 but no C extension can be built: {problem}")
    return False, f"no C compiler or no Python headers ({problem})"


def _mypy_requirement() -> list[str]:
    # The same mypy as the type check (its pin lives once, in the dev extra): the compiled
    # build type-checks the source exactly as the lint does.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [req for req in project["optional-dependencies"]["dev"] if req.startswith("mypy")]


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    compiled, _ = plan()
    requires: list[str] = _setuptools.get_requires_for_build_wheel(config_settings)
    return requires + (_mypy_requirement() if compiled else [])


def get_requires_for_build_editable(
    config_settings: dict[str, object] | None = None,
) -> list[str]:
    os.environ[PURE] = "1"
    requires: list[str] = _setuptools.get_requires_for_build_editable(config_settings)
    return requires


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: dict[str, object] | None = None
) -> str:
    os.environ[PURE] = "1"
    name: str = _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)
    return name


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, object] | None = None,
    metadata_directory: str | None = None,
) -> str:
    os.environ[PURE] = "1"
    name: str = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    return name
