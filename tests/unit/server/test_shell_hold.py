"""The far-behind hold (``Shell.held``): which connections it stops reading."""

from __future__ import annotations

from leveret.protocol.amqp091._generated import methods as m
from leveret.server.shell.shell import FLOW_SHOWN, HOLD_MAX, STALL_RECHECK, STALL_WINDOW
from leveret.testing import CodecClient


def _held_after_flooding(reads_when_blocked: bool) -> bool:
    client = CodecClient.connect()
    client.handshake()
    client.open_channel(1)
    # As the cluster link's front end says of itself (it carries every queue's acks).
    client.shell._reads_when_blocked = reads_when_blocked
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(1, m.BasicQos(prefetch_count=1))
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    flood = b"".join(client.encode_publish(1, "", "q", b"x") for _ in range(5000))
    client.send_raw(flood)
    return client.shell.held


def test_a_connection_feeding_a_queue_far_behind_is_held() -> None:
    assert _held_after_flooding(reads_when_blocked=False)


def test_a_front_end_that_reads_when_blocked_is_never_held() -> None:
    assert not _held_after_flooding(reads_when_blocked=True)


def _consumer_and_flooded_publisher() -> tuple[CodecClient, CodecClient]:
    """A consumer holding one unacked delivery of "q", and a publisher held for "q"."""
    consumer = CodecClient.connect()
    consumer.handshake()
    consumer.open_channel(1)
    consumer.send(1, m.QueueDeclare(queue="q"))
    consumer.send(1, m.BasicQos(prefetch_count=1))
    consumer.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    flooder = CodecClient.connect(consumer.shell.broker, clock=consumer.clock)
    flooder.handshake()
    flooder.open_channel(1)
    flooder.send_raw(b"".join(flooder.encode_publish(1, "", "q", b"x") for _ in range(5000)))
    assert flooder.shell.held
    return consumer, flooder


def test_a_queue_that_drains_while_another_publisher_refills_it_holds_on() -> None:
    """Within one ``HOLD_MAX`` the consumer takes a message and another publisher puts one
    in: the queue is no shorter than when the hold began, but it drains, so it is not
    marked stalled, and the flooding publisher's next publish holds it again (two
    publishers whose holds were judged by the queue's length marked it stalled by turns and
    let its backlog grow without bound)."""
    consumer, flooder = _consumer_and_flooded_publisher()
    other = CodecClient.connect(consumer.shell.broker, clock=consumer.clock)
    other.handshake()
    other.open_channel(1)
    queue = consumer.shell.broker.vhosts["/"].queues["q"]
    length = queue.message_count
    consumer.send(1, m.BasicAck(delivery_tag=1))  # the next one is delivered
    other.publish(1, "", "q", b"y")
    assert queue.message_count >= length
    consumer.clock.advance(HOLD_MAX)
    assert flooder.shell.release_hold(consumer.clock.now)
    flooder.publish(1, "", "q", b"x")
    assert flooder.shell.held


# A hold's length and a little: the fake clock's sums of 0.05 fall a hair short of it.
STEP = HOLD_MAX + 0.001


def _hold_out(consumer: CodecClient, flooder: CodecClient) -> None:
    """Each of the publisher's holds lasts its ``HOLD_MAX``; then a publish holds it again."""
    consumer.clock.advance(STEP)
    assert flooder.shell.release_hold(consumer.clock.now)
    flooder.publish(1, "", "q", b"x")


def test_a_queue_nothing_departed_from_holds_its_publisher_no_more() -> None:
    """A consumer that acks nothing through ``STALL_WINDOW`` of holds: the queue is
    stalled, and the publisher's next publishes to it do not hold it again."""
    consumer, flooder = _consumer_and_flooded_publisher()
    holds = 0
    while flooder.shell.held:
        _hold_out(consumer, flooder)
        holds += 1
        assert holds * STEP <= STALL_WINDOW + 2 * STEP
    assert holds * STEP >= STALL_WINDOW
    flooder.publish(1, "", "q", b"x")
    assert not flooder.shell.held


def test_one_hold_without_departures_does_not_mark_the_queue_stalled() -> None:
    """A consumer starved of a CPU for one ``HOLD_MAX`` (on a busy machine, or behind its
    own process's publishers) did not stop: its publisher is held again."""
    consumer, flooder = _consumer_and_flooded_publisher()
    _hold_out(consumer, flooder)
    assert flooder.shell.held


def test_departures_between_quiet_holds_keep_the_publisher_held() -> None:
    """A connection's own consumer acks only between its holds (nothing of it is read
    while held): nothing departs during each hold, and the queue still drains."""
    consumer, flooder = _consumer_and_flooded_publisher()
    tag = 1
    for _ in range(int(3 * STALL_WINDOW / HOLD_MAX)):
        _hold_out(consumer, flooder)
        assert flooder.shell.held
        consumer.send(1, m.BasicAck(delivery_tag=tag))  # between this hold's start and end
        tag += 1
        consumer.clock.advance(STEP)
        assert flooder.shell.release_hold(consumer.clock.now)
        flooder.publish(1, "", "q", b"x")
        assert flooder.shell.held


def _stalled() -> tuple[CodecClient, CodecClient]:
    """A queue marked stalled (nothing departed through ``STALL_WINDOW`` of holds), its
    publisher released."""
    consumer, flooder = _consumer_and_flooded_publisher()
    for _ in range(int(2 * STALL_WINDOW / HOLD_MAX)):
        _hold_out(consumer, flooder)
        if not flooder.shell.held:
            return consumer, flooder
    raise AssertionError("never marked stalled")


def test_a_stalled_queue_whose_consumer_acks_again_holds_its_publisher_again() -> None:
    """Its consumer paused past ``STALL_WINDOW`` and acks again: ``STALL_RECHECK`` after
    the mark, the publisher's next publish holds it again (marked until the queue drained,
    a publisher faster than its consumer was never held again)."""
    consumer, flooder = _stalled()
    consumer.send(1, m.BasicAck(delivery_tag=1))  # the next one is delivered: it departs
    consumer.clock.advance(STALL_RECHECK + 0.001)
    flooder.publish(1, "", "q", b"x")  # this turn's end lifts the mark
    flooder.publish(1, "", "q", b"x")
    assert flooder.shell.held


def test_a_stalled_queue_is_held_for_no_sooner_than_the_recheck() -> None:
    """Departures within ``STALL_RECHECK`` of the mark do not lift it: the mark stands
    that long at least, so a consumer that acks in bursts between pauses past
    ``STALL_WINDOW`` does not have its publisher held and let go by turns."""
    consumer, flooder = _stalled()
    consumer.send(1, m.BasicAck(delivery_tag=1))
    consumer.clock.advance(STALL_RECHECK / 2)
    flooder.publish(1, "", "q", b"x")
    flooder.publish(1, "", "q", b"x")
    assert not flooder.shell.held


def test_a_stalled_queue_nothing_departs_from_stays_stalled_after_the_recheck() -> None:
    """A consumer that stopped for good: the mark stands past ``STALL_RECHECK``, and the
    publisher is never slowed by it."""
    consumer, flooder = _stalled()
    consumer.clock.advance(10 * STALL_RECHECK)
    flooder.publish(1, "", "q", b"x")
    flooder.publish(1, "", "q", b"x")
    assert not flooder.shell.held


def test_a_held_connection_shows_as_flow_for_five_seconds_after_the_hold() -> None:
    consumer, flooder = _consumer_and_flooded_publisher()
    held_at = consumer.clock.now
    assert consumer.shell.state(held_at) == "running"  # never held: it only consumes
    assert flooder.shell.state(held_at + 60) == "flow"  # held still, however long ago
    consumer.clock.advance(HOLD_MAX)
    assert flooder.shell.release_hold(consumer.clock.now)
    assert not flooder.shell.held
    assert flooder.shell.state(held_at + FLOW_SHOWN - 0.1) == "flow"
    assert flooder.shell.state(held_at + FLOW_SHOWN + 0.1) == "running"
