"""Code generator for the AMQP 0-9-1 codec in ``leveret/protocol/amqp091/_generated``.

Run ``python -m tools.codegen`` to regenerate and ``python -m tools.codegen --check`` to
verify the committed files; tests import :func:`generate` and :func:`check`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from tools.codegen import render, spec

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = ROOT / "spec/0-9-1-rabbit/amqp0-9-1.stripped.extended.xml"
DEFAULT_OVERLAYS = (ROOT / "tools/codegen/overlays/rabbitmq.xml",)
DEFAULT_OUTPUT = ROOT / "src/leveret/protocol/amqp091/_generated"
GENERATED_FILES = ("__init__.py", "constants.py", "methods.py", "properties.py")

__all__ = [
    "DEFAULT_OUTPUT",
    "DEFAULT_OVERLAYS",
    "DEFAULT_SPEC",
    "GENERATED_FILES",
    "check",
    "generate",
    "write",
]


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.name


def _ruff() -> list[str]:
    exe = shutil.which("ruff")
    return [exe] if exe else [sys.executable, "-m", "ruff"]


def _format(
    source: str, name: str, package: str = "src/leveret/protocol/amqp091/_generated"
) -> str:
    """Format ``source`` with the project's ruff settings, as if it lived in ``package``."""
    result = subprocess.run(
        [
            *_ruff(),
            "format",
            "--config",
            str(ROOT / "pyproject.toml"),
            "--stdin-filename",
            f"{package}/{name}",
            "-",
        ],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"ruff format failed on generated {name}:\n{result.stderr}")
    return result.stdout


def generate(
    spec_path: Path = DEFAULT_SPEC, overlays: tuple[Path, ...] = DEFAULT_OVERLAYS
) -> dict[str, str]:
    """Return ``{file name: formatted source}`` for every generated file."""
    model = spec.load(spec_path, overlays)
    inputs = [
        (_display(p), hashlib.sha256(p.read_bytes()).hexdigest()) for p in (spec_path, *overlays)
    ]
    head = render.banner(inputs) + "\n"
    sources = {
        "__init__.py": render.render_init(model, head),
        "constants.py": render.render_constants(model, head),
        "methods.py": render.render_methods(model, head),
        "properties.py": render.render_properties(model, head),
    }
    return {name: _format(src, name) for name, src in sorted(sources.items())}


def write(files: dict[str, str], out_dir: Path = DEFAULT_OUTPUT) -> None:
    """Write the generated ``files`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out_dir / name).write_text(text, encoding="utf-8", newline="\n")


def check(files: dict[str, str], out_dir: Path = DEFAULT_OUTPUT) -> list[str]:
    """Return the names of files in ``out_dir`` that differ from ``files`` (or are missing)."""
    stale = []
    for name, text in files.items():
        path = out_dir / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale
