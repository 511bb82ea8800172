"""A durable delayed exchange's pending messages in the message store: written with their
due times, removed when routed, cancelled or dropped with the exchange, and given back by
recovery with the due times they had."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from leveret.convert.amqp091 import wire_message
from leveret.convert.formats import stored_message
from leveret.model.broker import Broker
from leveret.model.queues.delayed import Selector
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.store.disk import DiskStore
from leveret.store.recovery import restore

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from leveret.model.queues.delayed import DelayQueue
    from leveret.model.vhost import VirtualHost

WALL = 1_700_000_000.0


def _boot(path: Path) -> tuple[Broker, DiskStore]:
    store = DiskStore(path)
    recovered = store.open()
    broker = Broker()
    broker.timers.wall_offset = WALL
    restore(broker, recovered, stored_message)
    broker.attach_journal(store)
    return broker, store


def _run(store: DiskStore, work: Callable[[], None]) -> None:
    async def main() -> None:
        store.start(asyncio.get_running_loop())
        work()
        for _ in range(10):
            await asyncio.sleep(0.01)
        store.close()

    asyncio.run(main())


def _store(vhost: VirtualHost) -> DelayQueue:
    store = vhost.delay_store(vhost.exchanges["d"])
    assert store is not None
    return store


def _publish(vhost: VirtualHost, body: bytes, delay: int, **props: object) -> None:
    raw = BasicProperties(headers={"x-delay": delay}, **props).encode()  # type: ignore[arg-type]
    message = wire_message("d", "k", raw, body)
    queues, message = vhost.router.route_publish(vhost.exchanges["d"], "k", message)
    for queue in queues:
        queue.enqueue(message)


def test_pending_messages_come_back_with_their_due_times(tmp_path: Path) -> None:
    broker, disk = _boot(tmp_path)
    vhost = broker.vhosts["/"]

    def work() -> None:
        vhost.declare_exchange(
            "d", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"}
        )
        vhost.declare_exchange(
            "t", "x-delayed-message", arguments={"x-delayed-type": "direct"}
        )  # not durable: nothing of it is kept
        vhost.declare_queue("q", owner=None, durable=True)
        vhost.bind_queue("q", "d", "k", {}, owner=None)
        _publish(vhost, b"transient", 5000, delivery_mode=1, message_id="a")
        _publish(vhost, b"soon", 1000, delivery_mode=2)
        _publish(vhost, b"cancelled", 3000, message_id="c")
        _publish(vhost, b"later", 9000, delivery_mode=2)
        assert _store(vhost).cancel(Selector(message_id="c")) == 1
        broker.timers.expire(1.0)  # "soon" is routed to q (persistent: stored there)

    _run(disk, work)
    broker, disk = _boot(tmp_path)
    vhost = broker.vhosts["/"]
    assert "t" not in vhost.exchanges
    store = _store(vhost)
    due = int(WALL * 1000)
    for entry in store.entries():
        entry.identify()
    assert [(e.message.body, e.due, e.message_id) for e in store.entries()] == [
        (b"transient", due + 5000, "a"),
        (b"later", due + 9000, None),
    ]
    assert [e.message.body for e in vhost.queues["q"].ready_entries()] == [b"soon"]
    assert vhost.queues["q"].ready_entries()[0].message.headers == {"x-delay": -1000}
    broker.timers.expire(5.0)
    assert [e.message.body for e in vhost.queues["q"].ready_entries()] == [b"soon", b"transient"]

    def more() -> None:
        _publish(vhost, b"new", 100)  # after a restart the store's id is the recovered one

    _run(disk, more)
    broker, disk = _boot(tmp_path)
    vhost = broker.vhosts["/"]
    assert [e.message.body for e in _store(vhost).entries()] == [b"new", b"later"]

    def delete() -> None:
        vhost.delete_exchange("d")

    _run(disk, delete)
    broker, disk = _boot(tmp_path)
    disk.close()
    vhost = broker.vhosts["/"]
    assert "d" not in vhost.exchanges
    assert [q.name for q in vhost.queues.values()] == ["q"]
