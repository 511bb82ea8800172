"""The ``dtx`` class (100) of AMQP 0-8 and 0-9 on the broker's XA coordinator
(``model/dtx.py``'s ``Coordinator``, ``Broker.dtx``), the one the 0-10 front end drives.

0-8 and 0-9 give dtx only ``select`` and ``start(dtx-identifier)``: the channel demarcates,
an outside transaction manager decides. The readings taken:

- the identifier is the xid (format 0, the identifier's UTF-8 octets as the global id, an
  empty branch qualifier), so a 0-10 client (``dtx.prepare``/``commit``/``rollback``/
  ``recover``) or any other front end of the coordinator sees and decides the branch;
- ``dtx.select`` puts the channel in dtx mode (406 on a tx channel; ``tx.select`` on a dtx
  channel is 406 too); ``dtx.start`` ends the channel's current branch, if any, with success
  (0-9 has no ``end``; the branch is then idle, ready to prepare) and starts the named one,
  or joins it if it is known and not prepared; from then on the channel's publishes and
  acks/rejects/nacks are held in the branch, and settled deliveries give their prefetch
  credit back at once (the branch, not the channel, holds them);
- ``tx.commit`` / ``tx.rollback`` on a dtx channel end the current branch and commit it in
  one phase / roll it back through the coordinator (commit-ok once it is on disk; a branch
  the coordinator rolled back, for a timeout or a failed association, is 406);
- a channel that closes (or whose connection drops) while associated ends its association
  with failure, as 0-10's session loss does: the branch can only roll back, and is rolled
  back at once when no other session is associated with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.errors import PreconditionFailed
from leveret.model.dtx import XA_OK
from leveret.model.transaction import ACCEPT, REJECT, RELEASE
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp091._generated import methods as m
from leveret.server.legacy.handlers import methods_of, register, reply

if TYPE_CHECKING:
    from leveret.model.dtx import Branch, Xid
    from leveret.protocol.amqp091.channel import ChannelState
    from leveret.server.legacy.channel import LegacyChannel

__all__ = ["DtxChannel", "xid_of"]

XID_FORMAT = 0


def xid_of(identifier: str) -> Xid:
    """The coordinator's xid for a 0-8/0-9 ``dtx-identifier``."""
    return (XID_FORMAT, identifier.encode(), b"")


class DtxChannel:
    """A channel selected for dtx: its current branch (see the module docstring)."""

    def __init__(self, channel: LegacyChannel) -> None:
        self.channel = channel
        self.branch: Branch | None = None

    @property
    def coordinator(self) -> Any:
        return self.channel.legacy.broker.dtx

    def start(self, identifier: str) -> None:
        self.end()
        xid = xid_of(identifier)
        coordinator = self.coordinator
        join = xid in coordinator.branches
        session = self.channel.session
        branch = coordinator.start(self, xid, session.vhost, join=join, resume=False)
        self.branch = branch
        session.publisher.tx = branch.tx

    def end(self, *, fail: bool = False) -> Branch | None:
        """End the association with the current branch (None if there is none)."""
        branch = self.branch
        if branch is None:
            return None
        self.branch = None
        self.channel.session.publisher.tx = None
        if not branch.finished:
            self.coordinator.end(self, branch.xid, fail=fail, suspend=False)
        return branch

    # -- what the channel does while associated --------------------------------------------

    def method(self, channel: ChannelState, method: m.Method) -> bool:
        """A 0-9-1 method on this channel; True when it was handled here."""
        if isinstance(method, m.TxSelect):
            raise PreconditionFailed("channel is selected for dtx, not tx")
        if isinstance(method, m.TxCommit):
            self._commit()
            return True
        if isinstance(method, m.TxRollback):
            self._rollback()
            return True
        if self.branch is None:
            return False
        if isinstance(method, m.BasicReject):
            self._settle(method.delivery_tag, False, RELEASE if method.requeue else REJECT)
            return True
        if isinstance(method, m.BasicNack):
            outcome = RELEASE if method.requeue else REJECT
            self._settle(method.delivery_tag, method.multiple, outcome)
            return True
        return False

    def ack(self, channel: ChannelState, delivery_tag: int, multiple: bool) -> bool:
        if self.branch is None:
            return False
        self._settle(delivery_tag, multiple, ACCEPT)
        return True

    def _settle(self, delivery_tag: int, multiple: bool, outcome: str) -> None:
        branch = self.branch
        assert branch is not None
        session = self.channel.session
        items = session._take(delivery_tag, multiple)
        session._release(items)  # the branch holds them now: the window moves on
        if outcome == ACCEPT:
            session.n_ack += len(items)
        for _tag, item in items:
            branch.tx.settle(outcome, item, None)
        session._redispatch()

    def _commit(self) -> None:
        branch = self.end()
        if branch is None:
            raise PreconditionFailed("tx.commit: no dtx branch was started on the channel")
        channel = self.channel
        legacy = channel.legacy

        def done(status: int) -> None:
            if legacy.channels.get(channel.id) is not channel or channel.closing:
                return
            if status == XA_OK:
                legacy.send_method(channel.id, m.TxCommitOk())
                return
            legacy.fail_channel(
                channel,
                PreconditionFailed(
                    f"tx.commit: dtx branch '{branch.xid[1].decode(errors='replace')}' was "
                    f"rolled back (XA status {status})",
                    class_id=m.TxCommit.CLASS_ID,
                    method_id=m.TxCommit.METHOD_ID,
                ),
            )

        self.coordinator.commit(branch.xid, one_phase=True, done=done)
        legacy.shell.published = True

    def _rollback(self) -> None:
        branch = self.end()
        if branch is None:
            raise PreconditionFailed("tx.rollback: no dtx branch was started on the channel")
        self.coordinator.rollback(branch.xid)
        self.channel.legacy.send_method(self.channel.id, m.TxRollbackOk())

    def close(self) -> None:
        """The channel is closing: the association fails; an idle branch rolls back now."""
        branch = self.branch
        if branch is None:
            return
        self.branch = None
        self.channel.session.publisher.tx = None
        coordinator = self.coordinator
        coordinator.session_gone(self, branch)
        if not branch.finished and branch.idle and not branch.prepared:
            coordinator.rollback(branch.xid)


@register(m08.DtxSelect, m09.DtxSelect)
def dtx_select(channel: LegacyChannel, method: Any) -> None:
    if "dtx" not in channel.extras:
        if channel.session.publisher.tx is not None:
            raise PreconditionFailed("channel is selected for tx, not dtx")
        channel.extras["dtx"] = DtxChannel(channel)
    reply(channel, methods_of(channel).DtxSelectOk())


@register(m08.DtxStart, m09.DtxStart)
def dtx_start(channel: LegacyChannel, method: Any) -> None:
    extra = channel.extras.get("dtx")
    if not isinstance(extra, DtxChannel):
        raise PreconditionFailed("dtx.start: the channel is not selected for dtx")
    extra.start(method.dtx_identifier)
    reply(channel, methods_of(channel).DtxStartOk())
