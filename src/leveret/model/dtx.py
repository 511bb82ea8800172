"""Distributed (XA) transactions in the core's words: branches identified by an xid, work held
in a ``Transaction`` until an external coordinator decides, and prepared branches kept
durable through a ``DtxLog`` the server injects. Front ends that speak XA (AMQP 0-10's
``dtx`` class) drive ``Coordinator``; the model imports nothing of a protocol.

Theory of operation (the X/Open XA states, as AMQP 0-10 names them): a branch is *active*
while sessions are associated with it (``start``; others may ``join``, one may ``suspend``
and later ``resume``), *idle* once every association ended (``end``), *prepared* once
``prepare`` made its work durable, and gone after ``commit`` or ``rollback``. A branch whose
association ended with ``fail``, whose session went away while associated, or whose timeout
passed is *rollback-only*: prepare and commit answer ``XA_RBROLLBACK`` / ``XA_RBTIMEOUT``
(a timed-out branch is rolled back at once, so the work it held is visible again).

What a branch holds is what any transaction holds (``Transaction``): publishes, routed only
at commit, and settlements of deliveries, applied only at commit (on rollback the
deliveries go back to their queues). Deliveries settled under a branch stay unsettled in
their queues meanwhile, so no consumer of any protocol sees them; publishes are invisible
because they are not routed. ``prepare`` writes the branch (its messages, and the store ids
of the stored deliveries it settles) to the ``DtxLog``; after a crash the server rebuilds
the prepared branches from it (``restore``), taking those deliveries out of their recovered
queues again, so they stay invisible until the coordinator commits or rolls back.

Commit of a prepared branch, atomic across the dtx log and the message store: the decision
goes to the log first (``DtxLog.committing``), then the effects are applied with a marker
the journal writes in the same batch (``Journal.dtx_committed``), then the log says the
branch finished and the marker goes. A branch whose decision is logged but not its end is
finished at boot (``finish_logged``): by the log alone when the store kept its marker (its
effects are there), else by applying the effects again. ``store/dtx_log.py`` has the steps.
A one-phase commit (never prepared) writes only to the message store, in one batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from leveret.errors import AMQPError, CommandInvalid, NotAllowed, NotFound
from leveret.model import settle
from leveret.model.message import HINT_PERSISTENT
from leveret.model.publisher import Publisher
from leveret.model.settle import Delivery
from leveret.model.transaction import ACCEPT, REJECT, RELEASE, Transaction

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.message import Message
    from leveret.model.timers import Timers
    from leveret.model.vhost import VirtualHost

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_TIMEOUT",
    "XA_OK",
    "XA_RBROLLBACK",
    "XA_RBTIMEOUT",
    "Branch",
    "Coordinator",
    "DtxArgumentError",
    "DtxLog",
    "DtxStateError",
    "PreparedBranch",
    "Xid",
    "xid_key",
]

# XA status codes (AMQP 0-10 dtx.xa-status).
XA_OK = 0
XA_RBROLLBACK = 1
XA_RBTIMEOUT = 2

# Seconds (Qpid C++'s defaults: dtx-default-timeout 60, dtx-max-timeout 3600).
DEFAULT_TIMEOUT = 60
MAX_TIMEOUT = 3600

# format, global transaction id, branch qualifier
Xid = tuple[int, bytes, bytes]


class DtxStateError(AMQPError):
    """The branch is not in a state that allows this (0-10: illegal-state, 409)."""

    reply_code = 406
    hard_by_default = False


class DtxArgumentError(AMQPError):
    """An argument is out of range (0-10: invalid-argument, 542)."""

    reply_code = 406
    hard_by_default = False


class PreparedBranch:
    """What the ``DtxLog`` keeps of a prepared branch: enough to commit it after a crash."""

    def __init__(
        self,
        xid: Xid,
        vhost: str,
        publishes: list[tuple[str, str, bytes, bytes]],
        settlements: list[tuple[str, str, int]],
    ) -> None:
        self.xid = xid
        self.vhost = vhost
        # exchange, routing key, encoded properties, body
        self.publishes = publishes
        # outcome, queue name, store id of the entry (stored deliveries only)
        self.settlements = settlements
        # The log holds the decision to commit it (read back at boot: finish the commit).
        self.committed = False


class DtxLog(Protocol):
    """Where prepared branches are made durable; the server supplies the one on disk."""

    def prepared(self, branch: PreparedBranch, done: Callable[[bool], None]) -> None:
        """Keep ``branch``; ``done(ok)`` once it is on disk."""
        ...

    def committing(self, xid: Xid, done: Callable[[bool], None]) -> None:
        """The prepared ``xid`` is to be committed; ``done(ok)`` once that is on disk,
        before any of its effects are applied."""
        ...

    def finished(self, xid: Xid, done: Callable[[bool], None] | None = None) -> None:
        """``xid`` was committed or rolled back: it need not be kept any more
        (``done(ok)`` once that is on disk)."""
        ...


class NullDtxLog:
    """Keeps nothing (no data directory): prepared branches do not survive a restart."""

    def prepared(self, branch: PreparedBranch, done: Callable[[bool], None]) -> None:
        done(True)

    def committing(self, xid: Xid, done: Callable[[bool], None]) -> None:
        done(True)

    def finished(self, xid: Xid, done: Callable[[bool], None] | None = None) -> None:
        if done is not None:
            done(True)


class Branch:
    """One transaction branch; see the module docstring."""

    def __init__(self, xid: Xid, vhost: VirtualHost, timeout: int) -> None:
        self.xid = xid
        self.vhost = vhost
        self.tx = Transaction()
        self.associated: set[object] = set()
        self.suspended: set[object] = set()
        self.prepared = False
        self.rollback_only = False
        self.timed_out = False
        self.finished = False
        self.timeout = timeout
        self._deadline: float | None = None
        self._generation = 0

    def __repr__(self) -> str:
        return f"Branch({self.xid!r})"

    @property
    def idle(self) -> bool:
        return not self.associated and not self.suspended

    def status(self) -> int:
        if self.timed_out:
            return XA_RBTIMEOUT
        return XA_RBROLLBACK if self.rollback_only else XA_OK


class _Deadline:
    """A branch's timeout in ``Timers`` (stale once the branch moved on)."""

    __slots__ = ("branch", "coordinator", "generation")

    def __init__(self, coordinator: Coordinator, branch: Branch) -> None:
        self.coordinator = coordinator
        self.branch = branch
        self.generation = branch._generation

    def on_deadline(self, now: float) -> None:
        if self.generation == self.branch._generation:
            self.coordinator._timed_out(self.branch)


class _Returns:
    """The publish sink of commits: XA has no returns or confirms."""

    def returned(self, reason: str, message: Message) -> None:
        return None

    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        return None


class Coordinator:
    """Every branch of one broker, by xid."""

    def __init__(self, timers: Timers) -> None:
        self.timers = timers
        self.branches: dict[Xid, Branch] = {}
        self.log: DtxLog = NullDtxLog()

    def _branch(self, xid: Xid) -> Branch:
        branch = self.branches.get(xid)
        if branch is None:
            raise NotFound(f"unknown xid {_show(xid)}")
        return branch

    # -- associations --------------------------------------------------------------------

    def start(
        self, session: object, xid: Xid, vhost: VirtualHost, *, join: bool, resume: bool
    ) -> Branch:
        if join and resume:
            raise CommandInvalid("dtx.start: join and resume cannot both be set")
        branch = self.branches.get(xid)
        if resume:
            if branch is None or session not in branch.suspended:
                raise CommandInvalid(f"dtx.start: xid {_show(xid)} is not suspended here")
            branch.suspended.discard(session)
            branch.associated.add(session)
            return branch
        if branch is None:
            if join:
                raise NotFound(f"dtx.start: unknown xid {_show(xid)} to join")
            branch = self.branches[xid] = Branch(xid, vhost, DEFAULT_TIMEOUT)
            self._arm(branch)
        elif not join:
            raise NotAllowed(f"dtx.start: xid {_show(xid)} is already known")
        elif branch.prepared:
            raise DtxStateError(f"dtx.start: xid {_show(xid)} is prepared")
        branch.associated.add(session)
        return branch

    def end(self, session: object, xid: Xid, *, fail: bool, suspend: bool) -> int:
        if fail and suspend:
            raise CommandInvalid("dtx.end: suspend and fail cannot both be set")
        branch = self.branches.get(xid)
        if branch is None or (session not in branch.associated and session not in branch.suspended):
            if branch is not None and branch.timed_out:
                return XA_RBTIMEOUT
            raise DtxStateError(f"dtx.end: xid {_show(xid)} is not associated with the session")
        branch.associated.discard(session)
        if suspend:
            branch.suspended.add(session)
        else:
            branch.suspended.discard(session)
        if fail:
            branch.rollback_only = True
        return branch.status()

    def session_gone(self, session: object, branch: Branch) -> None:
        """A session went while associated (or suspended): the branch can only roll back."""
        if session in branch.associated or session in branch.suspended:
            branch.associated.discard(session)
            branch.suspended.discard(session)
            branch.rollback_only = True

    # -- outcomes ------------------------------------------------------------------------

    def prepare(self, xid: Xid, done: Callable[[int], None]) -> None:
        branch = self._branch(xid)
        if not branch.idle:
            raise DtxStateError(f"dtx.prepare: xid {_show(xid)} is still associated")
        if branch.prepared:
            raise DtxStateError(f"dtx.prepare: xid {_show(xid)} is already prepared")
        if branch.rollback_only or branch.timed_out:
            done(branch.status())
            return
        branch.prepared = True
        branch._generation += 1  # a prepared branch no longer times out

        def logged(ok: bool) -> None:
            if not ok:
                branch.prepared = False
                branch.rollback_only = True
            done(branch.status())

        self.log.prepared(_record(branch), logged)

    def commit(self, xid: Xid, *, one_phase: bool, done: Callable[[int | None], None]) -> None:
        """Commit ``xid``; ``done(status)`` once its effects are on disk, ``done(None)``
        when the decision could not be logged (the branch stays prepared, in doubt)."""
        branch = self._branch(xid)
        if not branch.idle:
            raise DtxStateError(f"dtx.commit: xid {_show(xid)} is still associated")
        if one_phase and branch.prepared:
            raise DtxStateError(f"dtx.commit: xid {_show(xid)} is prepared (one-phase)")
        if not one_phase and not branch.prepared:
            raise DtxStateError(f"dtx.commit: xid {_show(xid)} is not prepared")
        if branch.rollback_only or branch.timed_out:
            status = branch.status()
            self._rollback(branch)
            done(status)
            return
        self._forget(branch)
        if not branch.prepared:
            self._apply_commit(branch, logged=False, done=done)
            return

        def logged(ok: bool) -> None:
            if not ok:
                branch.finished = False
                self.branches[xid] = branch
                done(None)
                return
            self._apply_commit(branch, logged=True, done=done)

        self.log.committing(xid, logged)

    def _apply_commit(
        self, branch: Branch, *, logged: bool, done: Callable[[int | None], None] | None
    ) -> None:
        """Route the branch's publishes and apply its settlements; a logged commit puts its
        marker in the same store batch, and is finished in the log once that is on disk."""
        vhost = branch.vhost
        journal = vhost.journal
        publisher = Publisher(vhost, _Returns())
        marker = journal.dtx_committed(xid_key(branch.xid)) if logged else 0

        def committed(ok: bool) -> None:
            # Not ok (the store failed): the log keeps the decision, the boot finishes it.
            if logged and ok:

                def forget(_ok: bool) -> None:
                    if marker:
                        journal.dtx_forgotten(marker)

                self.log.finished(branch.xid, forget)
            if done is not None:
                done(XA_OK)

        branch.tx.commit(publisher.route, _apply, journal, committed, publisher.take_remote)

    def rollback(self, xid: Xid) -> int:
        branch = self._branch(xid)
        if not branch.idle:
            raise DtxStateError(f"dtx.rollback: xid {_show(xid)} is still associated")
        status = branch.status()
        self._rollback(branch)
        return status

    def forget(self, xid: Xid) -> None:
        # Leveret never completes a branch heuristically, so there is nothing to forget.
        raise NotFound(f"dtx.forget: xid {_show(xid)} was not heuristically completed")

    def recover(self) -> list[Xid]:
        return [xid for xid, branch in self.branches.items() if branch.prepared]

    def get_timeout(self, xid: Xid) -> int:
        return self._branch(xid).timeout

    def set_timeout(self, xid: Xid, timeout: int) -> None:
        branch = self._branch(xid)
        if timeout > MAX_TIMEOUT:
            raise DtxArgumentError(
                f"dtx.set-timeout: {timeout} s is above the maximum of {MAX_TIMEOUT} s"
            )
        branch.timeout = timeout
        branch._generation += 1
        if not branch.prepared:
            self._arm(branch)

    # -- internals -----------------------------------------------------------------------

    def _arm(self, branch: Branch) -> None:
        if branch.timeout:
            self.timers.schedule(self.timers.now + branch.timeout, _Deadline(self, branch))

    def _timed_out(self, branch: Branch) -> None:
        if branch.finished or branch.prepared:
            return
        # Roll the work back now (its deliveries become visible again); the branch stays
        # known so that end/rollback can answer XA_RBTIMEOUT.
        branch.timed_out = True
        _release_held(branch.tx)

    def _rollback(self, branch: Branch) -> None:
        was_prepared = branch.prepared
        self._forget(branch)
        _release_held(branch.tx)
        if was_prepared:
            self.log.finished(branch.xid)

    def _forget(self, branch: Branch) -> None:
        branch.finished = True
        branch._generation += 1
        if self.branches.get(branch.xid) is branch:
            del self.branches[branch.xid]

    # -- recovery ------------------------------------------------------------------------

    def restore(
        self,
        prepared: PreparedBranch,
        vhost: VirtualHost,
        make_message: Callable[[str, str, bytes, bytes], Message],
    ) -> Branch:
        """Rebuild a prepared branch after a restart (before clients connect)."""
        branch = Branch(prepared.xid, vhost, DEFAULT_TIMEOUT)
        branch.prepared = True
        for exchange, routing_key, props, body in prepared.publishes:
            message = make_message(exchange, routing_key, props, body)
            if prepared.committed and not message.hints & HINT_PERSISTENT:
                continue  # replayed after a crash: a transient message would not be there
            branch.tx.publishes.append((exchange, routing_key, message, False, False))
        for outcome, queue_name, sid in prepared.settlements:
            queue = vhost.queues.get(queue_name)
            entry = queue.withdraw(sid) if queue is not None else None
            if queue is not None and entry is not None:
                branch.tx.settle(outcome, Delivery(entry, queue, None), None)
        self.branches[prepared.xid] = branch
        return branch

    def finish_logged(
        self,
        prepared: PreparedBranch,
        vhost: VirtualHost,
        make_message: Callable[[str, str, bytes, bytes], Message],
        marker: int | None,
    ) -> None:
        """At boot: a branch whose commit was logged but not finished. ``marker``: the
        store's marker of its effects (``Recovered.dtx_markers``), None when the store has
        none, i.e. none of its effects: then they are applied now."""
        journal = vhost.journal
        if marker is not None:

            def forget(_ok: bool) -> None:
                journal.dtx_forgotten(marker)

            self.log.finished(prepared.xid, forget)
            return
        branch = self.restore(prepared, vhost, make_message)
        self._forget(branch)
        self._apply_commit(branch, logged=True, done=None)


def _apply(outcome: str, settlements: list[tuple[Delivery, object]]) -> None:
    deliveries = [d for d, _token in settlements]
    if outcome == ACCEPT:
        settle.accept(deliveries)
    elif outcome == RELEASE:
        settle.release(deliveries)
    elif outcome == REJECT:
        settle.reject(deliveries)


def _release_held(tx: Transaction) -> None:
    held = tx.rollback()
    if held:
        settle.release(d for d, _token in held)


def _record(branch: Branch) -> PreparedBranch:
    publishes = [
        (exchange, routing_key, message.raw_properties, message.body)
        for exchange, routing_key, message, _unroutable, _consumer in branch.tx.publishes
    ]
    settlements = [
        (outcome, delivery.queue.name, delivery.entry.sid)
        for outcome, delivery, _token in branch.tx.settlements
        if delivery.entry.sid
    ]
    return PreparedBranch(branch.xid, branch.vhost.name, publishes, settlements)


def xid_key(xid: Xid) -> bytes:
    """``xid`` as bytes (the journal's name for the branch's commit marker)."""
    fmt, gtrid, bqual = xid
    return b"%d:%d:%s%s" % (fmt, len(gtrid), gtrid, bqual)


def _show(xid: Xid) -> str:
    fmt, gtrid, bqual = xid
    return f"{fmt}:{gtrid.hex()}:{bqual.hex()}"
