"""DiskStore: group commit, recovery of definitions and messages, torn tails, corruption,
segment clean-up."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import pytest

from leveret.model.message import HINT_PERSISTENT, Message
from leveret.store.disk import DiskStore, StoreInUse
from leveret.store.records import StoreCorrupt
from leveret.testing.clock import ClockedEventLoop

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def _decode(raw: bytes) -> Any:
    raise AssertionError("not needed")


def _message(body: bytes, props: bytes = b"\x10\x00\x02") -> Message:
    return Message("ex", "rk", props, body, _decode, hints=HINT_PERSISTENT)


def _run(store: DiskStore, work: Callable[[DiskStore], None], turns: int = 20) -> None:
    """Start ``store`` on a loop, run ``work`` on it, let the commits happen, close it."""

    async def main() -> None:
        store.start(asyncio.get_running_loop())
        work(store)
        for _ in range(turns):
            await asyncio.sleep(0.01)
        store.close()

    asyncio.run(main())


def _reopen(path: Path, **kwargs: Any) -> tuple[DiskStore, Any]:
    store = DiskStore(path, **kwargs)
    return store, store.open()


def test_definitions_survive(tmp_path: Path) -> None:
    store, rec = _reopen(tmp_path)
    assert rec.queues == []
    assert rec.exchanges == []
    assert rec.bindings == []
    args = {"x-max-length": 10, "x-dead-letter-exchange": b"dlx", "nested": {"l": [1, "a"]}}

    def work(s: DiskStore) -> None:
        s.exchange_declared("/", "e1", "topic", False, False, {"alternate-exchange": "ae"})
        s.exchange_declared("/", "e2", "fanout", True, True, {})
        s.exchange_declared("v2", "gone", "direct", False, False, {})
        assert s.queue_declared("/", "q1", False, args) == 1
        assert s.queue_declared("/", "q2", True, {}) == 2
        s.binding_changed(True, "/", "e1", True, "q1", "a.#", {"x-match": "all"})
        s.binding_changed(True, "/", "e1", False, "e2", "b.*", {})
        s.binding_changed(True, "/", "e1", True, "q2", "k", {})
        s.binding_changed(False, "/", "e1", True, "q2", "k", {})
        s.binding_changed(True, "v2", "gone", True, "q9", "k", {})
        s.exchange_deleted("v2", "gone")
        s.queue_deleted("/", "q2", 2)

    _run(store, work)
    store, rec = _reopen(tmp_path)
    store.close()
    assert {(x["v"], x["n"], x["t"], x["ad"], x["i"]) for x in rec.exchanges} == {
        ("/", "e1", "topic", False, False),
        ("/", "e2", "fanout", True, True),
    }
    assert next(x for x in rec.exchanges if x["n"] == "e1")["a"] == {"alternate-exchange": "ae"}
    assert [(q.name, q.qid, q.auto_delete, q.arguments) for q in rec.queues] == [
        ("q1", 1, False, args)
    ]
    assert sorted((b["s"], b["q"], b["d"], b["k"], repr(b["a"])) for b in rec.bindings) == [
        ("e1", False, "e2", "b.*", "{}"),
        ("e1", True, "q1", "a.#", "{'x-match': 'all'}"),
    ]
    # Queue ids are never reused, even after a delete and a compaction.
    store, rec = _reopen(tmp_path)
    assert store.queue_declared("/", "q3", False, {}) == 3
    store.close()


def test_messages_come_back_in_order_with_delivered_flags(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    props = b"\x90\x00\x0atext/plain\x02"

    def work(s: DiskStore) -> None:
        q1 = s.queue_declared("/", "q1", False, {})
        q2 = s.queue_declared("/", "q2", False, {})
        q3 = s.queue_declared("/", "q3", False, {})
        mids = []
        for i in range(10):
            message = _message(b"body%d" % i, props)
            mids.append(s.enqueued(q1, message))
            s.enqueued(q2, message)  # the same message in a second queue: one body
            s.enqueued(q3, message)
        s.delivered(q1, mids[3])
        s.removed(q1, mids[0])
        s.removed(q2, mids[9])
        s.queue_deleted("/", "q3", q3)

    _run(store, work)
    store, rec = _reopen(tmp_path)
    store.close()
    assert rec.messages == 18
    by_name = {q.name: q for q in rec.queues}
    q1 = by_name["q1"].messages
    assert [m[4] for m in q1] == [b"body%d" % i for i in range(1, 10)]
    assert [m[5] for m in q1] == [i == 3 for i in range(1, 10)]
    assert all(m[1:4] == ("ex", "rk", props) for m in q1)
    assert [m[4] for m in by_name["q2"].messages] == [b"body%d" % i for i in range(9)]
    assert "q3" not in by_name
    segment = (tmp_path / "msgs" / "00000001.seg").read_bytes()
    assert segment.count(b"body5") == 1


def test_messages_are_stamped_with_the_time_of_their_turn_by_the_loop_s_wall_clock(
    tmp_path: Path,
) -> None:
    """The enqueue time kept for TTLs across a restart is read when the message is stored
    (not at the previous batch, which may be an hour old on an idle broker), from the
    loop's wall clock where it has one (the test clock's, advanced here)."""
    store, _ = _reopen(tmp_path)
    loop = ClockedEventLoop()

    async def main() -> None:
        store.start(loop)
        qid = store.queue_declared("/", "q", False, {})
        store.enqueued(qid, _message(b"first"))
        await loop.advance(0.05)
        await loop.advance(3600)  # idle: nothing is written meanwhile
        store.enqueued(qid, _message(b"later"))
        await loop.advance(0.05)
        store.close()

    began = time.time()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    store, rec = _reopen(tmp_path)
    store.close()
    stamps = {m[4]: m[6] for m in rec.queues[0].messages}
    assert began - 1 <= stamps[b"first"] < began + 5
    assert 3600 <= stamps[b"later"] - stamps[b"first"] < 3610


def test_confirm_callbacks_run_after_the_sync_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = _reopen(tmp_path)
    synced: list[int] = []
    events: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        real(fd)
        synced.append(fd)
        events.append("sync")

    monkeypatch.setattr(os, "fdatasync", fdatasync)

    def work(s: DiskStore) -> None:
        qid = s.queue_declared("/", "q", False, {})
        for i in range(1000):
            s.enqueued(qid, _message(b"x" * 100))
            if i % 100 == 99:
                s.after_commit(functools.partial(events.append, f"confirm {i}"))
        assert events == []  # nothing is confirmed before the writer synced

    _run(store, work)
    confirms = [e for e in events if e != "sync"]
    assert confirms == [f"confirm {i}" for i in range(99, 1000, 100)]
    assert events[0] == "sync"
    # Group commit: 1000 publishes in one loop turn share one sync of each file.
    assert len(synced) <= 4


def test_writes_while_syncing_go_into_the_next_batch(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    order: list[int] = []

    async def main() -> None:
        store.start(asyncio.get_running_loop())
        qid = store.queue_declared("/", "q", False, {})
        for turn in range(50):
            store.enqueued(qid, _message(b"%d" % turn))
            store.after_commit(functools.partial(order.append, turn))
            await asyncio.sleep(0)
        for _ in range(50):
            await asyncio.sleep(0.01)
        store.close()

    asyncio.run(main())
    assert order == list(range(50))
    store, rec = _reopen(tmp_path)
    store.close()
    assert [m[4] for m in rec.queues[0].messages] == [b"%d" % i for i in range(50)]


def test_writes_counter_counts_stored_messages_only(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)

    def work(s: DiskStore) -> None:
        qid = s.queue_declared("/", "q", False, {})
        assert s.writes == 0
        s.enqueued(qid, _message(b"a"))
        s.delivered(qid, 1)
        s.removed(qid, 1)
        assert s.writes == 1

    _run(store, work)


def _filled(tmp_path: Path, count: int = 5) -> None:
    store, _ = _reopen(tmp_path)

    async def main() -> None:
        store.start(asyncio.get_running_loop())
        qid = store.queue_declared("/", "q", False, {})
        for i in range(count):
            store.enqueued(qid, _message(b"m%d" % i))
            for _ in range(3):
                await asyncio.sleep(0.01)  # one batch per message
        store.close()

    asyncio.run(main())


def test_torn_tail_is_truncated_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _filled(tmp_path)
    segment = tmp_path / "msgs" / "00000001.seg"
    good = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(b"\xa7\x4c\x00\x10\x00\x00garbage-of-a-torn-write")
    with caplog.at_level(logging.WARNING, logger="leveret.store"):
        store, rec = _reopen(tmp_path)
        store.close()
    assert [m[4] for m in rec.queues[0].messages] == [b"m%d" % i for i in range(5)]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "torn tail" in lines[0]
    assert f"offset {good}" in lines[0]
    assert segment.stat().st_size == good
    # The next boot finds a clean file and says nothing.
    caplog.clear()
    store, rec = _reopen(tmp_path)
    store.close()
    assert not caplog.records


def test_a_record_cut_in_half_is_a_torn_tail(tmp_path: Path) -> None:
    _filled(tmp_path)
    segment = tmp_path / "msgs" / "00000001.seg"
    data = segment.read_bytes()
    segment.write_bytes(data[:-15])  # the last batch loses its end
    store, rec = _reopen(tmp_path)
    store.close()
    assert [m[4] for m in rec.queues[0].messages] == [b"m%d" % i for i in range(4)]


def test_corruption_in_the_middle_is_an_error(tmp_path: Path) -> None:
    _filled(tmp_path)
    segment = tmp_path / "msgs" / "00000001.seg"
    data = bytearray(segment.read_bytes())
    index = data.index(b"m1")
    data[index] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt, match=r"00000001\.seg is damaged at offset \d+"):
        DiskStore(tmp_path).open()
    assert segment.read_bytes() == bytes(data)  # never truncated


def test_damaged_definitions_log_is_an_error(tmp_path: Path) -> None:
    _filled(tmp_path)
    defs = tmp_path / "defs.log"
    data = bytearray(defs.read_bytes())
    data[12] ^= 0xFF
    defs.write_bytes(bytes(data) + bytes(_more_defs()))
    with pytest.raises(StoreCorrupt, match=r"defs\.log"):
        DiskStore(tmp_path).open()


def _more_defs() -> bytes:
    from leveret.store.records import COMMIT, frame

    return (frame(b'{"op": "seq", "qid": 1}') + frame(COMMIT)) * 2


def test_old_segments_are_deleted_when_nothing_refers_to_them(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, segment_bytes=4096)
    store.open()
    sids: list[int] = []

    async def main() -> None:
        store.start(asyncio.get_running_loop())
        qid = store.queue_declared("/", "q", False, {})
        for i in range(40):
            sids.append(store.enqueued(qid, _message(b"%04d" % i + b"x" * 1000)))
            await asyncio.sleep(0.005)
        for sid in sids[:30]:
            store.removed(qid, sid)
        for _ in range(5):
            await asyncio.sleep(0)
        for i in range(10):  # more batches, so that the removals are written and GC runs
            sids.append(store.enqueued(qid, _message(b"more%d" % i)))
            await asyncio.sleep(0.005)
        for _ in range(10):
            await asyncio.sleep(0.01)
        store.close()

    asyncio.run(main())
    segments = sorted(p.name for p in (tmp_path / "msgs").iterdir())
    assert "00000001.seg" not in segments
    assert len(segments) < 6
    store, rec = _reopen(tmp_path, segment_bytes=4096)
    store.close()
    bodies = [m[4][:4] for m in rec.queues[0].messages]
    assert bodies == [b"%04d" % i for i in range(30, 40)] + [b"more" for _ in range(10)]


def test_one_long_lived_message_pins_only_its_own_segment(tmp_path: Path) -> None:
    store = DiskStore(tmp_path, segment_bytes=4096)
    store.open()
    sids: list[int] = []

    async def main() -> None:
        store.start(asyncio.get_running_loop())
        qid = store.queue_declared("/", "q", False, {})
        keep = store.enqueued(qid, _message(b"keeper"))
        for i in range(60):
            sid = store.enqueued(qid, _message(b"%04d" % i + b"x" * 1000))
            sids.append(sid)
            await asyncio.sleep(0.005)
            if i >= 5:  # consumed a few messages behind: acks land in later segments
                store.delivered(qid, sids[i - 5])
                store.removed(qid, sids[i - 5])
            if i == 20:  # the keeper was delivered, not acked: a D record in a middle segment
                store.delivered(qid, keep)
        for sid in sids[55:]:
            store.removed(qid, sid)
        for i in range(10):  # more batches, so that the removals are written and GC runs
            sids.append(store.enqueued(qid, _message(b"more%d" % i)))
            await asyncio.sleep(0.005)
        for _ in range(10):
            await asyncio.sleep(0.01)
        store.close()

    asyncio.run(main())
    assert store.segments_compacted >= 5
    segments = sorted(p.name for p in (tmp_path / "msgs").iterdir())
    assert "00000001.seg" in segments  # the keeper's
    assert len(segments) <= 3
    store, rec = _reopen(tmp_path, segment_bytes=4096)
    store.close()
    got = [(m[4][:6], m[5]) for m in rec.queues[0].messages]
    # The keeper is still delivered-before (its D record was carried forward); every
    # message acked in a deleted segment stays acked.
    assert got == [(b"keeper", True)] + [(b"more%d" % i, False) for i in range(10)]


def test_a_directory_is_used_by_one_broker_at_a_time(tmp_path: Path) -> None:
    first = DiskStore(tmp_path)
    first.open()
    with pytest.raises(StoreInUse, match="in use by another broker"):
        DiskStore(tmp_path).open()
    first.close()
    second = DiskStore(tmp_path)
    second.open()
    second.close()


def test_a_directory_in_another_format_is_refused(tmp_path: Path) -> None:
    store, _rec = _reopen(tmp_path)
    store.close()
    assert (tmp_path / "FORMAT").read_text().strip() == "leveret-store 2"
    (tmp_path / "FORMAT").write_text("leveret-store 1\n")
    with pytest.raises(StoreCorrupt, match="holds store format 'leveret-store 1'"):
        _reopen(tmp_path)
    (tmp_path / "FORMAT").unlink()
    with pytest.raises(StoreCorrupt, match="written by an older Leveret"):
        _reopen(tmp_path)
