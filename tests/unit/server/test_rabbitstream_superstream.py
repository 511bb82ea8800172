"""The stream protocol's super stream commands and single active consumer across a super
stream's partitions, without sockets (the machine of ``server/rabbitstream``, driven by a
client-role codec as in ``test_rabbitstream_connection.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.constants import Code, Key, OffsetType
from tests.unit.server.test_rabbitstream_connection import (
    Client,
    code_of,
    delivered,
    new_server,
    publish,
)

if TYPE_CHECKING:
    from leveret.server.rabbitstream import StreamServer


@pytest.fixture
def server() -> StreamServer:
    made = new_server()
    made.users.add_user("no-bind", "pw")  # may configure and write, not read the exchange
    made.users.set_permissions("no-bind", "/", ".*", ".*", "^$")
    return made


@pytest.fixture
def client(server: StreamServer) -> Client:
    cl = Client(server)
    cl.open()
    return cl


def create(cl: Client, name: str, count: int, arguments: dict[str, str] | None = None) -> int:
    streams = [f"{name}-{i}" for i in range(count)]
    keys = [str(i) for i in range(count)]
    return code_of(
        cl.call(c.CreateSuperStream(cl.next_cid(), name, streams, keys, arguments or {}))
    )


def test_create_route_partitions_delete(server: StreamServer, client: Client) -> None:
    assert create(client, "invoices", 3, {"max-age": "1D"}) == Code.OK
    vhost = server.broker.vhosts["/"]
    assert vhost.exchanges["invoices"].arguments == {"x-super-stream": True}
    assert vhost.queues["invoices-1"].arguments["x-max-age"] == "1D"
    got = client.call(c.Partitions(client.next_cid(), "invoices"))
    assert got == c.StreamsResponse(
        Key.PARTITIONS, client.cid, Code.OK, ["invoices-0", "invoices-1", "invoices-2"]
    )
    got = client.call(c.Route(client.next_cid(), "2", "invoices"))
    assert got == c.StreamsResponse(Key.ROUTE, client.cid, Code.OK, ["invoices-2"])
    got = client.call(c.Route(client.next_cid(), "9", "invoices"))
    assert got == c.StreamsResponse(Key.ROUTE, client.cid, Code.OK, [])
    assert create(client, "invoices", 3) == Code.STREAM_ALREADY_EXISTS
    # The partitions are streams like any other: publish to one, read it back.
    client.call(c.DeclarePublisher(client.next_cid(), 1, None, "invoices-2"))
    publish(client, 1, [b"x"])
    read = client.send(c.Subscribe(client.next_cid(), 1, "invoices-2", OffsetType.FIRST, 0, 5))
    assert [b for _o, b in delivered(read)] == [b"x"]
    deleted = client.send(c.DeleteSuperStream(client.next_cid(), "invoices"))
    assert c.Response(Key.DELETE_SUPER_STREAM, client.cid, Code.OK) in deleted
    # Its subscriber and publisher on the deleted partition are told.
    updates = [g for g in deleted if isinstance(g, c.MetadataUpdate)]
    assert [u.stream for u in updates] == ["invoices-2"]
    assert "invoices" not in vhost.exchanges
    assert not [q for q in vhost.queues if q.startswith("invoices")]
    got = client.call(c.DeleteSuperStream(client.next_cid(), "invoices"))
    assert code_of(got) == Code.STREAM_DOES_NOT_EXIST


def test_unknown_super_stream_codes(client: Client) -> None:
    got = client.call(c.Partitions(client.next_cid(), "none"))
    assert got == c.StreamsResponse(Key.PARTITIONS, client.cid, Code.STREAM_DOES_NOT_EXIST, [])
    got = client.call(c.Route(client.next_cid(), "0", "none"))
    assert got == c.StreamsResponse(Key.ROUTE, client.cid, Code.STREAM_DOES_NOT_EXIST, [])


@pytest.mark.parametrize(
    ("name", "streams", "keys", "arguments", "expected"),
    [
        ("", ["a"], ["0"], {}, Code.PRECONDITION_FAILED),
        ("amq.s", ["a"], ["0"], {}, Code.PRECONDITION_FAILED),
        ("s", [], [], {}, Code.PRECONDITION_FAILED),
        ("s", ["s-0", "s-1"], ["0"], {}, Code.PRECONDITION_FAILED),
        ("s", ["s-0"], ["0"], {"max-age": "soon"}, Code.PRECONDITION_FAILED),
        ("s", ["s-0", "taken"], ["0", "1"], {}, Code.STREAM_ALREADY_EXISTS),
    ],
)
def test_create_refusals_leave_nothing(
    server: StreamServer,
    client: Client,
    name: str,
    streams: list[str],
    keys: list[str],
    arguments: dict[str, str],
    expected: int,
) -> None:
    client.call(c.Create(client.next_cid(), "taken", {}))
    vhost = server.broker.vhosts["/"]
    before = (set(vhost.exchanges), set(vhost.queues))
    got = client.call(c.CreateSuperStream(client.next_cid(), name, streams, keys, arguments))
    assert got == c.Response(Key.CREATE_SUPER_STREAM, client.cid, expected)
    assert (set(vhost.exchanges), set(vhost.queues)) == before


def test_a_name_loses_its_cr_lf(server: StreamServer, client: Client) -> None:
    got = client.call(c.CreateSuperStream(client.next_cid(), "s\r\n", ["s-0"], ["0"], {}))
    assert code_of(got) == Code.OK
    assert "s" in server.broker.vhosts["/"].exchanges


def test_permissions(server: StreamServer, client: Client) -> None:
    assert create(client, "s", 2) == Code.OK
    vhost = server.broker.vhosts["/"]
    for user in ("reader", "no-bind"):
        other = Client(server)
        other.open(user, "pw")
        assert create(other, "t", 2) == Code.ACCESS_REFUSED
        got = other.call(c.DeleteSuperStream(other.next_cid(), "s"))
        assert code_of(got) == Code.ACCESS_REFUSED
        # Route and partitions check nothing (RabbitMQ checks nothing).
        got = other.call(c.Partitions(other.next_cid(), "s"))
        assert isinstance(got, c.StreamsResponse)
        assert got.streams == ["s-0", "s-1"]
    assert "t" not in vhost.exchanges
    assert "s-0" in vhost.queues


def _update(cl: Client) -> c.ConsumerUpdate:
    updates = [g for g in cl.pump() if isinstance(g, c.ConsumerUpdate)]
    assert len(updates) == 1, updates
    return updates[0]


def _answer(cl: Client, update: c.ConsumerUpdate) -> list[c.Command]:
    return cl.send(c.ConsumerUpdateResponse(update.correlation_id, Code.OK, OffsetType.FIRST, 0))


def test_single_active_consumer_spreads_partitions_and_rebalances(
    server: StreamServer, client: Client
) -> None:
    assert create(client, "s", 3) == Code.OK
    for i in range(3):
        client.call(c.DeclarePublisher(client.next_cid(), i, None, f"s-{i}"))
        publish(client, i, [b"p%d" % i])
    props = {"single-active-consumer": "true", "name": "app", "super-stream": "s"}
    a, b = Client(server), Client(server)
    a.open()
    b.open()
    # a subscribes to the three partitions: it is active on each.
    for i in range(3):
        got = a.send(c.Subscribe(a.next_cid(), i, f"s-{i}", OffsetType.NEXT, 0, 5, props))
        assert got[0] == c.Response(Key.SUBSCRIBE, a.cid, Code.OK)
        assert isinstance(got[1], c.ConsumerUpdate)
        assert (got[1].subscription_id, got[1].active) == (i, True)
        got = _answer(a, got[1])
        assert [body for _o, body in delivered(got)] == [b"p%d" % i]
    # b joins: for partition i the choice is member i mod 2, so b takes partition 1 (1 mod
    # 2) while a keeps 0 and 2; a steps down on 1 first and b is activated once it answered.
    for i in range(3):
        got = b.send(c.Subscribe(b.next_cid(), i, f"s-{i}", OffsetType.NEXT, 0, 5, props))
        assert got == [c.Response(Key.SUBSCRIBE, b.cid, Code.OK)]
    step_down = _update(a)
    assert (step_down.subscription_id, step_down.active) == (1, False)
    assert b.pump() == []  # not before a has answered
    publish(client, 1, [b"while stepping down"])
    assert delivered(a.pump()) == []  # a stopped taking chunks at once
    a.send(c.ConsumerUpdateResponse(step_down.correlation_id, Code.OK, OffsetType.NONE, 0))
    up = _update(b)
    assert (up.subscription_id, up.active) == (1, True)
    got = _answer(b, up)
    assert [body for _o, body in delivered(got)] == [b"p1", b"while stepping down"]
    groups = server.groups
    assert {k[1]: g.partition for k, g in groups.items()} == {"s-0": 0, "s-1": 1, "s-2": 2}
    # a goes: b becomes active on 0 and 2 (one member left), stays on 1.
    a.shell.connection_lost()
    updates = [g for g in b.pump() if isinstance(g, c.ConsumerUpdate)]
    assert sorted((u.subscription_id, u.active) for u in updates) == [(0, True), (2, True)]
    for update in updates:
        _answer(b, update)
    publish(client, 2, [b"after"])
    assert [body for _o, body in delivered(b.pump())] == [b"after"]
    b.shell.connection_lost()
    assert not server.groups


def test_a_partition_outside_a_super_stream_is_a_plain_group(
    server: StreamServer, client: Client
) -> None:
    client.call(c.Create(client.next_cid(), "plain", {}))
    props = {"single-active-consumer": "true", "name": "g", "super-stream": "nothing"}
    a, b = Client(server), Client(server)
    a.open()
    b.open()
    got = a.send(c.Subscribe(a.next_cid(), 1, "plain", OffsetType.FIRST, 0, 5, props))
    assert isinstance(got[1], c.ConsumerUpdate)
    b.send(c.Subscribe(b.next_cid(), 1, "plain", OffsetType.FIRST, 0, 5, props))
    assert a.pump() == []  # no rebalancing in a plain group: the first stays active
    assert next(iter(server.groups.values())).partition == -1


def test_an_activation_answered_after_a_step_down_request_does_not_attach(
    server: StreamServer, client: Client
) -> None:
    assert create(client, "s", 2) == Code.OK
    props = {"single-active-consumer": "true", "name": "app", "super-stream": "s"}
    a, b = Client(server), Client(server)
    a.open()
    b.open()
    got = a.send(c.Subscribe(a.next_cid(), 1, "s-1", OffsetType.FIRST, 0, 5, props))
    activation = got[1]
    assert isinstance(activation, c.ConsumerUpdate)
    b.send(c.Subscribe(b.next_cid(), 1, "s-1", OffsetType.FIRST, 0, 5, props))
    step_down = _update(a)
    assert not step_down.active
    _answer(a, activation)  # late: a was asked to step down meanwhile
    vhost = server.broker.vhosts["/"]
    assert not vhost.queues["s-1"].consumers
    a.send(c.ConsumerUpdateResponse(step_down.correlation_id, Code.OK, OffsetType.NONE, 0))
    assert _update(b).active
    # The one stepping down goes away instead of answering: the choice is activated anyway.
    c_ = Client(server)
    c_.open()
    c_.send(c.Subscribe(c_.next_cid(), 1, "s-1", OffsetType.FIRST, 0, 5, props))
    # members a, b, c: choice 1 mod 3 = b, already active (its answer still awaited).
    assert c_.pump() == []
    b.shell.connection_lost()  # members a, c: choice 1 mod 2 = c
    assert _update(c_).active


def test_the_vhost_queue_limit_refuses_the_whole_super_stream(
    server: StreamServer, client: Client
) -> None:
    server.users.set_vhost_limits("/", {"max-queues": 2})
    client.call(c.Create(client.next_cid(), "one", {}))
    vhost = server.broker.vhosts["/"]
    before = (set(vhost.exchanges), set(vhost.queues))
    code = create(client, "s", 2)  # the second partition would be the third queue
    assert code == Code.PRECONDITION_FAILED  # as the core refuses one queue too many
    assert (set(vhost.exchanges), set(vhost.queues)) == before
    assert create(client, "s", 1) == Code.OK


def test_a_reactivation_without_an_offset_starts_from_the_subscription_s_own(
    server: StreamServer, client: Client
) -> None:
    assert create(client, "s", 2) == Code.OK
    client.call(c.DeclarePublisher(client.next_cid(), 1, None, "s-1"))
    publish(client, 1, [b"old"])
    props = {"single-active-consumer": "true", "name": "app", "super-stream": "s"}
    a, b = Client(server), Client(server)
    a.open()
    b.open()
    got = a.send(c.Subscribe(a.next_cid(), 1, "s-1", OffsetType.NEXT, 0, 5, props))
    first = got[1]
    assert isinstance(first, c.ConsumerUpdate)
    got = _answer(a, first)  # this activation asks for the first offset
    assert [body for _o, body in delivered(got)] == [b"old"]
    b.send(c.Subscribe(b.next_cid(), 1, "s-1", OffsetType.NEXT, 0, 5, props))
    step_down = _update(a)
    a.send(c.ConsumerUpdateResponse(step_down.correlation_id, Code.OK, OffsetType.NONE, 0))
    _answer(b, _update(b))
    b.shell.connection_lost()
    again = _update(a)
    assert again.active
    got = a.send(c.ConsumerUpdateResponse(again.correlation_id, Code.OK, OffsetType.NONE, 0))
    assert delivered(got) == []  # from "next", its subscription's spec: nothing old
    publish(client, 1, [b"new"])
    assert [body for _o, body in delivered(a.pump())] == [b"new"]
