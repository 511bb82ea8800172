"""The Apache Qpid Python client (Python 2.7) for Leveret's AMQP 0-10 tests and conformance run.

``ensure()`` installs qpid-python (the 0-10 client and the ``qpid_tests.broker_0_10``
conformance suite), qpid-tools and qpid-qmf (which the suite imports) from PyPI's source
distributions into a cache directory with Python 2.7's pip, once, and returns the
interpreter and the ``PYTHONPATH`` to run them with. Not shipped; used by the integration
tests and by ``python -m tools.qpid``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["PACKAGES", "Py2", "ensure", "find_python2"]

# The last releases with the 0-10 client and conformance tests (2017), as sdists.
PACKAGES = ("qpid-python==1.36.0-1", "qpid-tools==1.36.0-1", "qpid-qmf==0.28")
DEFAULT_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "qpid-py2"


class Py2:
    """A Python 2.7 interpreter with the Qpid packages on its path."""

    def __init__(self, python: str, path: Path) -> None:
        self.python = python
        self.path = path

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.path)}

    def run_json(self, script: Path, *args: str, timeout: float = 60) -> dict[str, Any]:
        """Run the Python 2.7 ``script`` with ``args``: the JSON object its last line of
        output prints (RuntimeError with its error output when it fails)."""
        done = subprocess.run(
            [self.python, str(script), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{script.name} {' '.join(args)}: {done.stderr}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


def find_python2() -> str | None:
    """Python 2.7: ``$LEVERET_PYTHON2``, ``python2.7``/``python2`` on PATH, or pyenv's."""
    explicit = os.environ.get("LEVERET_PYTHON2")
    if explicit:
        return explicit
    for name in ("python2.7", "python2"):
        found = shutil.which(name)
        if (
            found
            and subprocess.run(
                [found, "-c", "import sys; assert sys.version_info[:2] == (2, 7)"],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        ):
            return found
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = sorted(glob.glob(os.path.join(root, "versions", "2.7*", "bin", "python")))
    return candidates[-1] if candidates else None


def ensure(cache: Path = DEFAULT_CACHE) -> Py2 | None:
    """The Qpid client under Python 2.7, installed into ``cache`` if it is not there yet;
    None when there is no Python 2.7 or the install failed."""
    python = find_python2()
    if python is None:
        return None
    marker = cache / ".installed"
    if not marker.exists() or marker.read_text() != "\n".join(PACKAGES):
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        done = subprocess.run(
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
             "--no-binary", ":all:", "--target", str(cache), *PACKAGES],
            capture_output=True,
            text=True,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            return None
        marker.write_text("\n".join(PACKAGES))
    return Py2(python, cache)
