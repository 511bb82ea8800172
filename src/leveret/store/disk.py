"""The embedded durable store: a definitions log and message segments under ``data_dir``.

Layout::

    data_dir/LOCK                  flock()ed while a broker uses the directory
    data_dir/FORMAT                the record format (a directory in another one is refused)
    data_dir/defs.log              definitions: durable exchanges, queues, bindings (JSON)
    data_dir/msgs/00000001.seg     message log segments, append-only, ~64 MiB each

Every file is a sequence of checksummed records (``records.py``), written in batches that
end with a commit record. Message records (binary):

- ``M`` qid mid time exchange routing-key properties body: a persistent message entered
  durable queue ``qid`` at ``time`` (wall clock, ms); ``mid`` is its store id.
- ``N`` qid mid time exchange routing-key format properties body: the same for a message
  of another wire format than 0-9-1's (``Message.format``, one octet; an AMQP 1.0 message
  keeps its sections as they came).
- ``E`` qid mid: the same message also entered another durable queue (the body is
  written once).
- ``D`` (qid, mid)...: first deliveries (they come back with redelivered=true).
- ``A`` (qid, mid)...: the message left the queue (ack, reject, expiry, purge, ...).
- ``X`` mid key: the effects of a logged distributed-transaction commit are in this batch
  (``key`` names the branch, ``Journal.dtx_committed``); the marker holds its segment like
  a message until ``A`` (0, mid) drops it, once the dtx log recorded the branch finished.
  Read back into ``Recovered.dtx_markers``.

Group commit: the loop thread only appends records to an in-memory batch. Once per loop
turn (``call_soon``) the batch goes to ONE writer thread, which writes it, fdatasyncs and
then runs the batch's callbacks on the loop (publisher confirms). While the writer is busy
the next batch grows, so however many publishes arrive they share one sync per batch.

Space: a segment is deleted once none of the messages written to it is still in a queue.
The oldest such segment simply goes (removal records in later segments only ever refer to
older messages, so deleting in order never brings a message back). An emptied segment behind
an older one still in use goes too, after the writer copied its delivery and removal records
about messages of the older segments into the next batch (one long-lived message pins only
its own segment). ``defs.log`` is compacted at every boot.

Write failures (disk full, EIO): the writer truncates the files back to the end of the last
synced batch (a torn record never sits before later good ones), every confirm waiting on the
batch runs with ``ok`` False (the session sends basic.nack), and the store is *failing*: the
message records of the failed batch and of everything enqueued meanwhile are dropped (those
publishes are nacked at once), while definitions, deliveries and removals are kept and
written again. Every ``retry_seconds`` a retry batch (at least a commit record) is written;
the first one that syncs ends the failing state.

Test hooks (read when the store is created; for tests only): ``LEVERET_TEST_FAIL_WRITES=N``
makes the next N batches fail at their first write call, after writing half of it, with
ENOSPC; ``LEVERET_TEST_SEGMENT_BYTES=N`` starts a new segment every N bytes.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import json
import logging
import os
import queue as queue_mod
import struct
import threading
import time
from array import array

# At run time, not only for the type checker: compiled (``build_info``), the dataclasses
# below have their annotations' names looked up when the module loads.
from collections.abc import Callable, Iterable, Mapping  # noqa: TC003
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.store.records import (
    COMMIT,
    HEADER_SIZE,
    StoreCorrupt,
    frame,
    read_checked,
    record_head,
)
from leveret.store.segment_index import M_RECORD, N_RECORD, SegmentIndex, StoredMessages
from leveret.store.values import canonical, dump_table, load_table

if TYPE_CHECKING:
    import asyncio

    from leveret.model.message import Message

log = logging.getLogger("leveret.store")

SEGMENT_BYTES = 64 << 20
# The record format of this store; written to ``data_dir/FORMAT`` when a directory is new.
FORMAT = "leveret-store 2"
_M = M_RECORD
_N = N_RECORD
_E = struct.Struct("<cQQ")
_X = struct.Struct("<cQ")
# The queue id under which dtx markers are counted (no queue has it: ids start at 1).
_MARKERS = 0
_COMMIT_FRAME = frame(COMMIT)
RETRY_SECONDS = 1.0
FAIL_WRITES_ENV = "LEVERET_TEST_FAIL_WRITES"
SEGMENT_BYTES_ENV = "LEVERET_TEST_SEGMENT_BYTES"


class StoreInUse(Exception):
    """Another broker holds the data directory."""


@dataclass
class RecoveredQueue:
    vhost: str
    name: str
    qid: int
    auto_delete: bool
    arguments: dict[str, object]
    messages: Iterable[tuple[int, str, str, bytes, bytes, bool, float, int]] = ()


@dataclass
class Recovered:
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    queues: list[RecoveredQueue] = field(default_factory=list)
    bindings: list[dict[str, Any]] = field(default_factory=list)
    messages: int = 0
    seconds: float = 0.0
    # dtx markers still held (``X`` records): the branch's key -> the marker's id.
    dtx_markers: dict[bytes, int] = field(default_factory=dict)


class _Defs:
    """The definitions log replayed into current state."""

    def __init__(self) -> None:
        self.exchanges: dict[tuple[str, str], dict[str, Any]] = {}
        self.queues: dict[tuple[str, str], dict[str, Any]] = {}
        self.bindings: dict[str, dict[str, Any]] = {}
        self.next_qid = 1

    @staticmethod
    def binding_key(rec: Mapping[str, Any]) -> str:
        return canonical([rec["v"], rec["s"], rec["q"], rec["d"], rec["k"], rec["a"]])

    def apply(self, rec: dict[str, Any]) -> None:
        op = rec["op"]
        if op == "x+":
            self.exchanges[(rec["v"], rec["n"])] = rec
        elif op == "x-":
            vhost, name = rec["v"], rec["n"]
            self.exchanges.pop((vhost, name), None)
            self.bindings = {
                k: b
                for k, b in self.bindings.items()
                if not (b["v"] == vhost and (b["s"] == name or (not b["q"] and b["d"] == name)))
            }
        elif op == "q+":
            self.queues[(rec["v"], rec["n"])] = rec
            self.next_qid = max(self.next_qid, rec["id"] + 1)
        elif op == "q-":
            vhost, name = rec["v"], rec["n"]
            current = self.queues.get((vhost, name))
            if current is not None and current["id"] == rec["id"]:
                del self.queues[(vhost, name)]
            self.bindings = {
                k: b
                for k, b in self.bindings.items()
                if not (b["v"] == vhost and b["q"] and b["d"] == name)
            }
        elif op == "b+":
            self.bindings[self.binding_key(rec)] = rec
        elif op == "b-":
            self.bindings.pop(self.binding_key(rec), None)
        elif op == "seq":
            self.next_qid = max(self.next_qid, rec["qid"])
        else:
            raise ValueError(f"unknown definition record {op!r}")

    def snapshot(self) -> list[dict[str, Any]]:
        return [
            {"op": "seq", "qid": self.next_qid},
            *self.exchanges.values(),
            *self.queues.values(),
            *self.bindings.values(),
        ]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _records_about(payloads: list[memoryview], older: list[tuple[int, int]]) -> list[bytes] | None:
    """The delivery and removal records of a segment about messages whose ids fall in
    ``older`` ([first, end) ranges), rebuilt as new records; None when the segment also
    adds such a message to a queue (``E``), which copying could not replay in order."""
    if not older:
        return []
    lo = older[0][0]
    hi = older[-1][1]

    def wanted(mid: int) -> bool:
        return lo <= mid < hi and any(first <= mid < end for first, end in older)

    out: list[bytes] = []
    for payload in payloads:
        kind = payload[0]
        if kind == 69:  # E
            if wanted(_E.unpack_from(payload)[2]):
                return None
        elif kind in (68, 65):  # D, A
            pairs = array("Q")
            pairs.frombytes(payload[1:])
            keep = array("Q")
            for i in range(0, len(pairs), 2):
                if wanted(pairs[i + 1]):
                    keep.append(pairs[i])
                    keep.append(pairs[i + 1])
            if keep:
                out.append(bytes(payload[:1]) + keep.tobytes())
    return out


class DiskStore:
    """The model's ``Journal`` on disk; see the module docstring."""

    def __init__(self, path: str | Path, *, segment_bytes: int = 0) -> None:
        self.path = Path(path)
        # Test hook: tiny segments, so that crash tests go through segment clean-up.
        self.segment_bytes = (
            segment_bytes or int(os.environ.get(SEGMENT_BYTES_ENV) or 0) or SEGMENT_BYTES
        )
        self.writes = 0
        # False while the store is failing, and while the callbacks of a failed batch run.
        self.ok = True
        self.failed: BaseException | None = None
        self.retry_seconds = RETRY_SECONDS
        self.fail_writes = int(os.environ.get(FAIL_WRITES_ENV) or 0)  # test hook
        self._retry_handle: asyncio.TimerHandle | None = None
        # Message ids whose records were dropped by a failure: [lo, hi) ranges.
        self._lost: list[tuple[int, int]] = []
        self._lost_from = 0
        # What the batch in the writer holds that a failure must give back.
        self._inflight_defs: list[bytes] = []
        self._inflight_delivered = array("Q")
        self._inflight_removed = array("Q")
        self._inflight_deletes: list[int] = []
        self._inflight_first = 1
        self._deletes: list[int] = []
        # Emptied segments that are not the oldest: deleted once the records in them that
        # older segments still need were copied forward (see ``_carry_forward``).
        self._carries: list[tuple[int, list[tuple[int, int]]]] = []
        self._inflight_carries: list[tuple[int, list[tuple[int, int]]]] = []
        self._emptied = False
        self.segments_compacted = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock_fd = -1
        # The batch being built on the loop thread.
        self._defs: list[bytes] = []
        self._msgs: list[bytes] = []
        self._delivered = array("Q")
        self._removed = array("Q")
        self._callbacks: list[Callable[[], None]] = []
        self._batch_first = 1  # the first message id of the open batch
        # Wall-clock milliseconds stored with each message (enqueue time, for TTLs across a
        # restart); read once per loop turn, not per message. The loop's own wall clock if
        # it has one (the test clock's, which advances: leveret.testing.clock).
        self._wall: Callable[[], float] = time.time
        self._now_ms = int(time.time() * 1000)
        self._batch_refs = 0  # queue references to messages of the open batch
        self._busy = False
        self._scheduled = False
        self._next_mid = 1
        self._next_qid = 1
        # Segments: numbers in order, the first message id each may hold, live references.
        self._segments: list[int] = []
        self._seg_first: list[int] = []
        self._live: dict[int, int] = {}
        self._seg_bytes = 0
        # The writer thread (not ``_thread``: compiled, mypyc's C name for that attribute
        # would be ``__thread``, a keyword of C).
        self._jobs: queue_mod.SimpleQueue[tuple[Any, ...] | None] = queue_mod.SimpleQueue()
        self._writer_thread: threading.Thread | None = None
        self._defs_fd = -1
        self._seg_fd = -1
        # Writer thread only: where the files end after their last synced batch.
        self._defs_good = 0
        self._seg_good = 0
        self._dirty = False
        self._want_segment: int | None = None

    # -- boot ----------------------------------------------------------------------------

    def open(self) -> Recovered:
        """Lock the directory, read everything back, compact the definitions."""
        started = time.monotonic()
        msgs_dir = self.path / "msgs"
        msgs_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.path / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise StoreInUse(f"data directory {self.path} is in use by another broker") from None
        try:
            self._check_format(msgs_dir)
            defs = self._recover_defs()
            recovered = self._recover_messages(defs)
            self._write_snapshot(defs)
        except BaseException:
            self.close()  # release the directory: the caller reports the error
            raise
        self._next_qid = defs.next_qid
        recovered.seconds = time.monotonic() - started
        return recovered

    def _check_format(self, msgs_dir: Path) -> None:
        """A directory written in another record format is refused, never misread."""
        marker = self.path / "FORMAT"
        if marker.exists():
            found = marker.read_text().strip()
            if found != FORMAT:
                raise StoreCorrupt(
                    f"data directory {self.path} holds store format '{found}'; this version "
                    f"reads '{FORMAT}' only. Drain it with the version that wrote it, or "
                    "start with an empty directory."
                )
            return
        if (self.path / "defs.log").exists() or any(msgs_dir.iterdir()):
            raise StoreCorrupt(
                f"data directory {self.path} was written by an older Leveret (no FORMAT "
                f"file); this version reads '{FORMAT}' only. Start with an empty directory."
            )
        tmp = self.path / "FORMAT.tmp"
        tmp.write_text(FORMAT + "\n")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, marker)
        _fsync_dir(self.path)

    def _recover_defs(self) -> _Defs:
        defs = _Defs()
        path = self.path / "defs.log"
        if not path.exists():
            return defs
        payloads = read_checked(path, last=True).payloads
        for payload in payloads:
            if payload == COMMIT:
                continue
            try:
                rec = json.loads(bytes(payload))
                defs.apply(rec)
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreCorrupt(f"store file {path}: unreadable definition: {exc}") from None
        return defs

    def _write_snapshot(self, defs: _Defs) -> None:
        path = self.path / "defs.log"
        tmp = self.path / "defs.log.tmp"
        data = b"".join(frame(json.dumps(rec).encode()) for rec in defs.snapshot())
        with open(tmp, "wb") as f:
            f.write(data + _COMMIT_FRAME)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.path)

    def _recover_messages(self, defs: _Defs) -> Recovered:
        msgs_dir = self.path / "msgs"
        names = sorted(p for p in msgs_dir.iterdir() if p.suffix == ".seg")
        # Per segment: the ids of its message records, where their payloads are, how long.
        index = SegmentIndex(msgs_dir, self._segment_of)
        refs: dict[int, dict[int, bool]] = {_MARKERS: {}}
        markers: dict[int, bytes] = {}
        max_mid = 0
        m_unpack, e_unpack = _M.unpack_from, _E.unpack_from
        for number, path in enumerate(names):
            segno = int(path.stem)
            self._segments.append(segno)
            self._seg_first.append(max_mid + 1)
            self._live[segno] = 0
            mids, starts, lengths = index.add_segment(segno)
            payloads = read_checked(path, last=number == len(names) - 1).payloads
            end = 0
            for payload in payloads:
                start = end + HEADER_SIZE
                end = start + len(payload)
                kind = payload[0]
                if kind in (77, 78):  # M, or N (another wire format): the same prefix
                    _k, qid, mid, _t, _e, _r, _p = m_unpack(payload)
                    mids.append(mid)
                    starts.append(start)
                    lengths.append(end - start)
                    held = refs.get(qid)
                    if held is None:
                        held = refs[qid] = {}
                    held[mid] = False
                    if mid > max_mid:
                        max_mid = mid
                elif kind == 69:  # E
                    _k, qid, mid = e_unpack(payload)
                    held = refs.get(qid)
                    if held is None:
                        held = refs[qid] = {}
                    held[mid] = False
                elif kind == 88:  # X
                    _k, mid = _X.unpack_from(payload)
                    markers[mid] = bytes(payload[_X.size :])
                    refs[_MARKERS][mid] = False
                    if mid > max_mid:
                        max_mid = mid
                elif kind in (68, 65):  # D, A
                    pairs = array("Q")
                    pairs.frombytes(payload[1:])
                    delivered = kind == 68
                    for i in range(0, len(pairs), 2):
                        held = refs.get(pairs[i])
                        if held is None or pairs[i + 1] not in held:
                            continue
                        if delivered:
                            held[pairs[i + 1]] = True
                        else:
                            del held[pairs[i + 1]]
                elif payload != COMMIT:
                    raise StoreCorrupt(
                        f"store file {path}: unknown record type {bytes(payload[:1])!r}"
                    )
            del payloads
        self._next_mid = self._batch_first = max_mid + 1
        if not self._segments:
            self._segments.append(1)
            self._seg_first.append(self._next_mid)
            self._live[1] = 0
        recovered = Recovered()
        for mid in refs[_MARKERS]:
            self._live[self._segment_of(mid)] += 1
            recovered.dtx_markers[markers[mid]] = mid
        recovered.exchanges = [
            {**rec, "a": load_table(rec["a"])} for rec in defs.exchanges.values()
        ]
        recovered.bindings = [{**rec, "a": load_table(rec["a"])} for rec in defs.bindings.values()]
        segment_of = self._segment_of
        for rec in defs.queues.values():
            held = refs.get(rec["id"], {})
            for mid in held:
                if not index.has(mid):
                    raise StoreCorrupt(
                        f"store: queue '{rec['n']}' refers to message {mid}, which is missing"
                    )
                self._live[segment_of(mid)] += 1
            queue = RecoveredQueue(rec["v"], rec["n"], rec["id"], rec["ad"], load_table(rec["a"]))
            queue.messages = StoredMessages(held, index)
            recovered.messages += len(held)
            recovered.queues.append(queue)
        # Open the last segment for appending, and drop old ones nothing refers to.
        last = self._segments[-1]
        self._seg_fd = os.open(
            msgs_dir / f"{last:08d}.seg", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        self._seg_bytes = self._seg_good = os.fstat(self._seg_fd).st_size
        for segno in self._collect():
            os.unlink(msgs_dir / f"{segno:08d}.seg")
        return recovered

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the writer thread; from now on the loop thread may call the journal."""
        self._loop = loop
        self._wall = getattr(loop, "wall_clock", time.time)
        self._now_ms = int(self._wall() * 1000)
        self._defs_fd = os.open(self.path / "defs.log", os.O_WRONLY | os.O_APPEND)
        self._defs_good = os.fstat(self._defs_fd).st_size
        self._writer_thread = threading.Thread(
            target=self._writer, name="leveret-store", daemon=True
        )
        self._writer_thread.start()

    def close(self) -> None:
        """Write what is pending, stop the writer, release the directory."""
        if self._writer_thread is not None:
            self._busy = False
            if self._retry_handle is not None:
                self._retry_handle.cancel()
                self._retry_handle = None
            self._submit(force=self.failed is not None)  # failing: one last attempt
            self._jobs.put(None)
            self._writer_thread.join()
            self._writer_thread = None
        for fd in (self._defs_fd, self._seg_fd):
            if fd >= 0:
                os.close(fd)
        self._defs_fd = self._seg_fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- segments ------------------------------------------------------------------------

    def _segment_of(self, mid: int) -> int:
        return self._segments[bisect.bisect_right(self._seg_first, mid) - 1]

    def _collect(self) -> list[int]:
        """Oldest segments that no queued message refers to (never the current one)."""
        gone = []
        while len(self._segments) > 1 and self._live[self._segments[0]] <= 0:
            segno = self._segments.pop(0)
            self._seg_first.pop(0)
            del self._live[segno]
            gone.append(segno)
        return gone

    def _collect_middle(self) -> list[tuple[int, list[tuple[int, int]]]]:
        """Emptied segments behind an older one that is still in use (one long-lived message
        must not keep every later segment on disk).

        Such a segment cannot simply go: its removal and delivery records may be about
        messages of the older segments, and without them those messages would come back
        at the next boot. So each goes with the id ranges of the older segments still
        kept; the writer copies the records about those ranges into the batch it writes,
        and deletes the segment once that batch is synced."""
        self._emptied = False
        found = []
        segments, firsts, live = self._segments, self._seg_first, self._live
        i = 1
        while i < len(segments) - 1:
            segno = segments[i]
            if live[segno] > 0:
                i += 1
                continue
            older = [(firsts[j], firsts[j + 1]) for j in range(i)]
            del segments[i], firsts[i], live[segno]
            found.append((segno, older))
        return found

    # -- the journal (loop thread) -------------------------------------------------------

    def _kick(self) -> None:
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._submit)

    def _def(self, rec: dict[str, Any]) -> None:
        self._defs.append(frame(json.dumps(rec).encode()))
        self._kick()

    def exchange_declared(
        self,
        vhost: str,
        name: str,
        type_name: str,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, object],
    ) -> None:
        self._def(
            {
                "op": "x+",
                "v": vhost,
                "n": name,
                "t": type_name,
                "ad": auto_delete,
                "i": internal,
                "a": dump_table(arguments),
            }
        )

    def exchange_deleted(self, vhost: str, name: str) -> None:
        self._def({"op": "x-", "v": vhost, "n": name})

    def queue_declared(
        self, vhost: str, name: str, auto_delete: bool, arguments: Mapping[str, object]
    ) -> int:
        qid = self._next_qid
        self._next_qid += 1
        self._def(
            {"op": "q+", "v": vhost, "n": name, "id": qid, "ad": auto_delete,
             "a": dump_table(arguments)}
        )  # fmt: skip
        return qid

    def queue_deleted(self, vhost: str, name: str, store_id: int) -> None:
        self._def({"op": "q-", "v": vhost, "n": name, "id": store_id})

    def binding_changed(
        self,
        added: bool,
        vhost: str,
        source: str,
        to_queue: bool,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> None:
        self._def(
            {
                "op": "b+" if added else "b-",
                "v": vhost,
                "s": source,
                "q": to_queue,
                "d": destination,
                "k": routing_key,
                "a": dump_table(arguments),
            }
        )

    def _is_lost(self, mid: int) -> bool:
        return any(lo <= mid < hi for lo, hi in self._lost) or (
            not self.ok and mid >= self._lost_from
        )

    def enqueued(self, queue_id: int, message: Message, at_ms: int = 0) -> int:
        """``at_ms``: the time to store instead of the enqueue time (a delayed message's
        due time); such a message always gets its own record (never ``E``)."""
        mid = 0 if at_ms else message.store_id
        if mid and self._lost and self._is_lost(mid):
            mid = 0  # its M record was dropped: write the message again, under a new id
        if not self.ok:
            # Failing: nothing is written; the session sees ``ok`` False and nacks at once.
            if mid:
                self._add_ref(mid)
            else:
                mid = self._next_mid
                self._next_mid = mid + 1
                message.store_id = mid
                self._batch_refs += 1
            self.writes += 1
            return mid
        if mid:
            self._msgs.append(_E.pack(b"E", queue_id, mid))
            self._add_ref(mid)
        else:
            if not self._scheduled:
                # The turn's first write: the clock is read once per turn. (Read at the
                # last submit instead, an idle broker's next message would be stamped with
                # a time long past, and its TTL would run out early after a restart.)
                self._now_ms = int(self._wall() * 1000)
            mid = self._next_mid
            self._next_mid = mid + 1
            message.store_id = mid
            exchange = message.exchange.encode()
            routing_key = message.routing_key.encode()
            props = message.raw_properties
            fmt = message.format
            self._msgs.append(
                (
                    _M.pack(
                        b"M",
                        queue_id,
                        mid,
                        at_ms or self._now_ms,
                        len(exchange),
                        len(routing_key),
                        len(props),
                    )
                    if not fmt
                    else _N.pack(
                        b"N",
                        queue_id,
                        mid,
                        at_ms or self._now_ms,
                        len(exchange),
                        len(routing_key),
                        len(props),
                        fmt,
                    )
                )
                + exchange
                + routing_key
                + props
                + message.body
            )
            self._batch_refs += 1
        self.writes += 1
        if not self._scheduled:  # a call less for all but a turn's first
            self._kick()
        return mid

    def _add_ref(self, mid: int) -> None:
        if mid >= self._batch_first:
            self._batch_refs += 1
        else:
            self._live[self._segment_of(mid)] += 1

    def delivered(self, queue_id: int, sid: int) -> None:
        self._delivered.append(queue_id)
        self._delivered.append(sid)
        if not self._scheduled:  # a call less for all but a turn's first
            self._kick()

    def removed(self, queue_id: int, sid: int) -> None:
        self._removed.append(queue_id)
        self._removed.append(sid)
        if sid >= self._batch_first:
            self._batch_refs -= 1
        else:
            segno = self._segment_of(sid)
            live = self._live[segno] - 1
            self._live[segno] = live
            if live <= 0:
                self._emptied = True
        if not self._scheduled:  # a call less for all but a turn's first
            self._kick()

    def dtx_committed(self, key: bytes) -> int:
        mid = self._next_mid
        self._next_mid = mid + 1
        self._batch_refs += 1
        if self.ok:  # failing: dropped with the effects it marks
            self._msgs.append(_X.pack(b"X", mid) + key)
            self._kick()
        return mid

    def dtx_forgotten(self, marker: int) -> None:
        self.removed(_MARKERS, marker)

    def after_commit(self, callback: Callable[[], None]) -> None:
        if not self.ok:
            callback()  # failing: nothing waits (``ok`` is False: the confirm is a nack)
            return
        self._callbacks.append(callback)
        self._kick()

    def _submit(self, *, force: bool = False) -> None:
        """Hand the open batch to the writer, unless it is still syncing the previous one.

        While failing only ``force`` (the retry timer, close) submits; it always writes."""
        self._scheduled = False
        if self._busy or (self.failed is not None and not force):
            return
        # What goes to the writer (kept to be given back if the write fails).
        self._inflight_delivered, self._inflight_removed = array("Q"), array("Q")
        msgs = self._msgs
        if self._delivered:
            msgs.append(b"D" + self._delivered.tobytes())
            self._inflight_delivered, self._delivered = self._delivered, array("Q")
        if self._removed:
            msgs.append(b"A" + self._removed.tobytes())
            self._inflight_removed, self._removed = self._removed, array("Q")
        defs, callbacks = self._defs, self._callbacks
        if not (msgs or defs or force):
            self._callbacks = []
            for callback in callbacks:
                callback()
            return
        self._msgs, self._defs, self._callbacks = [], [], []
        # Each record's head and payload, and the commit record, joined once: a persistent
        # message's record was copied whole by ``frame``, by the join and by the commit
        # record's ``+`` (0.08 µs of a 1 KiB message's, docs/benchmarks.md).
        framed: list[bytes] = []
        for m in msgs:
            framed.append(record_head(m))
            framed.append(m)
        new_segment = None
        if self._seg_bytes >= self.segment_bytes:
            new_segment = self._segments[-1] + 1
            self._segments.append(new_segment)
            self._seg_first.append(self._batch_first)
            self._live[new_segment] = 0
            self._seg_bytes = 0
        if self._batch_refs:
            self._live[self._segments[-1]] += self._batch_refs
        self._batch_refs = 0
        self._inflight_first = self._batch_first
        self._batch_first = self._next_mid
        deletes = self._deletes + self._collect()
        self._deletes = []
        carries = self._carries
        if self._emptied:
            carries += self._collect_middle()
        self._carries = []
        seg = b""
        if msgs or force or carries:
            framed.append(_COMMIT_FRAME)
            seg = b"".join(framed)
            self._seg_bytes += len(seg) - len(_COMMIT_FRAME)
        self._inflight_defs, self._inflight_deletes = defs, deletes
        self._inflight_carries = carries
        self._busy = True
        self._jobs.put((b"".join(defs), new_segment, seg, deletes, callbacks, carries))

    def _committed(
        self,
        callbacks: list[Callable[[], None]],
        error: BaseException | None,
        defs_done: bool = True,
    ) -> None:
        self._busy = False
        if error is not None:
            self._failed_batch(callbacks, error, defs_done)
            return
        if self.failed is not None:
            log.warning(
                "store writes succeed again (they failed with: %s); persistent messages are "
                "confirmed again",
                self.failed,
            )
            self._lost.append((self._lost_from, self._next_mid))
            self.failed = None
            self.ok = True
        for callback in callbacks:
            callback()
        if self._msgs or self._defs or self._delivered or self._removed or self._callbacks:
            self._submit()

    def _failed_batch(
        self, callbacks: list[Callable[[], None]], error: BaseException, defs_done: bool
    ) -> None:
        """Give back what must be written again, nack what waited, retry later."""
        if not defs_done:
            self._defs[:0] = self._inflight_defs
        self._inflight_delivered.extend(self._delivered)
        self._delivered = self._inflight_delivered
        self._inflight_removed.extend(self._removed)
        self._removed = self._inflight_removed
        self._deletes[:0] = self._inflight_deletes
        self._carries[:0] = self._inflight_carries
        self._inflight_defs, self._inflight_deletes, self._inflight_carries = [], [], []
        if self.failed is None:
            self.failed = error
            self.ok = False
            self._lost_from = self._inflight_first
            log.error(
                "store write failed: %s; persistent messages are nacked until a write "
                "succeeds (retrying every %g s)",
                error,
                self.retry_seconds,
            )
            # The open batch's messages are dropped too: their confirms become nacks.
            self._msgs = []
            callbacks = callbacks + self._callbacks
            self._callbacks = []
        for callback in callbacks:
            callback()
        if self._loop is not None and self._retry_handle is None:
            self._retry_handle = self._loop.call_later(self.retry_seconds, self._retry)

    def _retry(self) -> None:
        self._retry_handle = None
        if self.failed is not None and not self._busy:
            self._submit(force=True)

    # -- the writer thread ---------------------------------------------------------------

    def _writer(self) -> None:
        msgs_dir = self.path / "msgs"
        while True:
            job = self._jobs.get()
            if job is None:
                return
            defs, new_segment, payload, deletes, callbacks, carries = job
            carried: list[int] = []
            if carries:
                payload, carried = self._carry_forward(payload, carries)
            error: BaseException | None = None
            defs_done = False
            inject = self.fail_writes > 0
            if inject:
                self.fail_writes -= 1
            try:
                if self._dirty:
                    self._rewind()
                if defs:
                    data = defs + _COMMIT_FRAME
                    self._append(self._defs_fd, data, inject)
                    inject = False
                    os.fdatasync(self._defs_fd)
                    self._defs_good += len(data)
                defs_done = True
                if new_segment is not None:
                    self._want_segment = new_segment
                if self._want_segment is not None:
                    fd = os.open(
                        msgs_dir / f"{self._want_segment:08d}.seg",
                        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                        0o644,
                    )
                    try:
                        _fsync_dir(msgs_dir)
                    except OSError:
                        os.close(fd)
                        raise
                    os.close(self._seg_fd)  # already synced after its last batch
                    self._seg_fd = fd
                    self._seg_good = os.fstat(fd).st_size
                    self._want_segment = None
                if payload:
                    self._append(self._seg_fd, payload, inject)
                    os.fdatasync(self._seg_fd)
                    self._seg_good += len(payload)
            except OSError as exc:
                error = exc
                self._dirty = True
                try:
                    self._rewind()
                except OSError:
                    pass  # again before the next write
            if error is None:
                self.segments_compacted += len(carried)
                for segno in deletes + carried:
                    try:
                        os.unlink(msgs_dir / f"{segno:08d}.seg")
                    except OSError as exc:
                        log.warning("store: cannot delete segment %d: %s", segno, exc)
            loop = self._loop
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self._committed, callbacks, error, defs_done)
                except RuntimeError:
                    pass  # the loop closed meanwhile (shutdown)

    def _carry_forward(
        self, payload: bytes, carries: list[tuple[int, list[tuple[int, int]]]]
    ) -> tuple[bytes, list[int]]:
        """Writer thread: copy the records of emptied segments that older segments still
        need in front of the batch's commit record; returns the segments that may go."""
        msgs_dir = self.path / "msgs"
        extra: list[bytes] = []
        done: list[int] = []
        for segno, older in carries:
            path = msgs_dir / f"{segno:08d}.seg"
            try:
                payloads = read_checked(path, last=False).payloads
                records = _records_about(payloads, older)
            except (OSError, StoreCorrupt, ValueError) as exc:
                # Keep the file: the next boot reads it as it is (nothing is lost).
                log.warning("store: segment %d not compacted: %s", segno, exc)
                continue
            if records is None:
                log.info("store: segment %d kept: it adds old messages to queues", segno)
                continue
            extra += records
            done.append(segno)
        if not extra:
            return payload, done
        body = payload[: -len(_COMMIT_FRAME)] if payload else b""
        return body + b"".join(frame(r) for r in extra) + _COMMIT_FRAME, done

    def _append(self, fd: int, data: bytes, inject: bool) -> None:
        if inject:  # the test hook: a short write, then the disk is full
            os.write(fd, data[: len(data) // 2])
            raise OSError(
                errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (injected by {FAIL_WRITES_ENV})"
            )
        _write_all(fd, data)

    def _rewind(self) -> None:
        """Cut both files back to the end of their last synced batch (writer thread)."""
        os.ftruncate(self._defs_fd, self._defs_good)
        os.ftruncate(self._seg_fd, self._seg_good)
        self._dirty = False
