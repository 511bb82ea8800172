"""The AMQP 1.0 transaction coordinator link (transactions spec, 4.3 ff.): the link a
client attaches to a ``coordinator`` target. It takes ``declare`` (answered with
``declared`` and a new txn-id from the connection's ``Transactions``) and ``discharge``
(``fail`` false: commit, answered ``accepted`` once the store has what the transaction
wrote, ``rejected`` with ``amqp:transaction:rollback`` when it could not; ``fail`` true:
rollback, answered at once). Anything else is ``rejected`` with the error.

Imported by the 1.0 front end's session and connection.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from leveret.protocol.amqp10 import (
    Accepted,
    AmqpValue,
    Declare,
    Declared,
    Discharge,
    Error,
    Rejected,
)
from leveret.protocol.amqp10.errors import AMQP10Error
from leveret.protocol.amqp10.types import decode_value
from leveret.server.amqp10.transactions import ROLLBACK

if TYPE_CHECKING:
    from leveret.protocol.amqp10.events import MessageReceived
    from leveret.protocol.amqp10.types import Value
    from leveret.server.amqp10.session_core import SessionCore

log = logging.getLogger("leveret.amqp10")

__all__ = ["CoordinatorLink"]


class CoordinatorLink:
    """The link a client attached to the coordinator: declares and discharges."""

    def __init__(self, session: SessionCore, handle: int, name: str) -> None:
        self.session = session
        self.handle = handle
        self.name = name
        self.closed = False

    def receive(self, event: MessageReceived) -> None:
        session = self.session
        transactions = session.transactions
        delivery_id = event.delivery_id
        try:
            request = _request(event.payload)
            if isinstance(request, Declare):
                if request.global_id is not None:
                    raise AMQP10Error(
                        "amqp:not-implemented", "distributed transactions are not supported"
                    )
                state: Value = Declared(txn_id=transactions.declare())
            else:
                txn_id = request.txn_id
                if request.fail:
                    transactions.rollback(txn_id)
                    state = Accepted()
                else:

                    def done(ok: bool) -> None:
                        answer: Value = (
                            Accepted()
                            if ok
                            else Rejected(
                                error=Error(condition=ROLLBACK, description="store write failed")
                            )
                        )
                        session.settle_incoming(delivery_id, delivery_id, answer)

                    transactions.commit(txn_id, done)
                    return
        except AMQP10Error as exc:
            log.info("transaction request refused: %s", exc)
            state = Rejected(error=Error(condition=exc.condition, description=exc.description))
        session.settle_incoming(delivery_id, delivery_id, state)

    def close(self) -> None:
        self.closed = True


def _request(payload: bytes) -> Declare | Discharge:
    """The coordinator's request: the ``amqp-value`` of a declare or discharge."""
    off = 0
    while off < len(payload):
        value, off = decode_value(payload, off)
        if isinstance(value, AmqpValue):
            inner = value.value
            if isinstance(inner, (Declare, Discharge)):
                return inner
    raise AMQP10Error("amqp:decode-error", "not a declare or discharge")
