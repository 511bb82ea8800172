"""The optional compiled build: ``LEVERET_COMPILE=1 pip install .`` compiles the hot-path
modules listed in pyproject.toml (``[tool.leveret.compiled]``) with mypyc, from the same
Python source; without it the package is pure Python. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from setuptools import setup


def _ext_modules() -> list[object]:
    if os.environ.get("LEVERET_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    config = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))
    modules = config["tool"]["leveret"]["compiled"]["modules"]
    return list(mypycify([f"src/{module}" for module in modules], group_name="leveret"))


setup(ext_modules=_ext_modules())
