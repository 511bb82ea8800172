"""The embedded durable store: a definitions log and message segments under ``data_dir``.

Layout::

    data_dir/LOCK                  flock()ed while a broker uses the directory
    data_dir/defs.log              definitions: durable exchanges, queues, bindings (JSON)
    data_dir/msgs/00000001.seg     message log segments, append-only, ~64 MiB each

Every file is a sequence of checksummed records (``records.py``), written in batches that
end with a commit record. Message records (binary):

- ``M`` qid mid exchange routing-key properties body: a persistent message entered durable
  queue ``qid``; ``mid`` is its store id. ``E`` qid mid: the same message also entered
  another durable queue (the body is written once).
- ``D`` (qid, mid)...: first deliveries (they come back with redelivered=true).
- ``A`` (qid, mid)...: the message left the queue (ack, reject, expiry, purge, ...).

Group commit: the loop thread only appends records to an in-memory batch. Once per loop
turn (``call_soon``) the batch goes to ONE writer thread, which writes it, fdatasyncs and
then runs the batch's callbacks on the loop (publisher confirms). While the writer is busy
the next batch grows, so however many publishes arrive they share one sync per batch.

Space: a segment is deleted when it is the oldest and none of the messages written to it is
still in a queue (removal records in later segments only ever refer to older messages, so
deleting in order never brings a message back). ``defs.log`` is compacted at every boot.
"""

from __future__ import annotations

import bisect
import fcntl
import json
import logging
import os
import queue as queue_mod
import struct
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.store.records import COMMIT, StoreCorrupt, frame, scan
from leveret.store.values import canonical, dump_table, load_table

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Mapping

    from leveret.model.message import Message

log = logging.getLogger("leveret.store")

SEGMENT_BYTES = 64 << 20
_M = struct.Struct("<cQQBBI")
_E = struct.Struct("<cQQ")
_COMMIT_FRAME = frame(COMMIT)


class StoreInUse(Exception):
    """Another broker holds the data directory."""


@dataclass
class RecoveredQueue:
    vhost: str
    name: str
    qid: int
    auto_delete: bool
    arguments: dict[str, object]
    # (mid, exchange, routing key, raw properties, body, delivered before)
    messages: list[tuple[int, str, str, bytes, bytes, bool]] = field(default_factory=list)


@dataclass
class Recovered:
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    queues: list[RecoveredQueue] = field(default_factory=list)
    bindings: list[dict[str, Any]] = field(default_factory=list)
    messages: int = 0
    seconds: float = 0.0


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


def _read_checked(path: Path, *, last: bool) -> tuple[bytes, list[memoryview]]:
    """A file's valid records; a torn tail of the last file is truncated (logged)."""
    data = path.read_bytes()
    result = scan(data)
    if result.damaged:
        if result.corrupt or not last:
            raise StoreCorrupt(
                f"store file {path} is damaged at offset {result.good_end} of {result.size} "
                f"and committed data follows it (first valid record after the damage at "
                f"offset {result.resumes_at}); refusing to start rather than lose it. "
                "Restore the data directory from a backup, or move this file aside to "
                "accept the loss of its messages."
            )
        dropped = result.size - result.good_end
        log.warning(
            "store file %s: torn tail at offset %d: dropped %d bytes of an unfinished write "
            "(%d records before it kept)",
            path,
            result.good_end,
            dropped,
            sum(1 for p in result.payloads if p != COMMIT),
        )
        os.truncate(path, result.good_end)
    return data, result.payloads


class DiskStore:
    """The model's ``Journal`` on disk; see the module docstring."""

    def __init__(self, path: str | Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.path = Path(path)
        self.segment_bytes = segment_bytes
        self.writes = 0
        self.failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock_fd = -1
        # The batch being built on the loop thread.
        self._defs: list[bytes] = []
        self._msgs: list[bytes] = []
        self._delivered = array("Q")
        self._removed = array("Q")
        self._callbacks: list[Callable[[], None]] = []
        self._batch_first = 1  # the first message id of the open batch
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
        # The writer thread.
        self._jobs: queue_mod.SimpleQueue[tuple[Any, ...] | None] = queue_mod.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._defs_fd = -1
        self._seg_fd = -1

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
        defs = self._recover_defs()
        recovered = self._recover_messages(defs)
        self._write_snapshot(defs)
        self._next_qid = defs.next_qid
        recovered.seconds = time.monotonic() - started
        return recovered

    def _recover_defs(self) -> _Defs:
        defs = _Defs()
        path = self.path / "defs.log"
        if not path.exists():
            return defs
        _data, payloads = _read_checked(path, last=True)
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
        bodies: dict[int, tuple[str, str, bytes, bytes]] = {}
        refs: dict[int, dict[int, bool]] = {}
        max_mid = 0
        m_unpack, e_unpack = _M.unpack_from, _E.unpack_from
        for index, path in enumerate(names):
            segno = int(path.stem)
            self._segments.append(segno)
            self._seg_first.append(max_mid + 1)
            self._live[segno] = 0
            _data, payloads = _read_checked(path, last=index == len(names) - 1)
            for payload in payloads:
                kind = bytes(payload[:1])
                if kind == b"M":
                    _k, qid, mid, exlen, rklen, proplen = m_unpack(payload)
                    pos = _M.size
                    exchange = bytes(payload[pos : pos + exlen]).decode()
                    pos += exlen
                    routing_key = bytes(payload[pos : pos + rklen]).decode()
                    pos += rklen
                    props = bytes(payload[pos : pos + proplen])
                    body = bytes(payload[pos + proplen :])
                    bodies[mid] = (exchange, routing_key, props, body)
                    refs.setdefault(qid, {})[mid] = False
                    max_mid = max(max_mid, mid)
                elif kind == b"E":
                    _k, qid, mid = e_unpack(payload)
                    refs.setdefault(qid, {})[mid] = False
                elif kind in (b"D", b"A"):
                    pairs = array("Q")
                    pairs.frombytes(payload[1:])
                    delivered = kind == b"D"
                    for i in range(0, len(pairs), 2):
                        held = refs.get(pairs[i])
                        if held is None or pairs[i + 1] not in held:
                            continue
                        if delivered:
                            held[pairs[i + 1]] = True
                        else:
                            del held[pairs[i + 1]]
                elif kind != COMMIT:
                    raise StoreCorrupt(f"store file {path}: unknown record type {kind!r}")
        self._next_mid = self._batch_first = max_mid + 1
        if not self._segments:
            self._segments.append(1)
            self._seg_first.append(self._next_mid)
            self._live[1] = 0
        recovered = Recovered()
        recovered.exchanges = [
            {**rec, "a": load_table(rec["a"])} for rec in defs.exchanges.values()
        ]
        recovered.bindings = [{**rec, "a": load_table(rec["a"])} for rec in defs.bindings.values()]
        for rec in defs.queues.values():
            queue = RecoveredQueue(rec["v"], rec["n"], rec["id"], rec["ad"], load_table(rec["a"]))
            for mid, delivered in refs.get(rec["id"], {}).items():
                stored = bodies.get(mid)
                if stored is None:
                    raise StoreCorrupt(
                        f"store: queue '{rec['n']}' refers to message {mid}, which is missing"
                    )
                exchange, routing_key, props, body = stored
                queue.messages.append((mid, exchange, routing_key, props, body, delivered))
                self._live[self._segment_of(mid)] += 1
            recovered.messages += len(queue.messages)
            recovered.queues.append(queue)
        # Open the last segment for appending, and drop old ones nothing refers to.
        last = self._segments[-1]
        self._seg_fd = os.open(
            msgs_dir / f"{last:08d}.seg", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        self._seg_bytes = os.fstat(self._seg_fd).st_size
        for segno in self._collect():
            os.unlink(msgs_dir / f"{segno:08d}.seg")
        return recovered

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the writer thread; from now on the loop thread may call the journal."""
        self._loop = loop
        self._defs_fd = os.open(self.path / "defs.log", os.O_WRONLY | os.O_APPEND)
        self._thread = threading.Thread(target=self._writer, name="leveret-store", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Write what is pending, stop the writer, release the directory."""
        if self._thread is not None:
            self._busy = False
            self._submit()
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
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

    def enqueued(self, queue_id: int, message: Message) -> int:
        mid = message.store_id
        if mid:
            self._msgs.append(_E.pack(b"E", queue_id, mid))
            self._add_ref(mid)
        else:
            mid = self._next_mid
            self._next_mid = mid + 1
            message.store_id = mid
            exchange = message.exchange.encode()
            routing_key = message.routing_key.encode()
            props = message.raw_properties
            self._msgs.append(
                _M.pack(b"M", queue_id, mid, len(exchange), len(routing_key), len(props))
                + exchange
                + routing_key
                + props
                + message.body
            )
            self._batch_refs += 1
        self.writes += 1
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
        self._kick()

    def removed(self, queue_id: int, sid: int) -> None:
        self._removed.append(queue_id)
        self._removed.append(sid)
        if sid >= self._batch_first:
            self._batch_refs -= 1
        else:
            segno = self._segment_of(sid)
            self._live[segno] -= 1
        self._kick()

    def after_commit(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)
        self._kick()

    def _submit(self) -> None:
        """Hand the open batch to the writer, unless it is still syncing the previous one."""
        self._scheduled = False
        if self._busy or self.failed is not None:
            return
        msgs = self._msgs
        if self._delivered:
            msgs.append(b"D" + self._delivered.tobytes())
            self._delivered = array("Q")
        if self._removed:
            msgs.append(b"A" + self._removed.tobytes())
            self._removed = array("Q")
        defs, callbacks = self._defs, self._callbacks
        if not (msgs or defs):
            self._callbacks = []
            for callback in callbacks:
                callback()
            return
        self._msgs, self._defs, self._callbacks = [], [], []
        payload = b"".join([frame(m) for m in msgs])
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
        self._batch_first = self._next_mid
        self._seg_bytes += len(payload)
        deletes = self._collect()
        self._busy = True
        self._jobs.put((b"".join(defs), new_segment, payload, deletes, callbacks))

    def _committed(self, callbacks: list[Callable[[], None]], error: BaseException | None) -> None:
        self._busy = False
        if error is not None:
            if self.failed is None:
                self.failed = error
                log.error(
                    "store write failed: %s; nothing more is written and no more persistent "
                    "messages are confirmed",
                    error,
                )
            return
        for callback in callbacks:
            callback()
        if self._msgs or self._defs or self._delivered or self._removed or self._callbacks:
            self._submit()

    # -- the writer thread ---------------------------------------------------------------

    def _writer(self) -> None:
        msgs_dir = self.path / "msgs"
        while True:
            job = self._jobs.get()
            if job is None:
                return
            defs, new_segment, payload, deletes, callbacks = job
            error: BaseException | None = None
            try:
                if defs:
                    _write_all(self._defs_fd, defs + _COMMIT_FRAME)
                    os.fdatasync(self._defs_fd)
                if new_segment is not None:
                    os.close(self._seg_fd)  # already synced after its last batch
                    self._seg_fd = os.open(
                        msgs_dir / f"{new_segment:08d}.seg",
                        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                        0o644,
                    )
                    _fsync_dir(msgs_dir)
                if payload:
                    _write_all(self._seg_fd, payload + _COMMIT_FRAME)
                    os.fdatasync(self._seg_fd)
                for segno in deletes:
                    os.unlink(msgs_dir / f"{segno:08d}.seg")
            except OSError as exc:
                error = exc
            loop = self._loop
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self._committed, callbacks, error)
                except RuntimeError:
                    pass  # the loop closed meanwhile (shutdown)
