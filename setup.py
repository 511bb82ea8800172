"""The extensions of the compiled build; everything else is in pyproject.toml.

The build backend (``tools/backend/leveret_build.py``) decides which build this is: the
compiled one where a C compiler and the Python headers are present (the hot-path modules,
``HOT_PATH_MODULES`` in ``src/leveret/build_info.py``, compiled by mypyc from the same
source), else, or with ``LEVERET_PURE=1``, the pure-Python package.

mypyc runs when the extensions are built, not when setup.py is read, so pip's metadata step
stays cheap; its C files are compiled in parallel, one compiler process per core.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools" / "backend"))
from leveret_build import hot_path_sources, plan

COMPILED, WHY = plan()
print(f"leveret: {'compiled' if COMPILED else 'pure-Python'} build ({WHY})", file=sys.stderr)


class LeveretDistribution(Distribution):
    """A platform wheel when compiled, before mypyc has made the extensions' list."""

    def has_ext_modules(self) -> bool:
        return COMPILED


class BuildHotPath(build_ext):
    """mypyc's C for the hot path, compiled by as many compiler processes as cores."""

    def run(self) -> None:
        # Here rather than in finalize_options, which egg_info and sdist call too: mypyc runs
        # once per build, and its C never lands in an sdist.
        if COMPILED and not self.distribution.ext_modules:
            from mypyc.build import mypycify

            self.distribution.ext_modules = mypycify(
                hot_path_sources(),
                group_name="leveret",
                # One C file per module, so the compiler runs on several at once.
                multi_file=True,
                opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"),
                target_dir=str(Path(self.build_temp) / "mypyc"),
            )
            # Finalized again with the list (its options as given: build's, the command line's).
            self.distribution.reinitialize_command(self)
            self.ensure_finalized()
        super().run()

    def build_extension(self, ext: Extension) -> None:
        compile_one = self.compiler.compile
        jobs = os.cpu_count() or 1
        if len(ext.sources) < 2 or jobs < 2:
            super().build_extension(ext)
            return

        def compile_all(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
            with ThreadPoolExecutor(jobs) as pool:
                batches = pool.map(lambda source: compile_one([source], *args, **kwargs), sources)
                return [obj for batch in batches for obj in batch]

        self.compiler.compile = compile_all  # type: ignore[method-assign]
        try:
            super().build_extension(ext)
        finally:
            del self.compiler.compile


setup(
    distclass=LeveretDistribution,
    cmdclass={"build_ext": BuildHotPath},
    # One build directory per build: a pure build in a tree that was built compiled before
    # must not pick the extensions up from build/lib.
    options={"build": {"build_base": f"build/setuptools/{'compiled' if COMPILED else 'pure'}"}},
)
