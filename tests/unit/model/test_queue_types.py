"""Unit tests of the queue-type interface (``model/queues/base.py``) in the core's words: the
registry, each type's declare-time rules, the queue class it makes, what a declaration and a
passive declaration answer, and the operations whose behaviour a type decides."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.errors import NotFound, NotImplemented_, PreconditionFailed, ResourceLocked
from leveret.model import settle
from leveret.model.consumer import CallbackOwner, Consumer
from leveret.model.queues import (
    CLASSIC,
    QUORUM,
    STREAM,
    TYPES,
    ClassicQueue,
    KeyedQueue,
    QuorumQueue,
    StreamQueue,
    type_of,
)
from leveret.model.router import REPLY_TO, REPLY_TO_PREFIX
from leveret.model.settle import Delivery
from leveret.model.vhost import Declared, VirtualHost
from tests.queue_support import message

if TYPE_CHECKING:
    from leveret.model.entry import QueuedMessage

OWNER = object()


def test_every_declarable_type_is_registered_by_its_name() -> None:
    assert TYPES == {"classic": CLASSIC, "quorum": QUORUM, "stream": STREAM}
    assert type_of(None) is CLASSIC
    assert type_of({"x-queue-type": b"quorum"}) is QUORUM
    with pytest.raises(PreconditionFailed, match="unsupported queue type 'lazy'"):
        type_of({"x-queue-type": "lazy"}, queue="q")
    with pytest.raises(PreconditionFailed, match=r"invalid arg 'x-queue-type'.*unacceptable_type"):
        type_of({"x-queue-type": 3})


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [
        ({}, ClassicQueue),
        ({"x-max-priority": 5}, ClassicQueue),
        ({"qpid.group_header_key": "g"}, KeyedQueue),
        ({"x-queue-type": "quorum"}, QuorumQueue),
        ({"x-queue-type": "stream"}, StreamQueue),
    ],
)
def test_the_type_makes_its_queue(arguments: dict[str, object], kind: type) -> None:
    queue = VirtualHost("/").declare_queue("q", owner=OWNER, durable=True, arguments=arguments)
    assert type(queue) is kind
    assert queue.type is type_of(arguments)


@pytest.mark.parametrize(
    ("queue_type", "argument"),
    [
        ("classic", "x-delivery-limit"),
        ("classic", "x-max-age"),
        ("quorum", "x-max-priority"),
        ("quorum", "x-stream-max-segment-size-bytes"),
        ("stream", "x-message-ttl"),
        ("stream", "x-queue-mode"),
    ],
)
def test_a_type_refuses_the_arguments_of_others(queue_type: str, argument: str) -> None:
    text = (
        f"invalid arg '{argument}' for queue 'q' in vhost '/' "
        f"of queue type rabbit_{queue_type}_queue"
    )
    with pytest.raises(PreconditionFailed, match=text):
        TYPES[queue_type].parse({argument: 1}, queue="q", durable=True)


@pytest.mark.parametrize("queue_type", ["quorum", "stream"])
@pytest.mark.parametrize(
    ("flags", "name"),
    [
        ({"durable": False}, "non-durable"),
        ({"exclusive": True}, "exclusive-owner"),
        ({"auto_delete": True}, "auto-delete"),
    ],
)
def test_durable_only_types_refuse_the_other_flags(
    queue_type: str, flags: dict[str, bool], name: str
) -> None:
    vhost = VirtualHost("/")
    with pytest.raises(PreconditionFailed, match=f"invalid property '{name}'"):
        vhost.declare_queue(
            "q",
            owner=OWNER,
            durable=flags.get("durable", True),
            exclusive=flags.get("exclusive", False),
            auto_delete=flags.get("auto_delete", False),
            arguments={"x-queue-type": queue_type},
        )
    assert vhost.queues == {}


def test_a_different_exclusive_flag_on_redeclare_is_a_lock_conflict() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("shared", owner=OWNER)
    with pytest.raises(ResourceLocked, match="cannot obtain exclusive access to locked queue"):
        vhost.declare_queue("shared", owner=OWNER, exclusive=True)
    vhost.declare_queue("mine", owner=OWNER, exclusive=True)
    with pytest.raises(ResourceLocked):
        vhost.declare_queue("mine", owner=OWNER, exclusive=False)
    # Without an owner (the management API, recovery) exclusivity is not compared.
    assert vhost.declare_queue("shared", owner=None, exclusive=True) is vhost.queues["shared"]


def test_a_redeclare_compares_with_the_types_rule() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("s", owner=OWNER, durable=True, arguments={"x-queue-type": "stream"})
    with pytest.raises(PreconditionFailed, match="inequivalent arg 'x-max-age'"):
        vhost.declare_queue(
            "s", owner=OWNER, durable=True, arguments={"x-queue-type": "stream", "x-max-age": "1D"}
        )
    with pytest.raises(PreconditionFailed, match="inequivalent arg 'x-queue-type'"):
        vhost.declare_queue("s", owner=OWNER, durable=True)


def test_a_passive_declaration_answers_counts_and_never_makes_a_queue() -> None:
    vhost = VirtualHost("/")
    with pytest.raises(NotFound):
        vhost.passive_declare("q", owner=OWNER)
    queue = vhost.declare_queue("q", owner=OWNER)
    queue.enqueue(message(1, priority=None, persistent=False))
    assert vhost.passive_declare("q", owner=OWNER) == Declared("q", 1, 0)
    # Direct reply-to's pseudo-queue: its requester counts as its consumer.
    assert vhost.passive_declare(REPLY_TO, owner=OWNER) == Declared(REPLY_TO, 0, 1)
    with pytest.raises(NotFound):
        vhost.passive_declare(REPLY_TO_PREFIX + "nobody", owner=OWNER)
    assert set(vhost.queues) == {"q"}


def test_a_stream_answers_a_passive_declaration_with_an_offset() -> None:
    vhost = VirtualHost("/")
    vhost.declare_queue("s", owner=OWNER, durable=True, arguments={"x-queue-type": "stream"})
    for i in range(3):
        vhost.queues["s"].enqueue(message(i, priority=None, persistent=False))
    assert vhost.passive_declare("s", owner=OWNER).message_count == 3
    first = vhost.passive_declare("s", owner=OWNER, arguments={"x-stream-offset": "first"})
    assert first.message_count == 0


@pytest.mark.parametrize("arguments", [{}, {"x-queue-type": "quorum"}, {"x-queue-type": "stream"}])
def test_capabilities_match_what_the_queue_does(arguments: dict[str, object]) -> None:
    queue = VirtualHost("/").declare_queue("q", owner=OWNER, durable=True, arguments=arguments)
    kind = queue.type
    for able, call in (
        (kind.gets, lambda: queue.get(auto_settle=True)),
        (kind.purges, queue.purge),
    ):
        if able:
            call()
        else:
            with pytest.raises(NotImplemented_, match=f"not supported by {kind.name} queues"):
                call()
    consumer = queue.consumer("c", CallbackOwner(lambda c, e: None), auto_settle=True)
    assert consumer.auto_settle == kind.auto_settle
    assert queue.rejects() == kind.rejects


def _one_delivery(arguments: dict[str, object]) -> tuple[list[QueuedMessage], Delivery]:
    queue = VirtualHost("/").declare_queue("q", owner=OWNER, durable=True, arguments=arguments)
    got: list[QueuedMessage] = []

    def deliver(consumer: Consumer, entry: QueuedMessage) -> None:
        consumer.credit -= 1
        got.append(entry)

    consumer = queue.consumer("c", CallbackOwner(deliver), auto_settle=False, credit=1)
    queue.add_consumer(consumer)
    queue.enqueue(message(1, priority=None, persistent=False))
    return got, Delivery(got[0], queue, consumer)


def test_modify_lets_each_type_amend_its_entry() -> None:
    # Classic: headers merged into its copy, the failed delivery counted by modify.
    _got, delivery = _one_delivery({})
    settle.modify([delivery], headers={"x-note": 1}, failed=True)
    assert delivery.entry.deliveries == 1
    assert (delivery.entry.message.headers or {})["x-note"] == 1
    # Quorum: the release counts it, once.
    _got, delivery = _one_delivery({"x-queue-type": "quorum"})
    settle.modify([delivery], headers={"x-note": 1}, failed=True)
    assert delivery.entry.deliveries == 1
    assert (delivery.entry.message.headers or {})["x-delivery-count"] == 1
    # Stream: its log is never changed.
    got, delivery = _one_delivery({"x-queue-type": "stream"})
    settle.modify([delivery], headers={"x-note": 1}, failed=True)
    assert delivery.entry.deliveries == 0
    assert "x-note" not in (got[0].message.headers or {})


def test_deleting_a_stream_drops_its_log_and_if_empty_reads_ready_messages() -> None:
    vhost = VirtualHost("/")
    stream = vhost.declare_queue(
        "s", owner=OWNER, durable=True, arguments={"x-queue-type": "stream"}
    )
    stream.enqueue(message(1, priority=None, persistent=False))
    assert not stream.has_ready()  # its messages stay in its log, never waiting
    classic = vhost.declare_queue("c", owner=OWNER)
    classic.enqueue(message(1, priority=None, persistent=False))
    with pytest.raises(PreconditionFailed, match="is not empty"):
        vhost.delete_queue("c", owner=OWNER, if_empty=True)
    assert vhost.delete_queue("s", owner=OWNER, if_empty=True) == 1
    assert isinstance(stream, StreamQueue)
    assert stream.log.read(0, 10) == []
