"""What the model tells its journal, and publisher confirms that wait for the commit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.model.broker import Broker
from leveret.model.message import HINT_PERSISTENT, Message
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, make_message

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


class FakeJournal:
    """Records every call; commits only when told to."""

    def __init__(self) -> None:
        self.writes = 0
        self.ok = True
        self.calls: list[tuple[Any, ...]] = []
        self.waiting: list[Callable[[], None]] = []
        self._next = 0

    def exchange_declared(
        self,
        vhost: str,
        name: str,
        type_name: str,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, object],
    ) -> None:
        self.calls.append(("x+", name, type_name))

    def exchange_deleted(self, vhost: str, name: str) -> None:
        self.calls.append(("x-", name))

    def queue_declared(
        self, vhost: str, name: str, auto_delete: bool, arguments: Mapping[str, object]
    ) -> int:
        self.calls.append(("q+", name))
        return 7

    def queue_deleted(self, vhost: str, name: str, store_id: int) -> None:
        self.calls.append(("q-", name, store_id))

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
        self.calls.append(("b+" if added else "b-", source, destination, routing_key))

    def enqueued(self, queue_id: int, message: Message, at_ms: int = 0) -> int:
        self._next += 1
        self.writes += 1
        self.calls.append(("enq", queue_id, message.body))
        return self._next

    def delivered(self, queue_id: int, sid: int) -> None:
        self.calls.append(("dlv", queue_id, sid))

    def removed(self, queue_id: int, sid: int) -> None:
        self.calls.append(("rm", queue_id, sid))

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.waiting.append(callback)

    def dtx_committed(self, key: bytes) -> int:
        self._next += 1
        self.calls.append(("dtx+", key, self._next))
        return self._next

    def dtx_forgotten(self, marker: int) -> None:
        self.calls.append(("dtx-", marker))

    def commit(self) -> None:
        waiting, self.waiting = self.waiting, []
        for callback in waiting:
            callback()


def persistent(body: bytes, key: str) -> Message:
    message = make_message(body, key)
    message.hints |= HINT_PERSISTENT
    return message


def world() -> tuple[Broker, FakeJournal, Session, RecordingSink]:
    broker = Broker()
    journal = FakeJournal()
    broker.attach_journal(journal)
    vhost = broker.vhosts["/"]
    sink = RecordingSink()
    owner = object()
    session = Session(vhost, owner, sink)
    vhost.declare_queue("durable", owner=owner, durable=True)
    vhost.declare_queue("transient", owner=owner)
    vhost.declare_queue("excl", owner=owner, durable=True, exclusive=True)
    return broker, journal, session, sink


def test_only_durable_non_exclusive_queues_and_durable_bindings_are_journaled() -> None:
    broker, journal, _session, _sink = world()
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("dx", "direct", durable=True)
    vhost.declare_exchange("tx", "direct")
    vhost.bind_queue("durable", "dx", "k", {}, owner=None)
    vhost.bind_queue("transient", "dx", "k", {}, owner=None)
    vhost.bind_queue("durable", "tx", "k", {}, owner=None)
    vhost.bind_exchange("dx", "amq.topic", "#", {})
    vhost.unbind_queue("durable", "dx", "k", {}, owner=None)
    vhost.delete_exchange("dx")
    vhost.delete_queue("durable", owner=None)
    assert journal.calls == [
        ("q+", "durable"),
        ("x+", "dx", "direct"),
        ("b+", "dx", "durable", "k"),
        ("b+", "amq.topic", "dx", "#"),
        ("b-", "dx", "durable", "k"),
        ("x-", "dx"),
        ("q-", "durable", 7),
    ]


def test_persistent_messages_in_durable_queues_are_written_and_removed() -> None:
    _broker, journal, session, _sink = world()
    session.publish("", "durable", persistent(b"p", "durable"))
    session.publish("", "durable", make_message(b"t", "durable"))
    session.publish("", "transient", persistent(b"p2", "transient"))
    assert journal.calls[1:] == [("enq", 7, b"p")]
    result = session.get("durable", no_ack=False)
    assert result is not None
    tag = result[0]
    session.ack(tag)
    assert journal.calls[2:] == [("dlv", 7, 1), ("rm", 7, 1)]


def test_confirms_of_stored_messages_wait_for_the_commit() -> None:
    _broker, journal, session, sink = world()
    session.select_confirm()
    session.publish("", "transient", make_message(b"t", "transient"))
    session.flush_confirms()
    assert [(e.delivery_tag, e.multiple) for e in sink.take("confirm")] == [(1, False)]
    session.publish("", "durable", persistent(b"p", "durable"))
    session.publish("", "transient", make_message(b"t", "transient"))
    session.flush_confirms()
    assert sink.take("confirm") == []
    # A later transient publish queues behind: a multiple ack must not overtake the write.
    session.publish("", "transient", make_message(b"t2", "transient"))
    session.flush_confirms()
    assert sink.take("confirm") == []
    journal.commit()
    assert [(e.delivery_tag, e.multiple) for e in sink.take("confirm")] == [(3, True), (4, False)]
    session.publish("", "transient", make_message(b"t3", "transient"))
    session.flush_confirms()
    assert [(e.delivery_tag, e.multiple) for e in sink.take("confirm")] == [(5, False)]


def test_no_confirm_after_the_channel_closed() -> None:
    _broker, journal, session, sink = world()
    session.select_confirm()
    session.publish("", "durable", persistent(b"p", "durable"))
    session.flush_confirms()
    session.close()
    journal.commit()
    assert sink.take("confirm") == []


def test_tx_commit_completes_only_after_the_store_commit() -> None:
    _broker, journal, session, _sink = world()
    session.select_tx()
    done: list[bool] = []
    session.commit(done.append)
    assert done == [True]  # nothing in the transaction: nothing to wait for
    session.publish("", "durable", persistent(b"p", "durable"))
    session.commit(done.append)
    assert done == [True]
    journal.commit()
    assert done == [True, True]
    journal.ok = False  # a failed write: the callbacks run with ok False
    session.publish("", "durable", persistent(b"p2", "durable"))
    session.commit(done.append)
    journal.commit()
    assert done == [True, True, False]
