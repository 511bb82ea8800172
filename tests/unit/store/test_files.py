"""store/files.py: a whole-file document written durably and read back with its format
marker checked (auth.json and runtime.json both go through it)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from leveret.auth import persist
from leveret.auth.users import UserStore
from leveret.store import parameters_file
from leveret.store.files import read_document, replace_durably

if TYPE_CHECKING:
    from pathlib import Path

# Left out of the compiled pass (scripts/test): the store is not compiled.
pytestmark = pytest.mark.pure_only


class _Bad(Exception):
    pass


def test_a_written_document_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    assert read_document(path, "f 1", "a test file", _Bad) is None
    replace_durably(path, b'{"format": "f 1", "x": [1]}')
    assert read_document(path, "f 1", "a test file", _Bad) == {"format": "f 1", "x": [1]}
    assert not (tmp_path / "doc.json.tmp").exists()


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"{", "is not valid JSON"),
        (b"[]", "is not a test file (f 1)"),
        (b'{"format": "f 2"}', "is not a test file (f 1)"),
    ],
)
def test_a_bad_document_raises_the_callers_error(tmp_path: Path, data: bytes, text: str) -> None:
    path = tmp_path / "doc.json"
    path.write_bytes(data)
    with pytest.raises(_Bad, match=re.escape(text)):
        read_document(path, "f 1", "a test file", _Bad)


def test_an_unreadable_path_raises_the_callers_error(tmp_path: Path) -> None:
    with pytest.raises(_Bad, match="cannot read"):
        read_document(tmp_path, "f 1", "a test file", _Bad)  # a directory


def test_runtime_and_auth_files_keep_their_errors(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b'{"format": "other"}')
    with pytest.raises(parameters_file.RuntimeFileError, match="not a Leveret runtime file"):
        parameters_file.load(path)
    with pytest.raises(persist.AuthFileError, match="not a Leveret auth file"):
        persist.load(path, UserStore())
    assert parameters_file.load(tmp_path / "none.json") is None
    assert persist.load(tmp_path / "none.json", UserStore()) is False
