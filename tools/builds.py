"""Build Leveret every way the README documents, into one directory, for the tests.

``python -m tools.builds [--out build/builds]`` runs, from the source tree:

- ``pip wheel .`` — the wheel ``pip install .`` builds and installs (compiled where a C
  compiler and the Python headers are present; here ``LEVERET_COMPILE=1`` makes a missing
  compiler an error rather than a silent pure build), installed with ``pip install
  --target`` into ``OUT/compiled``: the test command's second pass runs on it
  (``PYTHONPATH=OUT/compiled``);
- ``LEVERET_PURE=1 pip wheel .`` — the pure-Python wheel;
- ``python -m build`` — an sdist, and a wheel built from that sdist.

Then it installs each artifact into a fresh venv of its own (``OUT/venvs/NAME``, the
dependencies from pip's index or cache): the compiled and the pure wheel of ``pip``, the
wheel of ``python -m build``, and its sdist (built pure: the wheel from the same sdist is
the compiled proof). ``tests/integration/test_install.py`` serves a pika round trip from
each. Everything is rebuilt when a file the build reads changed, else reused.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = "BUILD-STAMP"
# What the builds read: the package, the build configuration and the backend (README.md
# too, as the long description, which no test reads: an edit of it rebuilds nothing).
INPUTS = ("src/leveret", "pyproject.toml", "setup.py", "MANIFEST.in", "tools/backend")
VENVS = ("pip-compiled", "pip-pure", "build-wheel", "build-sdist")


def fingerprint() -> str:
    digest = hashlib.sha256(sys.version.encode())
    for name in INPUTS:
        path = ROOT / name
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".so":
                digest.update(str(file.relative_to(ROOT)).encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()


def _run(command: list[str], log: list[str], **env: str) -> None:
    started = time.monotonic()
    environment = {k: v for k, v in os.environ.items() if k not in ("LEVERET_PURE", "PYTHONPATH")}
    result = subprocess.run(
        command,
        cwd=ROOT,
        env={**environment, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    shown = [f"{key}={value}" for key, value in env.items()] + command
    log.append(f"{time.monotonic() - started:6.1f} s  {' '.join(shown)}")
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-6000:] + result.stderr[-6000:])
        raise SystemExit(f"failed (exit {result.returncode}): {' '.join(command)}")


def one(directory: Path, pattern: str) -> Path:
    found = sorted(directory.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"expected one {pattern} in {directory}, found {found}")
    return found[0]


def build(out: Path) -> Path:
    stamp = out / STAMP
    expected = fingerprint()
    if stamp.exists() and stamp.read_text(encoding="utf-8") == expected:
        return out
    shutil.rmtree(out, ignore_errors=True)
    # setuptools builds in the tree (build/setuptools/...): start clean, so nothing a
    # removed module left there lands in a wheel.
    shutil.rmtree(ROOT / "build" / "setuptools", ignore_errors=True)
    out.mkdir(parents=True)
    log: list[str] = []
    pip = [sys.executable, "-m", "pip"]
    quiet = ["--quiet", "--disable-pip-version-check"]
    _run(
        [*pip, "wheel", *quiet, "--no-deps", "-w", str(out / "pip"), "."], log, LEVERET_COMPILE="1"
    )
    compiled = one(out / "pip", "leveret-*-cp*.whl")
    _run(
        [*pip, "install", *quiet, "--no-deps", "--target", str(out / "compiled"), str(compiled)],
        log,
    )
    _run([*pip, "wheel", *quiet, "--no-deps", "-w", str(out / "pure"), "."], log, LEVERET_PURE="1")
    pure = one(out / "pure", "leveret-*-py3-none-any.whl")
    _run([sys.executable, "-m", "build", "--outdir", str(out / "build"), "."], log)
    wheel = one(out / "build", "leveret-*-cp*.whl")
    sdist = one(out / "build", "leveret-*.tar.gz")
    artifacts = {
        "pip-compiled": (compiled, {}),
        "pip-pure": (pure, {}),
        "build-wheel": (wheel, {}),
        "build-sdist": (sdist, {"LEVERET_PURE": "1"}),
    }
    for name, (artifact, env) in artifacts.items():
        venv = out / "venvs" / name
        # No pip of its own (ensurepip costs seconds per venv): this pip installs into it.
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], log)
        python = str(venv / "bin" / "python")
        _run([*pip, "--python", python, "install", *quiet, str(artifact)], log, **env)
    (out / "build.log").write_text("\n".join(log) + "\n", encoding="utf-8")
    stamp.write_text(expected, encoding="utf-8")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.builds", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "builds")
    args = parser.parse_args()
    print(build(args.out.resolve()))


if __name__ == "__main__":
    main()
