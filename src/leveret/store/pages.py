"""Scratch files for the pages of deep queues (the ``Pager`` of ``model/paging.py``).

Layout: ``data_dir/pages/00000001.page``, ... Pages are appended to the current file; a
file is deleted once every page written to it was read back or discarded (so a queue that
drained leaves no file behind). Nothing here is synced or recovered: the directory is
emptied at boot (persistent messages come back from the store's segments; transient ones
must not come back). Reads and writes run on the loop thread; they hit the page cache in
the common case and move a whole page (about 1 MiB) per call.

A write that fails (disk full) returns None and the queue keeps that page in memory; the
error is logged once until a write succeeds again.
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger("leveret.store")

FILE_BYTES = 64 << 20


class PageFiles:
    """Append-only page files with a live-page count per file."""

    def __init__(self, path: Path, *, file_bytes: int = FILE_BYTES) -> None:
        self.path = path
        self.file_bytes = file_bytes
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        self._fds: dict[int, int] = {}
        self._live: dict[int, int] = {}
        self._current = 0  # the file pages are appended to (0: none open)
        self._last = 0
        self._size = 0
        self._failing = False

    def _open_next(self) -> None:
        self._last += 1
        fileno = self._current = self._last
        fd = os.open(self.path / f"{fileno:08d}.page", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self._fds[fileno] = fd
        self._live[fileno] = 0
        self._size = 0

    def write(self, data: bytes) -> tuple[int, int, int] | None:
        try:
            if not self._current or self._size >= self.file_bytes:
                previous = self._current
                self._open_next()
                if previous:
                    self._release_if_unused(previous)
            fileno, offset = self._current, self._size
            written = os.pwrite(self._fds[fileno], data, offset)
            while written < len(data):
                written += os.pwrite(self._fds[fileno], data[written:], offset + written)
        except OSError as exc:
            if not self._failing:
                self._failing = True
                log.error("cannot write a page of a deep queue (kept in memory): %s", exc)
            return None
        if self._failing:
            self._failing = False
            log.warning("page writes succeed again")
        self._size += len(data)
        self._live[fileno] += 1
        return (fileno, offset, len(data))

    def read(self, handle: object) -> bytes:
        fileno, offset, length = _unpack(handle)
        fd = self._fds[fileno]
        data = os.pread(fd, length, offset)
        while len(data) < length:  # a short read of a regular file: only near its end
            more = os.pread(fd, length - len(data), offset + len(data))
            if not more:
                raise OSError(f"page file {fileno} is shorter than a page it holds")
            data += more
        return data

    def discard(self, handle: object) -> None:
        fileno = _unpack(handle)[0]
        self._live[fileno] -= 1
        if fileno == self._current and not self._live[fileno]:
            self._current = 0  # every page of it was taken: start afresh at the next write
        if fileno != self._current:
            self._release_if_unused(fileno)

    def _release_if_unused(self, fileno: int) -> None:
        if self._live.get(fileno, 1) > 0:
            return
        del self._live[fileno]
        os.close(self._fds.pop(fileno))
        try:
            os.unlink(self.path / f"{fileno:08d}.page")
        except OSError as exc:
            log.warning("cannot delete page file %d: %s", fileno, exc)

    @property
    def files(self) -> int:
        return len(self._fds)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._live.clear()
        shutil.rmtree(self.path, ignore_errors=True)


def _unpack(handle: object) -> tuple[int, int, int]:
    assert isinstance(handle, tuple)
    fileno, offset, length = handle
    return int(fileno), int(offset), int(length)
