"""PageFiles: the scratch files of deep queues' pages."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from leveret.store.pages import PageFiles

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

import pytest

# Left out of the compiled pass (scripts/test): the store is not compiled.
pytestmark = pytest.mark.pure_only


def test_pages_read_back_and_files_go_when_every_page_was_taken(tmp_path: Path) -> None:
    pages = PageFiles(tmp_path / "pages", file_bytes=100)
    handles = [pages.write(bytes([i]) * 60) for i in range(5)]
    assert all(h is not None for h in handles)
    # 60-byte pages in 100-byte files: a new file after every second page.
    assert pages.files == 3
    for i, handle in enumerate(handles):
        assert pages.read(handle) == bytes([i]) * 60
    for handle in handles[:4]:
        pages.discard(handle)
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == ["00000003.page"]
    pages.discard(handles[4])
    assert list((tmp_path / "pages").iterdir()) == []
    pages.close()
    assert not (tmp_path / "pages").exists()


def test_boot_empties_the_directory(tmp_path: Path) -> None:
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "00000001.page").write_bytes(b"stale")
    pages = PageFiles(tmp_path / "pages")
    assert list((tmp_path / "pages").iterdir()) == []
    pages.close()


def test_a_failed_write_returns_none_and_is_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pages = PageFiles(tmp_path / "pages")
    real = os.pwrite

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    assert pages.write(b"x" * 10) is None
    assert pages.write(b"x" * 10) is None
    assert sum("cannot write a page" in r.message for r in caplog.records) == 1
    monkeypatch.setattr(os, "pwrite", real)
    handle = pages.write(b"y" * 10)
    assert handle is not None
    assert pages.read(handle) == b"y" * 10
    pages.close()
