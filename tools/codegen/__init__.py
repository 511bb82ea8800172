"""Code generator for the AMQP method codecs in ``leveret/protocol/<version>/_generated``.

One generator, several targets (:data:`TARGETS`): 0-9-1 (the default, what the broker
speaks), 0-8, 0-9 and the 0-9 working draft. Run ``python -m tools.codegen`` to regenerate
them all and ``python -m tools.codegen --check`` to verify the committed files; tests import
:func:`generate`, :func:`generate_target` and :func:`check`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
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
    "TARGETS",
    "Target",
    "check",
    "generate",
    "generate_target",
    "write",
]


@dataclass(frozen=True)
class Target:
    """One generated package: its inputs, its output directory and its render options."""

    name: str
    spec: Path
    overlays: tuple[Path, ...]
    output: Path
    options: render.Options = field(default_factory=render.Options)
    scraped: bool = False


_PROTOCOL = "leveret.protocol"
TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("amqp091", DEFAULT_SPEC, DEFAULT_OVERLAYS, DEFAULT_OUTPUT),
        Target(
            "amqp08",
            ROOT / "spec/0-8/amqp0-8.stripped.xml",
            (
                ROOT / "tools/codegen/overlays/qpid-0-8.xml",
                ROOT / "tools/codegen/overlays/rabbitmq-0-8.xml",
            ),
            ROOT / "src/leveret/protocol/amqp08/_generated",
            render.Options(
                package=f"{_PROTOCOL}.amqp08",
                version="0-8",
                fieldtable=f"{_PROTOCOL}.amqp08.fieldtable",
            ),
        ),
        Target(
            "amqp09",
            ROOT / "spec/0-9/amqp0-9.stripped.xml",
            (ROOT / "tools/codegen/overlays/qpid-0-9.xml",),
            ROOT / "src/leveret/protocol/amqp09/_generated",
            render.Options(package=f"{_PROTOCOL}.amqp09", version="0-9"),
        ),
        Target(
            "amqp09-draft",
            ROOT / "spec/0-9-draft/amqp-0-9-working-draft.xml.txt",
            (),
            ROOT / "src/leveret/protocol/amqp09/draft/_generated",
            render.Options(
                package=f"{_PROTOCOL}.amqp09.draft",
                version="0-9 draft",
                fieldtable=f"{_PROTOCOL}.amqp09.draft.fieldtable",
            ),
            scraped=True,
        ),
    )
}
"""Every generated package by name; ``python -m tools.codegen`` runs them all."""


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.name


def _ruff() -> list[str]:
    exe = shutil.which("ruff")
    return [exe] if exe else [sys.executable, "-m", "ruff"]


def _format(source: str, name: str, out_dir: Path = DEFAULT_OUTPUT) -> str:
    """Format ``source`` with the project's ruff settings, as if it lived in ``out_dir``."""
    result = subprocess.run(
        [
            *_ruff(),
            "format",
            "--config",
            str(ROOT / "pyproject.toml"),
            "--stdin-filename",
            f"{_display(out_dir)}/{name}",
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
    """Return ``{file name: formatted source}`` for every generated file (0-9-1 options)."""
    return generate_target(Target("amqp091", spec_path, overlays, DEFAULT_OUTPUT))


def generate_target(target: Target) -> dict[str, str]:
    """Return ``{file name: formatted source}`` for every file of ``target``."""
    model = spec.load(target.spec, target.overlays, scraped=target.scraped)
    inputs = [
        (_display(p), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in (target.spec, *target.overlays)
    ]
    head = render.banner(inputs) + "\n"
    opts = target.options
    sources = {
        "__init__.py": render.render_init(model, head, opts),
        "constants.py": render.render_constants(model, head, opts),
        "methods.py": render.render_methods(model, head, opts),
        "properties.py": render.render_properties(model, head, opts),
    }
    return {name: _format(src, name, target.output) for name, src in sorted(sources.items())}


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
