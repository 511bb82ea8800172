"""Code generator for the AMQP 0-10 codec in ``leveret/protocol/amqp010/_generated``.

Run ``python -m tools.codegen.amqp010`` to regenerate and ``python -m tools.codegen.amqp010
--check`` to verify the committed files; tests import :func:`generate` and :func:`check`.

The input is Qpid's errata of the 0-10 XML (``spec/0-10/``), not the plain stripped XML: the
errata give ``dtx.xid`` a struct code and a 4-octet size, which ``dtx.recover``'s result
needs (its ``in-doubt`` array holds xids as struct32 values, and a struct32 must have a code)
and which Qpid's clients and brokers send in every dtx command; it also declares who handles
``connection.heartbeat``.  Those are its only two differences from the plain XML.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from tools.codegen.amqp010 import render, spec

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_SPEC = ROOT / "spec/0-10/amqp.0-10-qpid-errata.stripped.xml"
DEFAULT_OUTPUT = ROOT / "src/leveret/protocol/amqp010/_generated"
GENERATED_FILES = ("__init__.py", "commands.py", "constants.py", "controls.py", "structs.py")

__all__ = ["DEFAULT_OUTPUT", "DEFAULT_SPEC", "GENERATED_FILES", "check", "generate", "write"]


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.name


def _ruff(args: list[str], source: str, name: str) -> str:
    exe = shutil.which("ruff")
    ruff = [exe] if exe else [sys.executable, "-m", "ruff"]
    result = subprocess.run(
        [
            *ruff,
            *args,
            "--config",
            str(ROOT / "pyproject.toml"),
            "--stdin-filename",
            f"src/leveret/protocol/amqp010/_generated/{name}",
            "-",
        ],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"ruff {args[0]} failed on generated {name}:\n{result.stderr}")
    return result.stdout


def _format(source: str, name: str) -> str:
    """Sort the imports and format ``source`` with the project's ruff settings."""
    sorted_imports = _ruff(["check", "--fix", "--select", "I", "--quiet"], source, name)
    return _ruff(["format"], sorted_imports, name)


def generate(spec_path: Path = DEFAULT_SPEC) -> dict[str, str]:
    """Return ``{file name: formatted source}`` for every generated file."""
    model = spec.load(spec_path)
    render.check_names(model)
    digest = hashlib.sha256(spec_path.read_bytes()).hexdigest()
    head = render.banner([(_display(spec_path), digest)])
    sources = {
        "__init__.py": render.render_init(model, head),
        "commands.py": render.render_commands(model, head),
        "constants.py": render.render_constants(model, head),
        "controls.py": render.render_controls(model, head),
        "structs.py": render.render_structs(model, head),
    }
    return {name: _format(src, name) for name, src in sorted(sources.items())}


def write(files: dict[str, str], out_dir: Path = DEFAULT_OUTPUT) -> None:
    """Write the generated ``files`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out_dir / name).write_text(text, encoding="utf-8", newline="\n")


def check(files: dict[str, str], out_dir: Path = DEFAULT_OUTPUT) -> list[str]:
    """Return the names of files in ``out_dir`` that differ from ``files`` (or are missing)."""
    return [
        name
        for name, text in files.items()
        if not (out_dir / name).is_file() or (out_dir / name).read_text(encoding="utf-8") != text
    ]
