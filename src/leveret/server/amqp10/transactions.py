"""AMQP 1.0 local transactions (transactions spec, ``amqp:local-transactions``) over the
core's ``Transaction``: a connection's open transactions, which the coordinator link
(``coordinator.py``) declares and discharges.

- The coordinator link (``coordinator.py``) takes ``declare`` (answered with ``declared``
  and a new txn-id) and ``discharge`` (``fail`` false: commit, answered ``accepted`` once
  the store has what the transaction wrote; ``fail`` true: rollback). An unknown txn-id is
  ``rejected`` with ``amqp:transaction:unknown-id``; a commit the store could not write,
  with ``amqp:transaction:rollback``.
- A transfer whose state is ``transactional-state`` is published into its transaction
  (routed at commit; the publisher's checks are made when it arrives) and answered with
  ``transactional-state`` carrying ``accepted``.
- A consumer's disposition with ``transactional-state`` settles into the transaction:
  its outcome (accepted / rejected / released / modified as released, or as rejected when
  undeliverable here) is applied at commit, in the core's order; a rollback releases those
  deliveries back to their queues (redelivered), as Qpid's and Artemis's brokers do.
- Transactions belong to the connection (a client may declare on one session and work on
  links of another); closing the connection rolls back what is still open.

Not done: transactional acquisition (``txn-id`` in a flow's properties) and
``amqp:distributed-transactions``; the coordinator offers local transactions only.
Imported by the 1.0 front end's connection, session, links and coordinator.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from leveret.model import settle
from leveret.model.publisher import Publisher
from leveret.model.transaction import ACCEPT, REJECT, RELEASE, Transaction
from leveret.protocol.amqp10 import (
    Accepted,
    Modified,
    Rejected,
)
from leveret.protocol.amqp10.errors import AMQP10Error

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.message import Message
    from leveret.model.settle import Delivery
    from leveret.model.vhost import VirtualHost
    from leveret.protocol.amqp10.types import Value

log = logging.getLogger("leveret.amqp10")

__all__ = ["LOCAL_TRANSACTIONS", "ROLLBACK", "Transactions"]

LOCAL_TRANSACTIONS = "amqp:local-transactions"
UNKNOWN_ID = "amqp:transaction:unknown-id"
ROLLBACK = "amqp:transaction:rollback"


class Transactions:
    """A connection's open transactions, by txn-id."""

    def __init__(self, vhost: VirtualHost) -> None:
        self.vhost = vhost
        self.open: dict[bytes, Transaction] = {}
        self._next = 0
        # Routes the held publishes at commit; a transaction's returns go nowhere (each
        # transfer was answered when it arrived).
        self.publisher = Publisher(vhost, self)

    def declare(self) -> bytes:
        self._next += 1
        txn_id = b"txn-%d" % self._next
        self.open[txn_id] = Transaction()
        return txn_id

    def find(self, txn_id: Value) -> Transaction:
        txn = self.open.get(bytes(txn_id)) if isinstance(txn_id, bytes) else None
        if txn is None:
            raise AMQP10Error(UNKNOWN_ID, f"unknown transaction {txn_id!r}")
        return txn

    def publish(self, txn_id: Value, exchange: str, routing_key: str, message: Message) -> None:
        self.find(txn_id).publishes.append((exchange, routing_key, message, False, False))

    def settle(self, txn_id: Value, outcome: Value, deliveries: list[Delivery]) -> None:
        txn = self.find(txn_id)
        if isinstance(outcome, Rejected) or (
            isinstance(outcome, Modified) and outcome.undeliverable_here
        ):
            kind = REJECT
        elif outcome is None or isinstance(outcome, Accepted):
            kind = ACCEPT
        else:
            kind = RELEASE
        for delivery in deliveries:
            txn.settle(kind, delivery, None)

    def commit(self, txn_id: Value, done: Callable[[bool], None]) -> None:
        txn = self.find(txn_id)
        del self.open[bytes(txn_id)]  # type: ignore[arg-type]
        txn.commit(
            self.publisher.route,
            _apply,
            self.vhost.journal,
            done,
            self.publisher.take_remote,
        )

    def rollback(self, txn_id: Value) -> None:
        txn = self.find(txn_id)
        del self.open[bytes(txn_id)]  # type: ignore[arg-type]
        _release(txn)

    def close(self) -> None:
        """The connection closed: what is still open rolls back."""
        open_, self.open = self.open, {}
        for txn in open_.values():
            _release(txn)

    # -- PublishSink (the commit's routing) --------------------------------------------

    def returned(self, reason: str, message: Message) -> None:
        """Unroutable at commit: dropped (the transfer was answered already)."""

    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        """No confirms are selected on this publisher."""


def _apply(outcome: str, group: list[tuple[Delivery, object]]) -> None:
    deliveries = [d for d, _token in group]
    if outcome == ACCEPT:
        settle.accept(deliveries)
    elif outcome == REJECT:
        settle.reject(deliveries)
    else:
        settle.release(deliveries)


def _release(txn: Transaction) -> None:
    held = txn.rollback()
    if held:
        settle.release([d for d, _token in held])
