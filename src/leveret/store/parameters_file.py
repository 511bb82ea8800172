"""Runtime parameters on disk: ``data_dir/runtime.json`` holds the policies, operator
policies, vhost-scoped parameters and global parameters, in RabbitMQ's definitions format,
rewritten whole and atomically on every change (as ``auth.json``: a temporary file, fsync,
rename, fsync of the directory), read at boot. ``server/parameters.py`` is its only user.

Why a file and not records in ``defs.log``: an operator's policy change must be on disk
before the API or ``leveret ctl`` answers, and it is small and rare (the same reasons as
``auth/persist.py``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from leveret.store.files import read_document, replace_durably

if TYPE_CHECKING:
    from pathlib import Path

RUNTIME_FILE = "runtime.json"
FORMAT = "leveret-runtime 1"


class RuntimeFileError(Exception):
    """runtime.json cannot be read; the broker refuses to start (it would otherwise run
    without the operator's policies)."""


def save(path: Path, doc: dict[str, Any]) -> None:
    """Replace ``path`` by ``doc`` (plus the format marker) atomically and durably."""
    data = (json.dumps({"format": FORMAT, **doc}, indent=1, sort_keys=True) + "\n").encode()
    replace_durably(path, data)


def load(path: Path) -> dict[str, Any] | None:
    """The document, or None when there is none yet."""
    return read_document(path, FORMAT, "a Leveret runtime file", RuntimeFileError)
