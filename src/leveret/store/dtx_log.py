"""Prepared distributed-transaction branches on disk (``data_dir/dtx.log``): the model's
``DtxLog`` (``model/dtx.py``). The server opens it at boot, hands the prepared branches it
read to the coordinator, and attaches it.

Records use the store's framing (``records.py``): each write is one batch (its records and a
commit record) appended and ``fdatasync``ed on a worker thread before the model is told. A
``p`` record is a prepared branch (xid, vhost, its publishes with encoded properties and
bodies, and the store ids of the deliveries it settles); an ``f`` record says the xid was
committed or rolled back. At boot the file is read (a torn last batch is cut, as everywhere
in the store), folded, and rewritten with the branches still in doubt, so it stays small.

A branch prepared is on disk before ``dtx.prepare`` answers. Its commit writes the messages
and settlements through the message store and only then the ``f`` record; a crash between
the two leaves the branch in doubt after the restart, and committing it again delivers its
publishes a second time (at least once), while its settlements, which name stored messages,
apply once.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from leveret.model.dtx import PreparedBranch
from leveret.store.records import COMMIT, frame, read_checked

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable
    from pathlib import Path

    from leveret.model.dtx import Xid

log = logging.getLogger("leveret.store")

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


def _decode(rec: dict[str, Any]) -> PreparedBranch:
    return PreparedBranch(
        _xid_of(rec["x"]),
        rec["v"],
        [(e, k, base64.b64decode(p), base64.b64decode(b)) for e, k, p, b in rec["pub"]],
        [(str(o), str(q), int(s)) for o, q, s in rec["set"]],
    )


class DtxFile:
    """The ``DtxLog`` on disk; see the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> list[PreparedBranch]:
        """Read the branches in doubt and rewrite the file with only them."""
        pending: dict[Xid, PreparedBranch] = {}
        if self.path.exists():
            for payload in read_checked(self.path, last=True).payloads:
                if payload == COMMIT:
                    continue
                rec = json.loads(bytes(payload))
                xid = _xid_of(rec["x"])
                if rec["op"] == "p":
                    pending[xid] = _decode(rec)
                else:
                    pending.pop(xid, None)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(frame(_encode(b)) for b in pending.values()) + _COMMIT_FRAME)
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

    def _write(self, payload: bytes) -> None:
        os.write(self._fd, frame(payload) + _COMMIT_FRAME)
        os.fdatasync(self._fd)

    def _submit(self, payload: bytes, done: Callable[[bool], None] | None) -> None:
        loop = self._loop
        if loop is None:
            self._write(payload)
            if done is not None:
                done(True)
            return

        def written(future: asyncio.Future[None]) -> None:
            error = future.exception()
            if error is not None:
                log.error("dtx log: write failed: %s", error)
            if done is not None:
                done(error is None)

        loop.run_in_executor(None, self._write, payload).add_done_callback(written)

    def prepared(self, branch: PreparedBranch, done: Callable[[bool], None]) -> None:
        self._submit(_encode(branch), done)

    def finished(self, xid: Xid) -> None:
        self._submit(json.dumps({"op": "f", "x": _xid_json(xid)}).encode(), None)
