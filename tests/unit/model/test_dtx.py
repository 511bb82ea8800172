"""The core's distributed transactions (model/dtx.py) without a front end."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.convert.amqp091 import wire_message
from leveret.errors import CommandInvalid, NotAllowed, NotFound
from leveret.model.broker import Broker
from leveret.model.dtx import (
    XA_OK,
    XA_RBROLLBACK,
    XA_RBTIMEOUT,
    DtxArgumentError,
    DtxStateError,
    PreparedBranch,
    Xid,
    xid_key,
)
from leveret.model.settle import Delivery
from leveret.model.transaction import ACCEPT
from tests.unit.store.test_journal_hooks import FakeJournal

if TYPE_CHECKING:
    from collections.abc import Callable


XID = (0, b"g", b"b")


class Log:
    def __init__(self) -> None:
        self.prepared: list[PreparedBranch] = []
        self.finished: list[object] = []
        self.committing: list[object] = []
        # What the log was told, in order, with what the queue "q" held then.
        self.steps: list[tuple[str, int]] = []
        self.commit_ok = True

    def prepared_(self, branch: PreparedBranch, done: Callable[[bool], None]) -> None:
        self.prepared.append(branch)
        done(True)


def _broker() -> tuple[Broker, Log]:
    broker = Broker()
    log = Log()

    class _DtxLog:
        def prepared(self, branch: PreparedBranch, done: Callable[[bool], None]) -> None:
            log.prepared_(branch, done)

        def committing(self, xid: Xid, done: Callable[[bool], None]) -> None:
            log.committing.append(xid)
            log.steps.append(("committing", _count(broker)))
            done(log.commit_ok)

        def finished(self, xid: Xid, done: Callable[[bool], None] | None = None) -> None:
            log.finished.append(xid)
            log.steps.append(("finished", _count(broker)))
            if done is not None:
                done(True)

    broker.dtx.log = _DtxLog()
    return broker, log


def _count(broker: Broker) -> int:
    queue = broker.vhosts["/"].queues.get("q")
    return queue.message_count if queue is not None else -1


def _statuses() -> tuple[list[int | None], Callable[[int | None], None]]:
    got: list[int | None] = []
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
    # A get rather than a consumer: the test's owner would be an interpreted subclass of
    # the compiled ConsumerOwner, which the compiled build refuses.
    entry = queue.get(auto_settle=False)
    assert entry is not None
    session = object()
    branch = broker.dtx.start(session, XID, vhost, join=False, resume=False)
    branch.tx.settle(ACCEPT, Delivery(entry, queue, None), None)
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


PERSISTENT = b"\x10\x00\x02"  # 0-9-1 properties: delivery-mode 2


def _durable(broker: Broker) -> FakeJournal:
    journal = FakeJournal()
    broker.attach_journal(journal)
    broker.vhosts["/"].declare_queue("q", owner=None, durable=True)
    journal.calls.clear()
    return journal


def _prepared(broker: Broker, *bodies: bytes) -> None:
    vhost = broker.vhosts["/"]
    session = object()
    branch = broker.dtx.start(session, XID, vhost, join=False, resume=False)
    for body in bodies:
        message = wire_message("", "q", PERSISTENT, body)
        branch.tx.publishes.append(("", "q", message, False, False))
    broker.dtx.end(session, XID, fail=False, suspend=False)
    broker.dtx.prepare(XID, lambda status: None)


def test_a_commit_is_logged_before_its_effects_which_carry_its_marker() -> None:
    broker, log = _broker()
    journal = _durable(broker)
    _prepared(broker, b"a", b"b")
    journal.calls.clear()
    got, done = _statuses()
    broker.dtx.commit(XID, one_phase=False, done=done)
    # The decision was logged while nothing was applied; the marker is written first, in
    # the same turn (the same store batch) as the effects.
    assert log.steps == [("committing", 0)]
    assert journal.calls == [("dtx+", xid_key(XID), 1), ("enq", 7, b"a"), ("enq", 7, b"b")]
    assert got == []  # not answered before the store has the effects
    journal.commit()
    assert got == [XA_OK]
    assert log.steps == [("committing", 0), ("finished", 2)]
    assert journal.calls[-1] == ("dtx-", 1)  # the marker goes once the log says finished


def test_a_commit_that_could_not_be_logged_stays_in_doubt() -> None:
    broker, log = _broker()
    journal = _durable(broker)
    _prepared(broker, b"a")
    log.commit_ok = False
    got, done = _statuses()
    journal.calls.clear()
    broker.dtx.commit(XID, one_phase=False, done=done)
    assert got == [None]
    assert journal.calls == []
    assert broker.dtx.recover() == [XID]
    log.commit_ok = True
    broker.dtx.commit(XID, one_phase=False, done=done)
    journal.commit()
    assert got == [None, XA_OK]
    assert _count(broker) == 1


def test_a_one_phase_commit_needs_no_log_and_no_marker() -> None:
    broker, log = _broker()
    journal = _durable(broker)
    vhost = broker.vhosts["/"]
    session = object()
    branch = broker.dtx.start(session, XID, vhost, join=False, resume=False)
    branch.tx.publishes.append(("", "q", wire_message("", "q", PERSISTENT, b"a"), False, False))
    broker.dtx.end(session, XID, fail=False, suspend=False)
    got, done = _statuses()
    broker.dtx.commit(XID, one_phase=True, done=done)
    journal.commit()
    assert got == [XA_OK]
    assert log.steps == []
    assert not any(call[0] == "dtx+" for call in journal.calls)


def _logged(*publishes: tuple[bytes, bytes]) -> PreparedBranch:
    prepared = PreparedBranch(
        XID, "/", [("", "q", props, body) for props, body in publishes], [(ACCEPT, "q", 7)]
    )
    prepared.committed = True
    return prepared


def test_a_logged_commit_whose_marker_the_store_kept_is_only_finished() -> None:
    broker, log = _broker()
    journal = _durable(broker)
    queue = broker.vhosts["/"].queues["q"]
    queue.restore(wire_message("", "q", PERSISTENT, b"other"), 7, True)
    broker.dtx.finish_logged(_logged((PERSISTENT, b"new")), broker.vhosts["/"], wire_message, 41)
    assert [e.message.body for e in queue.ready_entries()] == [b"other"]  # nothing applied
    assert log.finished == [XID]
    assert journal.calls == [("dtx-", 41)]
    assert broker.dtx.recover() == []


def test_a_logged_commit_without_its_marker_is_applied_again() -> None:
    broker, log = _broker()
    journal = _durable(broker)
    queue = broker.vhosts["/"].queues["q"]
    queue.restore(wire_message("", "q", PERSISTENT, b"settled"), 7, True)
    queue.restore(wire_message("", "q", PERSISTENT, b"other"), 8, False)
    prepared = _logged((PERSISTENT, b"durable"), (b"\x00\x00", b"transient"))
    broker.dtx.finish_logged(prepared, broker.vhosts["/"], wire_message, None)
    # The settlement applied, the persistent publish routed (a transient one would not have
    # survived the crash), the marker with them; finished once the store has them.
    assert [e.message.body for e in queue.ready_entries()] == [b"other", b"durable"]
    assert ("rm", 7, 7) in journal.calls
    assert journal.calls[0] == ("dtx+", xid_key(XID), 1)
    assert log.finished == []
    journal.commit()
    assert log.finished == [XID]
    assert journal.calls[-1] == ("dtx-", 1)
    assert broker.dtx.recover() == []
