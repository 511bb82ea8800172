"""The PEP 517 build backend: setuptools', plus mypy in the build environment when the
optional compiled build is asked for (``LEVERET_COMPILE=1 pip install .``; see setup.py).

A plain ``pip install .`` stays pure Python and needs nothing but setuptools.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
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


def _compiler_requirements() -> list[str]:
    if os.environ.get("LEVERET_COMPILE") != "1":
        return []
    # The same mypy as the type check (its pin lives once, in the dev extra).
    project = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [req for req in project["optional-dependencies"]["dev"] if req.startswith("mypy")]


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    # setuptools' own hook runs setup.py, which needs mypyc before it is installed: a
    # compiled build asks for mypy alone (setup.py declares no setup_requires).
    compiler = _compiler_requirements()
    return compiler or _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: dict[str, object] | None = None) -> list[str]:
    compiler = _compiler_requirements()
    return compiler or _setuptools.get_requires_for_build_editable(config_settings)
