"""The two halves of an atomic dtx commit on disk: the message store's commit markers
(``X`` records, ``Recovered.dtx_markers``) and the dtx log's ``c`` record
(``store/dtx_log.py``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from leveret.model.dtx import PreparedBranch
from leveret.model.message import HINT_PERSISTENT, Message
from leveret.store.disk import DiskStore
from leveret.store.dtx_log import CRASH_ENV, DtxFile

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

XID = (1, b"gtrid", b"bq")


def _decode(raw: bytes) -> Any:
    raise AssertionError("not needed")


def _run(store: DiskStore, work: Callable[[DiskStore], None]) -> None:
    async def main() -> None:
        store.start(asyncio.get_running_loop())
        work(store)
        for _ in range(20):
            await asyncio.sleep(0.01)
        store.close()

    asyncio.run(main())


def _reopen(path: Path) -> tuple[DiskStore, Any]:
    store = DiskStore(path)
    return store, store.open()


def test_a_marker_comes_back_with_its_batch_until_forgotten(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    markers: list[int] = []

    def work(s: DiskStore) -> None:
        qid = s.queue_declared("/", "q", False, {})
        message = Message("", "q", b"\x10\x00\x02", b"m", _decode, hints=HINT_PERSISTENT)
        markers.append(s.dtx_committed(b"branch-1"))
        s.enqueued(qid, message)
        markers.append(s.dtx_committed(b"branch-2"))

    _run(store, work)
    store, rec = _reopen(tmp_path)
    assert rec.dtx_markers == {b"branch-1": markers[0], b"branch-2": markers[1]}
    assert rec.messages == 1
    # A marker's id is never given to a message later.
    _run(store, lambda s: s.dtx_forgotten(rec.dtx_markers[b"branch-1"]))
    store, rec = _reopen(tmp_path)
    store.close()
    assert rec.dtx_markers == {b"branch-2": markers[1]}


def test_a_marker_keeps_its_segment(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, segment_bytes=64)
    store.open()
    marker: list[int] = []
    _run(store, lambda s: marker.append(s.dtx_committed(b"kept")))
    store = DiskStore(tmp_path, segment_bytes=64)
    store.open()

    async def churn() -> None:
        # Batch after batch: new segments fill and empty, the oldest goes when nothing in
        # it is held any more.
        store.start(asyncio.get_running_loop())
        qid = store.queue_declared("/", "q", False, {})
        for _ in range(6):
            body = b"x" * 100
            mid = store.enqueued(qid, Message("", "q", b"", body, _decode, hints=HINT_PERSISTENT))
            await asyncio.sleep(0.02)
            store.removed(qid, mid)
            await asyncio.sleep(0.02)
        store.close()

    asyncio.run(churn())
    segments = sorted(p.name for p in (tmp_path / "msgs").iterdir())
    assert len(segments) > 1
    assert segments[0] == "00000001.seg"  # the marker's
    store = DiskStore(tmp_path, segment_bytes=64)
    rec = store.open()
    store.close()
    assert list(rec.dtx_markers) == [b"kept"]


def _branch() -> PreparedBranch:
    return PreparedBranch(XID, "/", [("", "q", b"\x00\x00", b"body")], [("accept", "q", 3)])


def _write(log: DtxFile, action: Callable[[DtxFile], None]) -> None:
    log.open()
    action(log)
    log.close()


def test_the_commit_record_marks_a_branch_committed_until_finished(tmp_path: Path) -> None:
    path = tmp_path / "dtx.log"
    log = DtxFile(path)
    done: list[bool] = []
    _write(log, lambda f: f.prepared(_branch(), done.append))
    found = DtxFile(path).open()
    assert [(b.xid, b.committed) for b in found] == [(XID, False)]
    _write(DtxFile(path), lambda f: f.committing(XID, done.append))
    log = DtxFile(path)
    found = log.open()
    log.close()
    assert [(b.xid, b.committed, b.publishes) for b in found] == [
        (XID, True, [("", "q", b"\x00\x00", b"body")])
    ]
    # The rewrite at boot kept the decision.
    log = DtxFile(path)
    assert [b.committed for b in log.open()] == [True]
    log.finished(XID, done.append)
    log.close()
    log = DtxFile(path)
    assert log.open() == []
    log.close()
    assert done == [True, True, True]


def test_an_unknown_crash_step_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CRASH_ENV, "nowhere")
    with pytest.raises(ValueError, match="unknown step"):
        DtxFile(tmp_path / "dtx.log")
