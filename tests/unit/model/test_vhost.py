"""Unit tests of a virtual host: declarations, exclusivity, auto-delete, routing, deletes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.errors import AccessRefused, NotFound, PreconditionFailed, ResourceLocked
from leveret.model.broker import Broker
from leveret.model.vhost import VirtualHost
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, make_message

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.queues.base import Queue

OWNER = object()


def routed(vhost: VirtualHost, exchange: str, key: str = "", body: bytes = b"m") -> list[str]:
    queues = vhost.router.route(vhost.exchange(exchange), key, make_message(body, key, exchange))
    return sorted(q.name for q in queues)


def queues(vhost: VirtualHost, *names: str) -> list[Queue]:
    return [vhost.declare_queue(n, owner=OWNER) for n in names]


# -- declarations ----------------------------------------------------------------------


def test_standard_exchanges_exist() -> None:
    vhost = VirtualHost("/")
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"} <= set(
        vhost.exchanges
    )


def test_reserved_exchange_names_are_403() -> None:
    vhost = VirtualHost("/")
    for name in ("amq.custom", ""):
        with pytest.raises(AccessRefused):
            vhost.declare_exchange(name, "direct")
        with pytest.raises(AccessRefused):
            vhost.delete_exchange(name)
    with pytest.raises(AccessRefused):
        vhost.declare_queue("amq.q", owner=OWNER)


def test_exchange_redeclare_must_be_equivalent() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("x", "direct", durable=True)
    assert vhost.declare_exchange("x", "direct", durable=True) is vhost.exchanges["x"]
    with pytest.raises(PreconditionFailed, match="type"):
        vhost.declare_exchange("x", "fanout", durable=True)
    with pytest.raises(PreconditionFailed, match="durable"):
        vhost.declare_exchange("x", "direct")


def test_passive_declares() -> None:
    vhost = VirtualHost("/")
    with pytest.raises(NotFound):
        vhost.declare_exchange("x", "direct", passive=True)
    with pytest.raises(NotFound):
        vhost.passive_declare("q", owner=OWNER)
    queues(vhost, "q")
    assert vhost.passive_declare("q", owner=object()) == ("q", 0, 0)


def test_server_named_queues() -> None:
    vhost = VirtualHost("/")
    a = vhost.declare_queue("", owner=OWNER)
    b = vhost.declare_queue("", owner=OWNER)
    assert a.name.startswith("amq.gen-")
    assert a.name != b.name


def test_queue_redeclare_compares_known_arguments_only() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("q", owner=OWNER, arguments={"x-max-length": 5, "x-other": 1})
    vhost.declare_queue("q", owner=OWNER, arguments={"x-max-length": 5, "x-other": 2})
    with pytest.raises(PreconditionFailed, match="x-max-length"):
        vhost.declare_queue("q", owner=OWNER, arguments={"x-max-length": 6})
    with pytest.raises(PreconditionFailed, match="durable"):
        vhost.declare_queue("q", owner=OWNER, durable=True, arguments={"x-max-length": 5})


# -- exclusive queues ------------------------------------------------------------------


def test_exclusive_queue_is_locked_to_its_owner_405() -> None:
    vhost = VirtualHost("/")
    owner, stranger = object(), object()
    vhost.declare_queue("q", owner=owner, exclusive=True)
    vhost.declare_exchange("x", "fanout")
    attempts: dict[str, Callable[[], object]] = {
        "declare": lambda: vhost.declare_queue("q", owner=stranger, exclusive=True),
        "passive": lambda: vhost.passive_declare("q", owner=stranger),
        "bind": lambda: vhost.bind_queue("q", "x", "", {}, owner=stranger),
        "unbind": lambda: vhost.unbind_queue("q", "x", "", {}, owner=stranger),
        "purge": lambda: vhost.purge_queue("q", owner=stranger),
        "delete": lambda: vhost.delete_queue("q", owner=stranger),
        "lookup": lambda: vhost.queue("q", stranger),
    }
    for what, attempt in attempts.items():
        with pytest.raises(ResourceLocked) as info:
            attempt()
        assert info.value.reply_code == 405, what
    session = Session(vhost, stranger, RecordingSink())
    with pytest.raises(ResourceLocked):
        session.consume("q", "", no_ack=True, exclusive=False, arguments={})
    with pytest.raises(ResourceLocked):
        session.get("q", no_ack=True)
    # The owner may do all of it.
    vhost.bind_queue("q", "x", "", {}, owner=owner)
    assert vhost.delete_queue("q", owner=owner) == 0


def test_redeclaring_with_a_different_exclusive_flag_is_405() -> None:
    """RabbitMQ: RESOURCE_LOCKED '... or the exclusive property value does not match'."""
    vhost = VirtualHost("/")
    owner = object()
    vhost.declare_queue("excl", owner=owner, exclusive=True)
    with pytest.raises(ResourceLocked):
        vhost.declare_queue("excl", owner=owner, exclusive=False)
    vhost.declare_queue("shared", owner=owner)
    with pytest.raises(ResourceLocked):
        vhost.declare_queue("shared", owner=object(), exclusive=True)


def test_exclusive_queues_go_with_their_connection() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    client = broker.connect(vhost, "guest", "test")
    vhost.declare_queue("mine", owner=client, exclusive=True)
    vhost.declare_queue("shared", owner=client)
    client.close()
    assert set(vhost.queues) == {"shared"}


# -- auto-delete exchanges -------------------------------------------------------------


def test_auto_delete_exchange_goes_after_its_last_queue_unbind() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "a", "b")
    vhost.declare_exchange("x", "direct", auto_delete=True)
    vhost.bind_queue("a", "x", "k", {}, owner=OWNER)
    vhost.bind_queue("b", "x", "k", {}, owner=OWNER)
    vhost.unbind_queue("a", "x", "k", {}, owner=OWNER)
    assert "x" in vhost.exchanges
    vhost.unbind_queue("b", "x", "k", {}, owner=OWNER)
    assert "x" not in vhost.exchanges


def test_auto_delete_exchange_without_bindings_stays_until_bound_once() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("x", "direct", auto_delete=True)
    assert "x" in vhost.exchanges


def test_auto_delete_exchange_goes_when_its_last_bound_queue_is_deleted() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "a")
    vhost.declare_exchange("x", "fanout", auto_delete=True)
    vhost.bind_queue("a", "x", "", {}, owner=OWNER)
    vhost.delete_queue("a", owner=OWNER)
    assert "x" not in vhost.exchanges


def test_auto_delete_exchange_goes_after_its_last_exchange_unbind() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("src", "fanout", auto_delete=True)
    vhost.declare_exchange("dst", "fanout")
    vhost.bind_exchange("dst", "src", "", {})
    vhost.unbind_exchange("dst", "src", "", {})
    assert "src" not in vhost.exchanges
    assert "dst" in vhost.exchanges


def test_auto_delete_source_goes_when_its_destination_exchange_is_deleted() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("src", "fanout", auto_delete=True)
    vhost.declare_exchange("dst", "fanout")
    vhost.bind_exchange("dst", "src", "", {})
    vhost.delete_exchange("dst")
    assert "src" not in vhost.exchanges


# -- routing ---------------------------------------------------------------------------


def test_default_exchange_routes_by_queue_name() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "q")
    assert routed(vhost, "", "q") == ["q"]
    assert routed(vhost, "", "other") == []


def test_exchange_to_exchange_routing() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "qa", "qb", "qc")
    vhost.declare_exchange("src", "topic")
    vhost.declare_exchange("dst", "direct")
    vhost.bind_exchange("dst", "src", "a.*", {})
    vhost.bind_queue("qa", "dst", "a.x", {}, owner=OWNER)
    vhost.bind_queue("qb", "dst", "a.y", {}, owner=OWNER)
    vhost.bind_queue("qc", "src", "#", {}, owner=OWNER)
    assert routed(vhost, "src", "a.x") == ["qa", "qc"]
    assert routed(vhost, "src", "b.x") == ["qc"]
    vhost.unbind_exchange("dst", "src", "a.*", {})
    assert routed(vhost, "src", "a.x") == ["qc"]


def test_exchange_cycles_deliver_once_to_each_queue() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "qa", "qb")
    for name in ("a", "b"):
        vhost.declare_exchange(name, "fanout")
    vhost.bind_exchange("b", "a", "", {})
    vhost.bind_exchange("a", "b", "", {})
    vhost.bind_exchange("a", "a", "", {})
    vhost.bind_queue("qa", "a", "", {}, owner=OWNER)
    vhost.bind_queue("qb", "b", "", {}, owner=OWNER)
    vhost.bind_queue("qb", "a", "", {}, owner=OWNER)
    assert routed(vhost, "a") == ["qa", "qb"]
    assert routed(vhost, "b") == ["qa", "qb"]


def test_exchange_cycle_without_queues_is_unroutable() -> None:
    vhost = VirtualHost("/")
    for name in ("a", "b"):
        vhost.declare_exchange(name, "fanout")
    vhost.bind_exchange("b", "a", "", {})
    vhost.bind_exchange("a", "b", "", {})
    assert routed(vhost, "a") == []


def test_alternate_exchange_takes_what_the_exchange_cannot_route() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "main", "lost")
    vhost.declare_exchange("ae", "fanout")
    vhost.declare_exchange("x", "direct", arguments={"alternate-exchange": "ae"})
    vhost.bind_queue("main", "x", "k", {}, owner=OWNER)
    vhost.bind_queue("lost", "ae", "", {}, owner=OWNER)
    assert routed(vhost, "x", "k") == ["main"]
    assert routed(vhost, "x", "other") == ["lost"]


def test_alternate_exchange_missing_or_cyclic_is_unroutable() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("x", "direct", arguments={"alternate-exchange": "missing"})
    assert routed(vhost, "x", "k") == []
    vhost.declare_exchange("p", "direct", arguments={"alternate-exchange": "r"})
    vhost.declare_exchange("r", "direct", arguments={"alternate-exchange": "p"})
    assert routed(vhost, "p", "k") == []


def test_alternate_exchange_of_a_destination_exchange_is_used() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "lost")
    vhost.declare_exchange("ae", "fanout")
    vhost.declare_exchange("src", "fanout")
    vhost.declare_exchange("dst", "direct", arguments={"alternate-exchange": "ae"})
    vhost.bind_exchange("dst", "src", "", {})
    vhost.bind_queue("lost", "ae", "", {}, owner=OWNER)
    assert routed(vhost, "src", "k") == ["lost"]


def test_alternate_exchange_given_as_bytes() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "lost")
    vhost.declare_exchange("ae", "fanout")
    vhost.declare_exchange("x", "direct", arguments={"alternate-exchange": b"ae"})
    vhost.bind_queue("lost", "ae", "", {}, owner=OWNER)
    assert routed(vhost, "x", "k") == ["lost"]


def test_internal_exchange_refuses_publishes_403() -> None:
    vhost = VirtualHost("/")
    vhost.declare_exchange("i", "fanout", internal=True)
    session = Session(vhost, OWNER, RecordingSink())
    with pytest.raises(AccessRefused):
        session.check_publish("i")
    with pytest.raises(NotFound):
        session.check_publish("missing")


# -- deletes ---------------------------------------------------------------------------


def test_delete_exchange_if_unused() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "q")
    vhost.declare_exchange("x", "direct")
    vhost.bind_queue("q", "x", "k", {}, owner=OWNER)
    with pytest.raises(PreconditionFailed) as info:
        vhost.delete_exchange("x", if_unused=True)
    assert info.value.reply_code == 406
    vhost.unbind_queue("q", "x", "k", {}, owner=OWNER)
    vhost.delete_exchange("x", if_unused=True)
    assert "x" not in vhost.exchanges
    vhost.delete_exchange("x")  # a missing exchange: no error


def test_delete_exchange_removes_its_bindings_both_ways() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "q")
    vhost.declare_exchange("src", "fanout")
    vhost.declare_exchange("mid", "fanout")
    vhost.bind_exchange("mid", "src", "", {})
    vhost.bind_queue("q", "mid", "", {}, owner=OWNER)
    vhost.delete_exchange("mid")
    assert routed(vhost, "src") == []
    vhost.delete_exchange("src", if_unused=True)  # no binding left on it


def test_delete_queue_if_unused_and_if_empty() -> None:
    vhost = VirtualHost("/")
    (queue,) = queues(vhost, "q")
    session = Session(vhost, OWNER, RecordingSink())
    session.publish("", "q", make_message(b"1", "q"))
    session.publish("", "q", make_message(b"2", "q"))
    with pytest.raises(PreconditionFailed):
        vhost.delete_queue("q", owner=OWNER, if_empty=True)
    session.consume("q", "c", no_ack=False, exclusive=False, arguments={})
    with pytest.raises(PreconditionFailed):
        vhost.delete_queue("q", owner=OWNER, if_unused=True)
    assert queue.message_count == 0  # both delivered, unacked
    assert vhost.delete_queue("q", owner=OWNER, if_empty=True) == 0
    assert "q" not in vhost.queues


def test_delete_queue_returns_the_ready_count_and_removes_bindings() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "q")
    vhost.declare_exchange("x", "fanout")
    vhost.bind_queue("q", "x", "", {}, owner=OWNER)
    session = Session(vhost, OWNER, RecordingSink())
    for body in (b"1", b"2", b"3"):
        session.publish("x", "", make_message(body))
    assert vhost.delete_queue("q", owner=OWNER) == 3
    assert routed(vhost, "x") == []
    assert vhost.delete_queue("q", owner=OWNER) == 0  # missing: succeeds


def test_deleting_a_queue_cancels_consumers_of_every_session() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "q", "other")
    sinks = [RecordingSink(), RecordingSink()]
    sessions = [Session(vhost, OWNER, sink) for sink in sinks]
    sessions[0].consume("q", "a", no_ack=True, exclusive=False, arguments={})
    sessions[1].consume("q", "b", no_ack=True, exclusive=False, arguments={})
    sessions[1].consume("other", "keep", no_ack=True, exclusive=False, arguments={})
    vhost.delete_queue("q", owner=OWNER)
    assert [e.consumer_tag for e in sinks[0].take("consumer_cancelled")] == ["a"]
    assert [e.consumer_tag for e in sinks[1].take("consumer_cancelled")] == ["b"]
    assert list(sessions[1].consumers) == ["keep"]


def test_binding_to_the_default_exchange_is_403() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "q")
    with pytest.raises(AccessRefused):
        vhost.bind_queue("q", "", "q", {}, owner=OWNER)


def test_binding_to_missing_things_is_404() -> None:
    vhost = VirtualHost("/")
    queues(vhost, "q")
    with pytest.raises(NotFound):
        vhost.bind_queue("q", "missing", "", {}, owner=OWNER)
    with pytest.raises(NotFound):
        vhost.bind_queue("missing", "amq.direct", "", {}, owner=OWNER)
    with pytest.raises(NotFound):
        vhost.bind_exchange("missing", "amq.direct", "", {})
