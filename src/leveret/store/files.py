"""Small files that must be replaced whole and survive a crash (the users' ``auth.json``,
the policies' ``runtime.json``): written to a temporary file, fsynced, renamed over the old
one, and the directory fsynced, so a reader finds the old document or the new one."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

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
