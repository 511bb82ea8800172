"""Code generator for the AMQP 1.0 codec in ``leveret/protocol/amqp10/_generated``.

Run ``python -m tools.codegen.amqp10`` to regenerate and ``python -m tools.codegen.amqp10
--check`` to verify the committed files; tests import :func:`generate` and :func:`check`.
The 0-9-1 generator (``tools.codegen``) is separate and unchanged; this one shares only its
formatting and file helpers.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tools.codegen import _display, _format, check, write
from tools.codegen.amqp10 import render, spec

ROOT = Path(__file__).resolve().parents[3]
SPEC_DIR = ROOT / "spec/1-0"
# Document order fixes the order of the generated classes and definitions.
DEFAULT_DOCUMENTS = tuple(
    SPEC_DIR / f"{name}.bare.xml"
    for name in ("types", "transport", "messaging", "security", "transactions")
)
DEFAULT_SEED = SPEC_DIR / "amqp-1-0-types.xml.txt"
DEFAULT_OUTPUT = ROOT / "src/leveret/protocol/amqp10/_generated"
GENERATED_FILES = ("__init__.py", "composites.py", "definitions.py", "encodings.py")

__all__ = [
    "DEFAULT_DOCUMENTS",
    "DEFAULT_OUTPUT",
    "DEFAULT_SEED",
    "GENERATED_FILES",
    "check",
    "generate",
    "write",
]


def generate(
    documents: tuple[Path, ...] = DEFAULT_DOCUMENTS, seed: Path = DEFAULT_SEED
) -> dict[str, str]:
    """Return ``{file name: formatted source}`` for every generated file."""
    model = spec.load(documents, seed)
    inputs = [(_display(p), hashlib.sha256(p.read_bytes()).hexdigest()) for p in (*documents, seed)]
    head = render.banner(inputs)
    sources = {
        "__init__.py": render.render_init(head),
        "composites.py": render.render_composites(model, head),
        "definitions.py": render.render_definitions(model, head),
        "encodings.py": render.render_encodings(model, head),
    }
    return {name: _format(src, name, DEFAULT_OUTPUT) for name, src in sorted(sources.items())}
