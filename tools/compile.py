"""Build the compiled variant of Leveret into a directory of its own, beside the source.

``python -m tools.compile [--out build/compiled]`` copies ``src/leveret`` there and compiles
the modules listed in pyproject.toml (``[tool.leveret.compiled]``) with mypyc in that copy,
so ``PYTHONPATH=build/compiled`` runs the compiled broker while ``src`` stays pure Python
(the test command runs the suite on both). A build whose inputs did not change is reused.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = "BUILD-STAMP"


def compiled_modules() -> list[str]:
    """The module paths (``leveret/...py``) that the compiled build compiles."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    modules: list[str] = config["tool"]["leveret"]["compiled"]["modules"]
    return modules


def _fingerprint(modules: list[str]) -> str:
    digest = hashlib.sha256(sys.version.encode())
    digest.update("\n".join(modules).encode())
    for path in sorted((ROOT / "src" / "leveret").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build(out: Path) -> Path:
    modules = compiled_modules()
    fingerprint = _fingerprint(modules)
    stamp = out / STAMP
    if stamp.exists() and stamp.read_text(encoding="utf-8") == fingerprint:
        return out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(
        ROOT / "src" / "leveret",
        out / "leveret",
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
    )
    mypyc = Path(sys.executable).with_name("mypyc")
    command = [str(mypyc)] if mypyc.exists() else [sys.executable, "-m", "mypyc"]
    env = {**os.environ, "MYPYPATH": str(out)}
    result = subprocess.run(
        [*command, *modules], cwd=out, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
        raise SystemExit(f"mypyc failed (exit {result.returncode})")
    shutil.rmtree(out / "build", ignore_errors=True)
    stamp.write_text(fingerprint, encoding="utf-8")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.compile", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "compiled")
    args = parser.parse_args()
    print(build(args.out.resolve()))


if __name__ == "__main__":
    main()
