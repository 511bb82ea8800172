"""The core's distributed transactions (model/dtx.py) without a front end."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.errors import CommandInvalid, NotAllowed, NotFound
from leveret.model.broker import Broker
from leveret.model.consumer import Consumer, ConsumerOwner
from leveret.model.dtx import (
    XA_OK,
    XA_RBROLLBACK,
    XA_RBTIMEOUT,
    DtxArgumentError,
    DtxStateError,
    PreparedBranch,
)
from leveret.model.settle import Delivery
from leveret.model.transaction import ACCEPT
from leveret.server.amqp091.message import wire_message

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.entry import QueuedMessage

XID = (0, b"g", b"b")


class Taker(ConsumerOwner):
    def __init__(self) -> None:
        self.got: list[QueuedMessage] = []

    def accepts(self, consumer: Consumer, size: int) -> bool:
        return True

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        self.got.append(entry)


class Log:
    def __init__(self) -> None:
        self.prepared: list[PreparedBranch] = []
        self.finished: list[object] = []

    def prepared_(self, branch: PreparedBranch, done: Callable[[bool], None]) -> None:
        self.prepared.append(branch)
        done(True)


def _broker() -> tuple[Broker, Log]:
    broker = Broker()
    log = Log()

    class _DtxLog:
        def prepared(self, branch: PreparedBranch, done: Callable[[bool], None]) -> None:
            log.prepared_(branch, done)

        def finished(self, xid: object) -> None:
            log.finished.append(xid)

    broker.dtx.log = _DtxLog()
    return broker, log


def _statuses() -> tuple[list[int], Callable[[int], None]]:
    got: list[int] = []
    return got, got.append


def test_two_phase_commit_routes_held_work_only_at_commit() -> None:
    broker, log = _broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", owner=None)
    session = object()
    branch = broker.dtx.start(session, XID, vhost, join=False, resume=False)
    branch.tx.publishes.append(("", "q", wire_message("", "q", b"\x00\x00", b"x"), False, False))
    assert broker.dtx.end(session, XID, fail=False, suspend=False) == XA_OK
    got, done = _statuses()
    broker.dtx.prepare(XID, done)
    assert got == [XA_OK]
    assert [p.publishes for p in log.prepared] == [[("", "q", b"\x00\x00", b"x")]]
    assert queue.message_count == 0  # not visible while prepared
    assert broker.dtx.recover() == [XID]
    broker.dtx.commit(XID, one_phase=False, done=done)
    assert got == [XA_OK, XA_OK]
    assert queue.message_count == 1
    assert log.finished == [XID]
    with pytest.raises(NotFound):
        broker.dtx.rollback(XID)


def test_state_rules() -> None:
    broker, _log = _broker()
    vhost = broker.vhosts["/"]
    a, b = object(), object()
    broker.dtx.start(a, XID, vhost, join=False, resume=False)
    with pytest.raises(NotAllowed):
        broker.dtx.start(b, XID, vhost, join=False, resume=False)
    with pytest.raises(CommandInvalid):
        broker.dtx.start(b, XID, vhost, join=True, resume=True)
    broker.dtx.start(b, XID, vhost, join=True, resume=False)
    _got, done = _statuses()
    with pytest.raises(DtxStateError):
        broker.dtx.prepare(XID, done)  # still associated
    with pytest.raises(DtxStateError):
        broker.dtx.commit(XID, one_phase=False, done=done)  # not prepared
    assert broker.dtx.end(a, XID, fail=False, suspend=True) == XA_OK
    broker.dtx.start(a, XID, vhost, join=False, resume=True)
    assert broker.dtx.end(a, XID, fail=True, suspend=False) == XA_RBROLLBACK
    assert broker.dtx.end(b, XID, fail=False, suspend=False) == XA_RBROLLBACK
    with pytest.raises(DtxArgumentError):
        broker.dtx.set_timeout(XID, 3601)
    assert broker.dtx.rollback(XID) == XA_RBROLLBACK


def test_timeout_rolls_the_work_back() -> None:
    broker, _log = _broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", owner=None)
    queue.enqueue(wire_message("", "q", b"\x00\x00", b"m"))
    taker = Taker()
    consumer = Consumer("c", queue, taker, auto_settle=False, exclusive=False)
    queue.add_consumer(consumer)
    session = object()
    branch = broker.dtx.start(session, XID, vhost, join=False, resume=False)
    branch.tx.settle(ACCEPT, Delivery(taker.got[0], queue, consumer), None)
    queue.remove_consumer(consumer)
    broker.dtx.set_timeout(XID, 2)
    broker.timers.expire(broker.timers.now + 3)
    assert queue.message_count == 1  # the accept was rolled back
    assert broker.dtx.end(session, XID, fail=False, suspend=False) == XA_RBTIMEOUT
    assert broker.dtx.rollback(XID) == XA_RBTIMEOUT


def test_restore_withdraws_what_a_prepared_branch_settles() -> None:
    broker, _log = _broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", owner=None)
    queue.restore(wire_message("", "q", b"\x00\x00", b"held"), 7, True)
    queue.restore(wire_message("", "q", b"\x00\x00", b"free"), 8, False)
    prepared = PreparedBranch(XID, "/", [("", "q", b"\x00\x00", b"new")], [(ACCEPT, "q", 7)])
    broker.dtx.restore(prepared, vhost, wire_message)
    assert [e.message.body for e in queue.ready_entries()] == [b"free"]
    got, done = _statuses()
    broker.dtx.commit(XID, one_phase=False, done=done)
    assert got == [XA_OK]
    assert [e.message.body for e in queue.ready_entries()] == [b"free", b"new"]
