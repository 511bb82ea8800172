"""Small files that must be replaced whole and survive a crash (the users' ``auth.json``,
the policies' ``runtime.json``): written to a temporary file, fsynced, renamed over the old
one, and the directory fsynced, so a reader finds the old document or the new one; and read
back as a JSON object that carries its format marker."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path


def replace_durably(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` by ``data`` atomically and durably."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_document(path: Path, fmt: str, what: str, error: type[Exception]) -> dict[str, Any] | None:
    """The JSON object in ``path`` whose ``format`` is ``fmt``, or None when there is no
    file; ``error`` (with the path and ``what`` the file should be) when it cannot be read,
    is not JSON or is not such a document."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}") from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise error(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise error(f"{path} is not {what} ({fmt})")
    return doc
