"""Prepared distributed-transaction branches on disk (``data_dir/dtx.log``): the model's
``DtxLog`` (``model/dtx.py``). The server opens it at boot, hands the prepared branches it
read to the coordinator, and attaches it.

Records use the store's framing (``records.py``): each write is one batch (its records and a
commit record) appended and ``fdatasync``ed on a worker thread before the model is told. A
``p`` record is a prepared branch (xid, vhost, its publishes with encoded properties and
bodies, and the store ids of the deliveries it settles); a ``c`` record says the coordinator
decided to commit it; an ``f`` record says the xid was committed or rolled back. At boot
the file is read (a torn last batch is cut, as everywhere in the store), folded, and
rewritten with the branches not finished, so it stays small.

A commit is atomic across this log and the message store:

1. ``dtx.prepare`` answers once the ``p`` record is on disk;
2. ``dtx.commit`` writes the ``c`` record and waits for it: from then on the branch is
   committed, whatever happens;
3. its effects (publishes routed, settlements applied) go to the message store in one batch
   together with a marker naming the branch (``Journal.dtx_committed``), and the commit
   answers once that batch is on disk;
4. the ``f`` record, then the marker is dropped.

At boot a branch with ``p`` and no ``c`` is in doubt again (the coordinator decides); one
with ``c`` and no ``f`` was committed: if the message store holds its marker, its effects
are there and only ``f`` is written; if not, none of them are (a batch is written whole or
not at all) and the commit is applied again from the ``p`` record. So a crash at any step
loses nothing and applies nothing twice. A replayed commit routes only the persistent
publishes: a transient message never survives a restart.

Test hook (read when the log is created; for tests only): ``LEVERET_TEST_DTX_CRASH=STEP``
kills the broker (SIGKILL) at a step of a commit: ``before-commit-record`` (nothing of the
commit written), ``commit-record`` (``c`` on disk, no effects), ``effects-stored`` (the
effects and the marker on disk, no ``f``).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
from typing import TYPE_CHECKING, Any

from leveret.model.dtx import PreparedBranch
from leveret.store.records import COMMIT, frame, read_checked

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable
    from pathlib import Path

    from leveret.model.dtx import Xid

log = logging.getLogger("leveret.store")

CRASH_ENV = "LEVERET_TEST_DTX_CRASH"
CRASH_STEPS = ("before-commit-record", "commit-record", "effects-stored")

_COMMIT_FRAME = frame(COMMIT)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _xid_json(xid: Xid) -> list[Any]:
    return [xid[0], _b64(xid[1]), _b64(xid[2])]


def _xid_of(value: list[Any]) -> Xid:
    return (int(value[0]), base64.b64decode(value[1]), base64.b64decode(value[2]))


def _encode(branch: PreparedBranch) -> bytes:
    return json.dumps(
        {
            "op": "p",
            "x": _xid_json(branch.xid),
            "v": branch.vhost,
            "pub": [[e, k, _b64(p), _b64(b)] for e, k, p, b in branch.publishes],
            "set": [list(s) for s in branch.settlements],
        }
    ).encode()


def _marker(op: str, xid: Xid) -> bytes:
    return json.dumps({"op": op, "x": _xid_json(xid)}).encode()


def _decode(rec: dict[str, Any]) -> PreparedBranch:
    return PreparedBranch(
        _xid_of(rec["x"]),
        rec["v"],
        [(e, k, base64.b64decode(p), base64.b64decode(b)) for e, k, p, b in rec["pub"]],
        [(str(o), str(q), int(s)) for o, q, s in rec["set"]],
    )


def _crash(step: str) -> None:
    log.warning("dtx log: killed at step %s (%s)", step, CRASH_ENV)
    os.kill(os.getpid(), signal.SIGKILL)


class DtxFile:
    """The ``DtxLog`` on disk; see the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self.crash_at = os.environ.get(CRASH_ENV) or None  # test hook
        self._committing: set[Xid] = set()  # commits logged, not finished (the hook's)
        if self.crash_at is not None and self.crash_at not in CRASH_STEPS:
            raise ValueError(f"{CRASH_ENV}: unknown step {self.crash_at!r}")

    def open(self) -> list[PreparedBranch]:
        """Read the branches not finished (``committed`` set on those with a ``c`` record)
        and rewrite the file with only them."""
        pending: dict[Xid, PreparedBranch] = {}
        if self.path.exists():
            for payload in read_checked(self.path, last=True).payloads:
                if payload == COMMIT:
                    continue
                rec = json.loads(bytes(payload))
                xid = _xid_of(rec["x"])
                if rec["op"] == "p":
                    pending[xid] = _decode(rec)
                elif rec["op"] == "c":
                    branch = pending.get(xid)
                    if branch is not None:
                        branch.committed = True
                else:
                    pending.pop(xid, None)
        tmp = self.path.with_suffix(".tmp")
        records = []
        for branch in pending.values():
            records.append(frame(_encode(branch)))
            if branch.committed:
                records.append(frame(_marker("c", branch.xid)))
        with open(tmp, "wb") as f:
            f.write(b"".join(records) + _COMMIT_FRAME)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        return list(pending.values())

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _write(self, payload: bytes, crash: str | None = None) -> None:
        os.write(self._fd, frame(payload) + _COMMIT_FRAME)
        os.fdatasync(self._fd)
        if crash is not None and crash == self.crash_at:
            _crash(crash)

    def _submit(
        self, payload: bytes, done: Callable[[bool], None] | None, crash: str | None = None
    ) -> None:
        loop = self._loop
        if loop is None:
            self._write(payload, crash)
            if done is not None:
                done(True)
            return

        def written(future: asyncio.Future[None]) -> None:
            error = future.exception()
            if error is not None:
                log.error("dtx log: write failed: %s", error)
            if done is not None:
                done(error is None)

        loop.run_in_executor(None, self._write, payload, crash).add_done_callback(written)

    def prepared(self, branch: PreparedBranch, done: Callable[[bool], None]) -> None:
        self._submit(_encode(branch), done)

    def committing(self, xid: Xid, done: Callable[[bool], None]) -> None:
        if self.crash_at == "before-commit-record":
            _crash(self.crash_at)
        if self.crash_at is not None:
            self._committing.add(xid)
        self._submit(_marker("c", xid), done, crash="commit-record")

    def finished(self, xid: Xid, done: Callable[[bool], None] | None = None) -> None:
        if self.crash_at == "effects-stored" and xid in self._committing:
            _crash(self.crash_at)
        self._submit(_marker("f", xid), done)
