"""DiskStore when a write fails (disk full): nacks, a failing state, retries, nothing synced
damaged, removals and definitions written again. The fault is injected at the write call
(``DiskStore.fail_writes``, the ``LEVERET_TEST_FAIL_WRITES`` hook)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from typing import TYPE_CHECKING, Any

from leveret.model.broker import Broker
from leveret.model.message import HINT_PERSISTENT, Message
from leveret.server.amqp091.session import Session
from leveret.store.disk import FAIL_WRITES_ENV, DiskStore
from leveret.store.records import scan
from leveret.testing import RecordingSink, make_message

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    import pytest


def _decode(raw: bytes) -> Any:
    raise AssertionError("not needed")


def _message(body: bytes) -> Message:
    return Message("ex", "rk", b"\x10\x00\x02", body, _decode, hints=HINT_PERSISTENT)


def _reopen(path: Path) -> tuple[DiskStore, Any]:
    store = DiskStore(path)
    return store, store.open()


def _bodies(path: Path) -> dict[str, list[bytes]]:
    store, rec = _reopen(path)
    store.close()
    return {q.name: [m[4] for m in q.messages] for q in rec.queues}


async def _settle(turns: int = 10) -> None:
    for _ in range(turns):
        await asyncio.sleep(0.01)


async def _until(predicate: Callable[[], bool]) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def _run(store: DiskStore, body: Callable[[DiskStore], Awaitable[None]]) -> None:
    async def main() -> None:
        store.start(asyncio.get_running_loop())
        try:
            await body(store)
        finally:
            store.close()

    asyncio.run(main())


def _segment(path: Path) -> bytes:
    return (path / "msgs" / "00000001.seg").read_bytes()


def test_a_failed_batch_nacks_its_confirms_and_keeps_what_was_synced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = _reopen(tmp_path)
    store.retry_seconds = 0.05
    events: list[tuple[str, bool]] = []

    def confirm(name: str) -> Callable[[], None]:
        return lambda: events.append((name, store.ok))

    async def body(s: DiskStore) -> None:
        qid = s.queue_declared("/", "q", False, {})
        s.enqueued(qid, _message(b"good"))
        s.after_commit(confirm("good"))
        await _settle()
        assert events == [("good", True)]
        synced = len(_segment(tmp_path))
        s.fail_writes = 3  # this batch and two retries
        s.enqueued(qid, _message(b"bad1"))
        s.after_commit(confirm("bad1"))
        await asyncio.sleep(0)  # bad1 goes to the writer; bad2 waits in the next batch
        s.enqueued(qid, _message(b"bad2"))
        s.after_commit(confirm("bad2"))
        await _until(lambda: len(events) == 3)
        assert events[1:] == [("bad1", False), ("bad2", False)]
        assert not s.ok
        assert isinstance(s.failed, OSError)
        assert s.failed.errno == errno.ENOSPC
        # The half-written record was cut off: synced data ends the file.
        assert len(_segment(tmp_path)) == synced
        # Failing: a new persistent message is not written and its confirm does not wait.
        s.enqueued(qid, _message(b"while failing"))
        s.after_commit(confirm("while failing"))
        assert events[-1] == ("while failing", False)
        await _until(lambda: s.ok)
        assert s.fail_writes == 0
        s.enqueued(qid, _message(b"after"))
        s.after_commit(confirm("after"))
        await _until(lambda: events[-1] == ("after", True))

    with caplog.at_level(logging.INFO, logger="leveret.store"):
        _run(store, body)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("store write failed" in line for line in lines) == 1
    assert sum("store writes succeed again" in line for line in lines) == 1
    assert _bodies(tmp_path) == {"q": [b"good", b"after"]}
    caplog.clear()
    _bodies(tmp_path)
    assert not any("torn tail" in r.getMessage() for r in caplog.records)
    assert not scan(_segment(tmp_path)).damaged


def test_removals_and_definitions_that_failed_are_written_again(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    store.retry_seconds = 0.05

    async def body(s: DiskStore) -> None:
        qid = s.queue_declared("/", "q", False, {})
        mids = [s.enqueued(qid, _message(b"m%d" % i)) for i in range(3)]
        await _settle()
        s.fail_writes = 2
        s.removed(qid, mids[0])  # an ack
        s.delivered(qid, mids[1])
        s.queue_declared("/", "declared while failing", False, {})
        await _until(lambda: not s.ok)
        s.removed(qid, mids[2])
        await _until(lambda: s.ok)
        await _settle()

    _run(store, body)
    store, rec = _reopen(tmp_path)
    store.close()
    queues = {q.name: q.messages for q in rec.queues}
    assert set(queues) == {"q", "declared while failing"}
    assert [(m[4], m[5]) for m in queues["q"]] == [(b"m1", True)]
    # Written once each, however many attempts failed.
    payloads = [bytes(p) for p in scan(_segment(tmp_path)).payloads]
    assert sum(len(p) - 1 for p in payloads if p[:1] == b"A") == 2 * 16
    assert sum(len(p) - 1 for p in payloads if p[:1] == b"D") == 16


def test_a_failed_definitions_write_is_cut_back(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    store.retry_seconds = 0.05
    defs = tmp_path / "defs.log"

    async def body(s: DiskStore) -> None:
        size = defs.stat().st_size
        s.fail_writes = 1
        s.exchange_declared("/", "x", "direct", False, False, {})
        await _until(lambda: not s.ok)
        assert defs.stat().st_size == size
        await _until(lambda: s.ok)

    _run(store, body)
    assert not scan(defs.read_bytes()).damaged
    store, rec = _reopen(tmp_path)
    store.close()
    assert [e["n"] for e in rec.exchanges] == ["x"]


def test_a_message_whose_record_was_dropped_is_written_again_when_it_moves(
    tmp_path: Path,
) -> None:
    """Dead-lettering a message stored during the failure must not refer to a record that
    was never written (recovery would call that corruption)."""
    store, _ = _reopen(tmp_path)
    store.retry_seconds = 0.05

    async def body(s: DiskStore) -> None:
        q1 = s.queue_declared("/", "q1", False, {})
        q2 = s.queue_declared("/", "q2", False, {})
        await _settle()
        s.fail_writes = 1
        message = _message(b"dropped")
        first = s.enqueued(q1, message)
        await _until(lambda: not s.ok)
        await _until(lambda: s.ok)
        second = s.enqueued(q2, message)  # as dead-lettering does
        assert second != first
        await _settle()

    _run(store, body)
    assert _bodies(tmp_path) == {"q1": [], "q2": [b"dropped"]}


def test_the_hook_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAIL_WRITES_ENV, "2")
    store = DiskStore(tmp_path)
    assert store.fail_writes == 2


def test_sessions_nack_in_order_and_at_once_while_failing(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    store.retry_seconds = 0.05
    sink = RecordingSink()

    def persistent(body: bytes) -> Message:
        message = make_message(body, "durable")
        message.hints |= HINT_PERSISTENT
        return message

    def confirms() -> list[tuple[int, bool, bool]]:
        return [(e.delivery_tag, e.multiple, e.ack) for e in sink.take("confirm")]

    async def body(s: DiskStore) -> None:
        broker = Broker()
        broker.attach_journal(s)
        vhost = broker.vhosts["/"]
        owner = object()
        session = Session(vhost, owner, sink)
        vhost.declare_queue("durable", owner=owner, durable=True)
        vhost.declare_queue("transient", owner=owner)
        session.select_confirm()
        await _settle()
        s.fail_writes = 2
        session.publish("", "durable", persistent(b"1"))
        session.publish("", "transient", make_message(b"2", "transient"))
        session.flush_confirms()
        session.publish("", "transient", make_message(b"3", "transient"))
        session.flush_confirms()
        assert confirms() == []
        await _until(lambda: not s.ok)
        # Everything waiting on the failed batch is nacked, in order.
        assert confirms() == [(2, True, False), (3, False, False)]
        # Failing: a persistent publish is nacked at once, a transient one acked.
        session.publish("", "durable", persistent(b"4"))
        session.publish("", "transient", make_message(b"5", "transient"))
        session.flush_confirms()
        assert confirms() == [(4, False, False), (5, False, True)]
        # Consumers keep working: the queue still delivers what it holds.
        assert session.get("transient", no_ack=True) is not None
        await _until(lambda: s.ok)
        session.publish("", "durable", persistent(b"6"))
        session.flush_confirms()
        await _until(lambda: bool(sink.events))
        assert confirms() == [(6, False, True)]

    _run(store, body)
    assert os.path.exists(tmp_path / "msgs" / "00000001.seg")
    assert _bodies(tmp_path)["durable"] == [b"6"]
