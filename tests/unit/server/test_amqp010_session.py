"""The 0-10 front end's message semantics in memory (``server/amqp010/session.py``):
release with and without set-redelivered, byte credit that covers header and body, acquiring
a browsed message of a priority queue, and browsing a queue deeper than its resident head."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.model.broker import Broker
from leveret.protocol.amqp010._generated import commands as c
from leveret.protocol.amqp010._generated.structs import Acquired, DeliveryProperties
from leveret.protocol.amqp010.sequence import SequenceSet
from leveret.testing import MemoryPager
from tests.queue_support import classic
from tests.unit.server.amqp010_support import Client010

if TYPE_CHECKING:
    from leveret.protocol.amqp010.events import CommandReceived

MESSAGES, OCTETS = 0, 1
EXPLICIT, PRE_ACQUIRED, NOT_ACQUIRED = 0, 0, 1
CREDIT_MODE = 0
ALL = 0xFFFFFFFF


def _client() -> Client010:
    return Client010().open()


def _subscribe(
    client: Client010,
    queue: str,
    destination: str = "d",
    *,
    browse: bool = False,
    messages: int = ALL,
    octets: int = ALL,
) -> None:
    client.send(
        c.MessageSubscribe(
            queue=queue,
            destination=destination,
            accept_mode=EXPLICIT,
            acquire_mode=NOT_ACQUIRED if browse else PRE_ACQUIRED,
        )
    )
    client.send(c.MessageSetFlowMode(destination=destination, flow_mode=CREDIT_MODE))
    if octets:
        client.send(c.MessageFlow(destination=destination, unit=OCTETS, value=octets))
    if messages:
        client.send(c.MessageFlow(destination=destination, unit=MESSAGES, value=messages))


def _redelivered(transfer: CommandReceived) -> bool:
    props = next(h for h in Client010.header_of(transfer) if isinstance(h, DeliveryProperties))
    return bool(props.redelivered)


def _ids(*transfers: CommandReceived) -> SequenceSet:
    return SequenceSet.of(*(t.command_id for t in transfers))


# -- release ------------------------------------------------------------------------------


def test_release_marks_redelivered_only_when_asked() -> None:
    client = _client()
    client.send(c.QueueDeclare(queue="q"))
    client.transfer("", "q", b"m")
    _subscribe(client, "q")
    first = client.transfers()[-1]
    assert not _redelivered(first)
    client.send(c.MessageRelease(transfers=_ids(first), set_redelivered=False))
    second = client.transfers()[-1]
    assert second.command_id != first.command_id
    assert second.body == b"m"
    assert not _redelivered(second)  # Qpid: it keeps its original mark
    client.send(c.MessageRelease(transfers=_ids(second), set_redelivered=True))
    third = client.transfers()[-1]
    assert third.command_id != second.command_id
    assert _redelivered(third)
    client.send(c.MessageRelease(transfers=_ids(third), set_redelivered=False))
    assert _redelivered(client.transfers()[-1])  # once marked, it stays marked
    assert client.exception() is None


def test_release_on_a_priority_queue_keeps_the_mark_too() -> None:
    client = _client()
    client.send(c.QueueDeclare(queue="pq", arguments={"x-max-priority": 5}))
    client.transfer("", "pq", b"m", priority=3)
    _subscribe(client, "pq")
    first = client.transfers()[-1]
    client.send(c.MessageRelease(transfers=_ids(first), set_redelivered=False))
    assert not _redelivered(client.transfers()[-1])
    assert client.transfers()[-1].command_id != first.command_id


# -- byte credit ----------------------------------------------------------------------------


def _transfer_size(transfer: CommandReceived) -> int:
    assert transfer.header is not None
    assert transfer.body is not None
    return len(transfer.header) + len(transfer.body)


def test_byte_credit_must_cover_header_and_body() -> None:
    probe = _client()
    probe.send(c.QueueDeclare(queue="q"))
    probe.transfer("", "q", b"x" * 100)
    _subscribe(probe, "q")
    size = _transfer_size(probe.transfers()[-1])
    assert size > 100
    client = _client()  # another broker: the same queue name, the same header size
    client.send(c.QueueDeclare(queue="q"))
    client.transfer("", "q", b"x" * 100)
    client.transfer("", "q", b"y" * 100)
    _subscribe(client, "q", octets=size - 1)  # covers the body, not the header
    assert client.transfers() == []
    client.send(c.MessageFlow(destination="d", unit=OCTETS, value=1))
    assert [t.body for t in client.transfers()] == [b"x" * 100]
    # The credit is spent exactly: the second waits for more.
    client.send(c.MessageFlow(destination="d", unit=OCTETS, value=size - 1))
    assert len(client.transfers()) == 1
    client.send(c.MessageFlow(destination="d", unit=OCTETS, value=1))
    assert [t.body for t in client.transfers()] == [b"x" * 100, b"y" * 100]


def test_a_browser_s_byte_credit_covers_header_and_body() -> None:
    client = _client()
    client.send(c.QueueDeclare(queue="q"))
    client.transfer("", "q", b"z" * 50)
    _subscribe(client, "q", "probe", browse=True)
    size = _transfer_size(client.transfers("probe")[-1])
    _subscribe(client, "q", "b", browse=True, octets=size - 1)
    assert client.transfers("b") == []
    client.send(c.MessageFlow(destination="b", unit=OCTETS, value=1))
    assert [t.body for t in client.transfers("b")] == [b"z" * 50]


# -- acquiring browsed messages ---------------------------------------------------------


def test_acquire_a_browsed_message_of_a_priority_queue() -> None:
    client = _client()
    client.send(c.QueueDeclare(queue="pq", arguments={"x-max-priority": 9}))
    for body, priority in ((b"low", 1), (b"high", 8), (b"mid", 4)):
        client.transfer("", "pq", body, priority=priority)
    _subscribe(client, "pq", browse=True)
    browsed = {t.body: t for t in client.transfers("d")}
    assert set(browsed) == {b"low", b"high", b"mid"}
    command_id = client.send(c.MessageAcquire(transfers=_ids(browsed[b"mid"])))
    result = client.result(command_id)
    assert isinstance(result, Acquired)
    assert result.transfers == _ids(browsed[b"mid"])
    queue = client.broker.vhosts["/"].queues["pq"]
    assert queue.message_count == 2
    # Acquired once only; the others are still there, in priority order.
    again = client.send(c.MessageAcquire(transfers=_ids(browsed[b"mid"])))
    assert client.result(again) == Acquired(transfers=SequenceSet())
    client.send(c.MessageAccept(transfers=_ids(browsed[b"mid"])))
    other = Client010(client.broker, client.users).open()
    _subscribe(other, "pq")
    assert [t.body for t in other.transfers()] == [b"high", b"low"]


# -- browsing a deep queue --------------------------------------------------------------


def _deep(count: int) -> tuple[Client010, Broker]:
    broker = Broker()
    broker.add_vhost("/")
    broker.attach_pager(MemoryPager())
    client = Client010(broker).open()
    client.send(c.QueueDeclare(queue="deep"))
    queue = classic(broker.vhosts["/"].queues["deep"])
    queue.resident_max, queue.resident_low, queue.page_messages = 8, 4, 5
    for i in range(count):
        client.transfer("", "deep", b"m%d" % i)
    assert len(queue.ready) < count  # most of it is paged
    return client, broker


def test_a_browser_sees_the_paged_tail_in_order() -> None:
    client, broker = _deep(40)
    _subscribe(client, "deep", browse=True, messages=15)
    assert [t.body for t in client.transfers()] == [b"m%d" % i for i in range(15)]
    client.send(c.MessageFlow(destination="d", unit=MESSAGES, value=ALL))
    assert [t.body for t in client.transfers()] == [b"m%d" % i for i in range(40)]
    queue = classic(broker.vhosts["/"].queues["deep"])
    assert queue.message_count == 40  # browsing took nothing
    # Messages arriving later are seen too.
    client.transfer("", "deep", b"late")
    assert client.transfers()[-1].body == b"late"


def test_acquire_a_browsed_message_from_the_paged_tail() -> None:
    client, broker = _deep(30)
    _subscribe(client, "deep", browse=True)
    browsed = {t.body: t for t in client.transfers("d")}
    wanted = browsed[b"m25"], browsed[b"m2"]
    command_id = client.send(c.MessageAcquire(transfers=_ids(*wanted)))
    result = client.result(command_id)
    assert isinstance(result, Acquired)
    assert result.transfers == _ids(*wanted)
    client.send(c.MessageAccept(transfers=_ids(*wanted)))
    queue = classic(broker.vhosts["/"].queues["deep"])
    assert queue.message_count == 28
    consumer = Client010(broker, client.users).open()
    _subscribe(consumer, "deep")
    expected = [b"m%d" % i for i in range(30) if i not in (2, 25)]
    assert [t.body for t in consumer.transfers()] == expected


def test_a_subscription_whose_queue_was_deleted_can_still_be_cancelled() -> None:
    client = _client()
    client.send(c.QueueDeclare(queue="q"))
    _subscribe(client, "q", "acquiring")
    _subscribe(client, "q", "browsing", browse=True)
    client.send(c.QueueDelete(queue="q"))
    client.send(c.MessageFlow(destination="acquiring", unit=MESSAGES, value=1))
    client.send(c.MessageCancel(destination="acquiring"))
    client.send(c.MessageCancel(destination="browsing"))
    assert client.exception() is None
    client.send(c.MessageCancel(destination="acquiring"))
    exc = client.exception()
    assert exc is not None
    assert exc.error_code == 404


# -- no-local --------------------------------------------------------------------------------


def test_no_local_drops_what_the_owner_s_connection_published() -> None:
    client = _client()
    client.send(c.QueueDeclare(queue="nl", exclusive=True, arguments={"no-local": "true"}))
    client.send(c.ExchangeBind(queue="nl", exchange="amq.fanout", binding_key="k"))
    _subscribe(client, "nl")
    client.transfer("", "nl", b"local")
    assert client.attach(2)  # another session of the same connection is local too
    client.transfer("", "nl", b"local-2", channel=2)
    other = Client010(client.broker, client.users).open()
    other.transfer("amq.fanout", "k", b"foreign")
    client.pump()
    assert [t.body for t in client.transfers()] == [b"foreign"]
    assert client.broker.vhosts["/"].queues["nl"].message_count == 0  # dropped, not stuck


def test_no_local_follows_a_message_rerouted_to_an_alternate_exchange() -> None:
    client = _client()
    other = Client010(client.broker, client.users).open()
    client.send(c.QueueDeclare(queue="holding", alternate_exchange="amq.fanout"))
    other.transfer("", "holding", b"a")
    client.transfer("", "holding", b"b")
    other.transfer("", "holding", b"c")
    client.send(c.QueueDeclare(queue="mine", exclusive=True, arguments={"no-local": True}))
    client.send(c.ExchangeBind(queue="mine", exchange="amq.fanout", binding_key=""))
    _subscribe(client, "mine")
    client.send(c.QueueDelete(queue="holding"))
    assert [t.body for t in client.transfers()] == [b"a", b"c"]


# -- deleted queues and their alternate exchange ----------------------------------------------


def _dead_letters(client: Client010) -> None:
    client.send(c.ExchangeDeclare(exchange="dlx", type="fanout"))
    client.send(c.QueueDeclare(queue="dead"))
    client.send(c.ExchangeBind(queue="dead", exchange="dlx", binding_key=""))


def _dead(client: Client010) -> list[bytes]:
    entries = client.broker.vhosts["/"].queues["dead"].ready_entries()
    return [e.message.body for e in entries]


def test_an_auto_delete_queue_s_messages_go_to_its_alternate_with_its_last_subscriber() -> None:
    client = _client()
    _dead_letters(client)
    owner = Client010(client.broker, client.users).open()
    owner.send(c.QueueDeclare(queue="ad", alternate_exchange="dlx", auto_delete=True))
    for body in (b"one", b"two", b"three"):
        owner.transfer("", "ad", body)
    _subscribe(owner, "ad", messages=1)
    assert [t.body for t in owner.transfers()] == [b"one"]  # acquired, not accepted
    owner.send(c.MessageCancel(destination="d"))
    assert "ad" not in client.broker.vhosts["/"].queues
    assert _dead(client) == [b"one", b"two", b"three"]
    owner.send(c.MessageAccept(transfers=_ids(owner.transfers()[0])))  # changes nothing
    assert _dead(client) == [b"one", b"two", b"three"]


def test_an_exclusive_queue_s_messages_go_to_its_alternate_with_its_session() -> None:
    client = _client()
    _dead_letters(client)
    owner = Client010(client.broker, client.users).open()
    owner.send(c.QueueDeclare(queue="ex", alternate_exchange="dlx", exclusive=True))
    for body in (b"one", b"two"):
        owner.transfer("", "ex", body)
    _subscribe(owner, "ex", messages=1)
    owner.server.connection_lost()
    assert _dead(client) == [b"one", b"two"]


def test_queue_delete_reroutes_what_other_sessions_acquired() -> None:
    client = _client()
    _dead_letters(client)
    client.send(c.QueueDeclare(queue="q", alternate_exchange="dlx"))
    for body in (b"one", b"two", b"three"):
        client.transfer("", "q", body)
    holder = Client010(client.broker, client.users).open()
    _subscribe(holder, "q", messages=2)
    assert len(holder.transfers()) == 2
    client.send(c.QueueDelete(queue="q"))
    assert _dead(client) == [b"one", b"two", b"three"]
    holder.server.connection_lost()  # releasing them now changes nothing
    assert _dead(client) == [b"one", b"two", b"three"]
