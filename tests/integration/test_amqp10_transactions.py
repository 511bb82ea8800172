"""AMQP 1.0 local transactions through Qpid Proton's container API, as its tx_send.py and
tx_recv.py examples use them: publishes held until commit and dropped on rollback,
consumer acceptances applied at commit and undone on rollback (the messages come back),
an unknown transaction refused. Leveret only (RabbitMQ has no 1.0 transactions)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pika
import pytest
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(60)]


def _url(broker: Broker) -> str:
    return f"amqp://guest:guest@{broker.host}:{broker.port}"


def _count(broker: Broker, queue: str) -> int:
    params = pika.ConnectionParameters(host=broker.host, port=broker.port)
    with pika.BlockingConnection(params) as conn:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)


def _declare(broker: Broker, queue: str) -> None:
    params = pika.ConnectionParameters(host=broker.host, port=broker.port)
    with pika.BlockingConnection(params) as conn:
        conn.channel().queue_declare(queue)


class TxSend(MessagingHandler, TransactionHandler):
    """Proton's tx_send.py: batches of messages, each batch one transaction; with
    ``abort_batches`` those batches are rolled back instead (and sent again)."""

    def __init__(
        self, url: str, address: str, total: int, batch: int, abort_batches: int = 0
    ) -> None:
        super().__init__()
        self.url, self.address, self.total, self.batch = url, address, total, batch
        self.abort_batches = abort_batches
        self.current = 0
        self.committed = 0
        self.aborted = 0
        self.counts_at_commit: list[int] = []
        self.transaction: Any = None
        self.count: Any = None

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.conn = self.container.connect(self.url)
        self.sender = self.container.create_sender(self.conn, self.address)
        self.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event: Any) -> None:
        self.transaction = event.transaction
        self.send()

    def on_sendable(self, event: Any) -> None:
        self.send()

    def send(self) -> None:
        while (
            self.transaction and self.sender.credit and self.committed + self.current < self.total
        ):
            seq = self.committed + self.current + 1
            self.transaction.send(self.sender, Message(id=seq, body={"sequence": seq}))
            self.current += 1
            if self.current == self.batch:
                if self.count is not None:
                    self.counts_at_commit.append(self.count())
                if self.aborted < self.abort_batches:
                    self.transaction.abort()
                else:
                    self.transaction.commit()
                self.transaction = None

    def on_transaction_committed(self, event: Any) -> None:
        self.committed += self.current
        self.current = 0
        if self.committed == self.total:
            event.connection.close()
        else:
            self.container.declare_transaction(self.conn, handler=self)

    def on_transaction_aborted(self, event: Any) -> None:
        self.aborted += 1
        self.current = 0
        self.container.declare_transaction(self.conn, handler=self)


class TxRecv(MessagingHandler, TransactionHandler):
    """Proton's tx_recv.py: accept a batch inside a transaction, then commit (or, for the
    first ``abort_batches``, roll back)."""

    def __init__(self, url: str, address: str, expected: int, batch: int, abort: int = 0) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url, self.address, self.expected, self.batch = url, address, expected, batch
        self.abort = abort
        self.current = 0
        self.received = 0
        self.bodies: list[int] = []
        self.transaction: Any = None

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.conn = self.container.connect(self.url)
        self.receiver = self.container.create_receiver(self.conn, self.address)
        self.container.declare_transaction(self.conn, handler=self)

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body["sequence"])
        self.transaction.accept(event.delivery)
        self.current += 1
        if self.current == self.batch:
            if self.abort:
                self.abort -= 1
                self.transaction.abort()
            else:
                self.transaction.commit()
            self.transaction = None

    def on_transaction_declared(self, event: Any) -> None:
        self.receiver.flow(self.batch)
        self.transaction = event.transaction

    def on_transaction_committed(self, event: Any) -> None:
        self.received += self.current
        self.current = 0
        if self.received < self.expected:
            self.container.declare_transaction(self.conn, handler=self)
        else:
            event.connection.close()

    def on_transaction_aborted(self, event: Any) -> None:
        self.current = 0
        self.container.declare_transaction(self.conn, handler=self)


def test_tx_send_publishes_only_at_commit(broker: Broker, name: str) -> None:
    _declare(broker, name)
    sender = TxSend(_url(broker), f"/queues/{name}", total=20, batch=5, abort_batches=2)
    sender.count = lambda: _count(broker, name)
    Container(sender).run()
    assert sender.committed == 20
    assert sender.aborted == 2
    # At each commit (or abort) request, only the committed batches were in the queue.
    assert sender.counts_at_commit == [0, 0, 0, 5, 10, 15]
    assert _count(broker, name) == 20
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        receiver: Any = c.create_receiver(f"/queues/{name}", credit=20)
        got = []
        for _ in range(20):
            got.append(receiver.receive(timeout=5).body["sequence"])
            receiver.accept()
    finally:
        c.close()
    assert got == list(range(1, 21))


def test_tx_recv_accepts_at_commit_and_rollback_returns_messages(broker: Broker, name: str) -> None:
    _declare(broker, name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        sender = c.create_sender(f"/queues/{name}")
        for i in range(1, 11):
            sender.send(Message(body={"sequence": i}))
    finally:
        c.close()
    receiver = TxRecv(_url(broker), f"/queues/{name}", expected=10, batch=5, abort=1)
    Container(receiver).run()
    # The first batch was rolled back: its messages came back and were taken again.
    assert receiver.received == 10
    assert sorted(set(receiver.bodies)) == list(range(1, 11))
    assert len(receiver.bodies) == 15
    assert _count(broker, name) == 0


class _UnknownTxn(MessagingHandler, TransactionHandler):
    def __init__(self, url: str, address: str) -> None:
        super().__init__()
        self.url, self.address = url, address
        self.state: Any = None
        self.condition: Any = None

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(conn, self.address)
        event.container.declare_transaction(conn, handler=self)

    def on_transaction_declared(self, event: Any) -> None:
        event.transaction.id = b"no-such-txn"  # discharge a transaction never declared
        event.transaction.commit()

    def on_transaction_committed(self, event: Any) -> None:
        self.state = "committed"
        event.connection.close()

    def on_transaction_commit_failed(self, event: Any) -> None:
        self.state = "commit failed"
        self.condition = event.delivery.remote.condition
        event.connection.close()


def test_discharging_an_unknown_transaction_is_refused(broker: Broker, name: str) -> None:
    _declare(broker, name)
    handler = _UnknownTxn(_url(broker), f"/queues/{name}")
    Container(handler).run()
    assert handler.state == "commit failed"
    assert handler.condition.name == "amqp:transaction:unknown-id"
