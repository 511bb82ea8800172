"""Unit tests of a session (one channel): QoS, settlement, recover, tx, confirms, returns."""

from __future__ import annotations

import pytest

from leveret.errors import AccessRefused, NotAllowed, NotFound, PreconditionFailed
from leveret.model.vhost import VirtualHost
from leveret.server.amqp091.session import Session
from leveret.testing import RecordingSink, SinkEvent, make_message
from tests.queue_support import classic


class World:
    """One vhost with queue ``q``; sessions share one owner (one connection)."""

    def __init__(self) -> None:
        self.vhost = VirtualHost("/")
        self.owner = object()
        self.queue = classic(self.vhost.declare_queue("q", owner=self.owner))

    def session(self) -> tuple[Session, RecordingSink]:
        sink = RecordingSink()
        return Session(self.vhost, self.owner, sink), sink

    def publish(self, session: Session, *bodies: bytes, key: str = "q", **kw: bool) -> None:
        for body in bodies:
            session.publish("", key, make_message(body, key), **kw)


def _ignore(ok: bool) -> None:
    """tx.commit's completion callback, for tests that do not look at it."""


def bodies(events: list[SinkEvent]) -> list[bytes]:
    return [e.body for e in events]


def ready(w: World) -> list[bytes]:
    return [e.message.body for e in w.queue.ready]


def consume(s: Session, tag: str, *, no_ack: bool = False, queue: str = "q") -> str:
    return s.consume(queue, tag, no_ack=no_ack, exclusive=False, arguments={})


# -- QoS -------------------------------------------------------------------------------


def test_per_consumer_prefetch_applies_to_each_consumer() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 2, False)
    consume(s, "a")
    consume(s, "b")
    w.publish(s, *[str(i).encode() for i in range(10)])
    got = sink.deliveries()
    assert [e.consumer_tag for e in got].count("a") == 2
    assert [e.consumer_tag for e in got].count("b") == 2
    assert len(ready(w)) == 6


def test_global_prefetch_is_shared_by_the_channel() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 3, True)
    consume(s, "a")
    consume(s, "b")
    w.publish(s, *[str(i).encode() for i in range(10)])
    assert len(sink.deliveries()) == 3
    assert len(ready(w)) == 7


def test_per_consumer_and_global_prefetch_both_apply() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 2, False)
    s.set_qos(0, 3, True)
    consume(s, "a")
    consume(s, "b")
    w.publish(s, *[str(i).encode() for i in range(10)])
    tags = [e.consumer_tag for e in sink.deliveries()]
    assert len(tags) == 3
    assert tags.count("a") <= 2
    assert tags.count("b") <= 2


def test_per_consumer_qos_applies_to_existing_and_later_consumers() -> None:
    # Deviation from RabbitMQ (later consumers only), so that Celery can raise its prefetch.
    w = World()
    s, sink = w.session()
    consume(s, "early")  # unlimited until the qos below
    s.set_qos(0, 1, False)
    consume(s, "late")
    w.publish(s, *[str(i).encode() for i in range(6)])
    tags = [e.consumer_tag for e in sink.deliveries()]
    assert tags.count("late") == 1
    assert tags.count("early") == 1


def test_raising_per_consumer_prefetch_reaches_a_running_consumer() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 1, False)
    consume(s, "c")
    w.publish(s, b"1", b"2", b"3")
    assert len(sink.deliveries()) == 1
    s.set_qos(0, 3, False)
    assert len(sink.deliveries()) == 2  # the two that were waiting


def test_raising_the_prefetch_dispatches_waiting_messages() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 1, True)
    consume(s, "a")
    w.publish(s, b"1", b"2", b"3")
    assert bodies(sink.deliveries()) == [b"1"]
    s.set_qos(0, 3, True)
    assert bodies(sink.deliveries()) == [b"2", b"3"]


def test_prefetch_size_is_a_byte_window_over_unacked() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(10, 0, True)
    consume(s, "a")
    w.publish(s, b"123456", b"abcdef")
    first = sink.deliveries()
    assert bodies(first) == [b"123456"]  # 6 + 6 > 10: the second waits
    s.ack(first[0].delivery_tag)
    assert bodies(sink.deliveries()) == [b"abcdef"]


def test_prefetch_size_lets_one_large_message_through_when_nothing_is_unacked() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(10, 0, True)
    consume(s, "a")
    w.publish(s, b"x" * 100, b"y")
    got = sink.deliveries()
    assert bodies(got) == [b"x" * 100]
    s.ack(got[0].delivery_tag)
    assert bodies(sink.deliveries()) == [b"y"]


def test_flow_off_stops_deliveries_and_flow_on_resumes() -> None:
    w = World()
    s, sink = w.session()
    consume(s, "a", no_ack=True)
    s.set_flow(False)
    w.publish(s, b"1", b"2")
    assert sink.deliveries() == []
    s.set_flow(True)
    assert bodies(sink.deliveries()) == [b"1", b"2"]


def test_basic_get_ignores_prefetch() -> None:
    w = World()
    s, _ = w.session()
    s.set_qos(0, 1, True)
    w.publish(s, b"1", b"2")
    assert s.get("q", no_ack=False) is not None
    assert s.get("q", no_ack=False) is not None


# -- settlement ------------------------------------------------------------------------


def delivered(w: World, n: int) -> tuple[Session, RecordingSink, list[int]]:
    s, sink = w.session()
    consume(s, "c")
    w.publish(s, *[str(i).encode() for i in range(n)])
    return s, sink, [e.delivery_tag for e in sink.deliveries()]


def test_delivery_tags_count_up_from_one() -> None:
    _, _, tags = delivered(World(), 3)
    assert tags == [1, 2, 3]


def test_ack_single_and_multiple() -> None:
    w = World()
    s, _, tags = delivered(w, 5)
    s.ack(tags[1])
    assert sorted(s.unacked) == [1, 3, 4, 5]
    s.ack(tags[3], multiple=True)  # 1, 3 and 4
    assert sorted(s.unacked) == [5]
    assert w.queue.unacked_count == 1


def test_ack_multiple_zero_acks_everything() -> None:
    w = World()
    s, _, _ = delivered(w, 4)
    s.ack(0, multiple=True)
    assert s.unacked == {}
    assert w.queue.unacked_count == 0


@pytest.mark.parametrize("multiple", [False, True])
def test_unknown_delivery_tag_is_406(multiple: bool) -> None:
    w = World()
    s, _, _ = delivered(w, 2)
    with pytest.raises(PreconditionFailed) as info:
        s.ack(99, multiple=multiple)
    assert info.value.reply_code == 406
    assert not info.value.hard
    assert sorted(s.unacked) == [1, 2]  # nothing was settled


def test_double_ack_is_406() -> None:
    w = World()
    s, _, tags = delivered(w, 1)
    s.ack(tags[0])
    with pytest.raises(PreconditionFailed):
        s.ack(tags[0])


def test_ack_of_tag_zero_without_multiple_is_406() -> None:
    w = World()
    s, _, _ = delivered(w, 1)
    with pytest.raises(PreconditionFailed):
        s.ack(0)


@pytest.mark.parametrize("op", ["reject", "nack"])
def test_unknown_tag_for_reject_and_nack_is_406(op: str) -> None:
    w = World()
    s, _, _ = delivered(w, 1)
    with pytest.raises(PreconditionFailed):
        s.reject(7, multiple=op == "nack", requeue=True)


def test_nack_multiple_requeue_puts_them_back_in_order() -> None:
    w = World()
    s, sink, tags = delivered(w, 4)
    assert s.cancel("c")
    s.reject(tags[2], multiple=True, requeue=True)  # 1, 2, 3
    assert ready(w) == [b"0", b"1", b"2"]
    assert all(e.redelivered for e in w.queue.ready)
    assert sorted(s.unacked) == [4]
    assert not sink.events


def test_reject_without_requeue_drops() -> None:
    w = World()
    s, _, tags = delivered(w, 2)
    s.reject(tags[0], requeue=False)
    s.reject(tags[1], multiple=True, requeue=False)
    assert ready(w) == []
    assert w.queue.unacked_count == 0
    assert s.unacked == {}


def test_ack_frees_credit_for_the_next_delivery() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 2, False)
    consume(s, "c")
    w.publish(s, b"1", b"2", b"3", b"4")
    first = sink.deliveries()
    assert bodies(first) == [b"1", b"2"]
    s.ack(first[1].delivery_tag, multiple=True)
    assert bodies(sink.deliveries()) == [b"3", b"4"]


def test_requeued_message_is_redelivered_with_the_flag_and_a_new_tag() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 1, False)
    consume(s, "c")
    w.publish(s, b"1", b"2")
    (first,) = sink.deliveries()
    s.reject(first.delivery_tag, requeue=True)
    (again,) = sink.deliveries()
    assert (again.body, again.redelivered) == (b"1", True)
    assert again.delivery_tag != first.delivery_tag


# -- recover ---------------------------------------------------------------------------


def test_recover_requeue_true_redelivers_in_order_marked_redelivered() -> None:
    w = World()
    s, sink, tags = delivered(w, 3)
    s.recover(True)
    again = sink.deliveries()
    assert bodies(again) == [b"0", b"1", b"2"]
    assert all(e.redelivered for e in again)
    assert {e.delivery_tag for e in again}.isdisjoint(tags)


def test_recover_requeue_false_redelivers_to_the_original_consumer() -> None:
    w = World()
    s, sink = w.session()
    consume(s, "a")
    consume(s, "b")
    w.publish(s, b"1", b"2")
    first = {e.body: e.consumer_tag for e in sink.deliveries()}
    s.recover(False)
    again = sink.deliveries()
    assert {e.body: e.consumer_tag for e in again} == first
    assert all(e.redelivered for e in again)
    assert sorted(s.unacked) == [e.delivery_tag for e in again]


def test_recover_requeue_false_puts_basic_get_messages_back() -> None:
    w = World()
    s, sink = w.session()
    w.publish(s, b"1", b"2")
    assert s.get("q", no_ack=False) is not None
    s.recover(False)
    assert ready(w) == [b"1", b"2"]
    assert w.queue.ready[0].redelivered
    assert sink.events == []


# -- transactions ----------------------------------------------------------------------


def test_tx_publishes_are_routed_on_commit_only() -> None:
    w = World()
    s, _ = w.session()
    s.select_tx()
    w.publish(s, b"1", b"2")
    assert ready(w) == []
    s.commit(_ignore)
    assert ready(w) == [b"1", b"2"]


def test_tx_rollback_discards_publishes() -> None:
    w = World()
    s, _ = w.session()
    s.select_tx()
    w.publish(s, b"1")
    s.rollback()
    s.commit(_ignore)
    assert ready(w) == []


def test_tx_acks_are_held_until_commit() -> None:
    w = World()
    s, sink = w.session()
    s.select_tx()
    s.set_qos(0, 1, False)
    consume(s, "c")
    w.publish(s, b"1", b"2")
    s.commit(_ignore)
    (first,) = sink.deliveries()
    s.ack(first.delivery_tag)
    assert sink.deliveries() == []  # the held ack still counts against prefetch
    assert w.queue.unacked_count == 1
    s.commit(_ignore)
    assert w.queue.unacked_count == 1  # 1 settled, 2 delivered
    assert bodies(sink.deliveries()) == [b"2"]


def test_tx_rollback_restores_acked_tags() -> None:
    w = World()
    s, _, tags = delivered(w, 3)
    s.select_tx()
    s.ack(tags[1], multiple=True)
    assert sorted(s.unacked) == [3]
    s.rollback()
    assert sorted(s.unacked) == [1, 2, 3]
    s.ack(tags[0])  # ackable again after the rollback
    s.commit(_ignore)
    assert sorted(s.unacked) == [2, 3]


def test_tx_nack_with_requeue_requeues_on_commit() -> None:
    w = World()
    s, _, tags = delivered(w, 2)
    assert s.cancel("c")
    s.select_tx()
    s.reject(tags[0], requeue=True)
    assert ready(w) == []
    s.commit(_ignore)
    assert ready(w) == [b"0"]


def test_commit_and_rollback_need_tx_mode() -> None:
    s, _ = World().session()
    with pytest.raises(PreconditionFailed):
        s.commit(_ignore)
    with pytest.raises(PreconditionFailed):
        s.rollback()


def test_tx_and_confirm_modes_exclude_each_other() -> None:
    w = World()
    s, _ = w.session()
    s.select_tx()
    with pytest.raises(PreconditionFailed):
        s.select_confirm()
    s2, _ = w.session()
    s2.select_confirm()
    with pytest.raises(PreconditionFailed):
        s2.select_tx()


def test_tx_publish_to_missing_exchange_is_404_at_publish() -> None:
    s, _ = World().session()
    s.select_tx()
    with pytest.raises(NotFound):
        s.publish("nope", "q", make_message(b"x"))


# -- confirms --------------------------------------------------------------------------


def test_confirms_are_coalesced_with_multiple() -> None:
    w = World()
    s, sink = w.session()
    s.select_confirm()
    w.publish(s, b"1", b"2", b"3")
    s.flush_confirms()
    assert sink.take("confirm") == [SinkEvent("confirm", delivery_tag=3, multiple=True)]
    w.publish(s, b"4")
    s.flush_confirms()
    assert sink.take("confirm") == [SinkEvent("confirm", delivery_tag=4, multiple=False)]
    s.flush_confirms()
    assert sink.take("confirm") == []


def test_confirms_count_unroutable_messages_too() -> None:
    w = World()
    s, sink = w.session()
    s.select_confirm()
    w.publish(s, b"lost", key="nowhere")
    w.publish(s, b"1")
    s.flush_confirms()
    assert sink.take("confirm") == [SinkEvent("confirm", delivery_tag=2, multiple=True)]


def test_mandatory_unroutable_is_returned_before_it_is_confirmed() -> None:
    w = World()
    s, sink = w.session()
    s.select_confirm()
    w.publish(s, b"lost", key="nowhere", mandatory=True)
    s.flush_confirms()
    kinds = [(e.kind, e.reply_code, e.delivery_tag) for e in sink.take()]
    assert kinds == [("returned", 312, 0), ("confirm", 0, 1)]


# -- mandatory and immediate -----------------------------------------------------------


def test_mandatory_unroutable_is_returned_312() -> None:
    w = World()
    s, sink = w.session()
    w.publish(s, b"lost", key="nowhere", mandatory=True)
    (event,) = sink.take("returned")
    assert (event.reply_code, event.body) == (312, b"lost")


def test_unroutable_without_mandatory_is_dropped_silently() -> None:
    w = World()
    s, sink = w.session()
    w.publish(s, b"lost", key="nowhere")
    assert sink.events == []


def test_mandatory_routable_is_not_returned() -> None:
    w = World()
    s, sink = w.session()
    w.publish(s, b"1", mandatory=True)
    assert sink.events == []
    assert ready(w) == [b"1"]


def test_immediate_without_consumers_is_returned_313() -> None:
    w = World()
    s, sink = w.session()
    w.publish(s, b"1", immediate=True)
    (event,) = sink.take("returned")
    assert event.reply_code == 313
    assert ready(w) == []


def test_immediate_with_a_consumer_that_can_take_it_is_delivered() -> None:
    w = World()
    s, sink = w.session()
    consume(s, "c")
    w.publish(s, b"1", immediate=True)
    assert bodies(sink.deliveries()) == [b"1"]
    assert sink.events == []


def test_immediate_when_the_consumer_has_no_credit_is_returned_313() -> None:
    w = World()
    s, sink = w.session()
    s.set_qos(0, 1, False)
    consume(s, "c")
    w.publish(s, b"1")
    w.publish(s, b"2", immediate=True)
    assert bodies(sink.deliveries()) == [b"1"]
    (event,) = sink.take("returned")
    assert (event.reply_code, event.body) == (313, b"2")
    assert ready(w) == []


def test_immediate_unroutable_and_mandatory_is_312() -> None:
    w = World()
    s, sink = w.session()
    w.publish(s, b"1", key="nowhere", immediate=True, mandatory=True)
    (event,) = sink.take("returned")
    assert event.reply_code == 312


# -- consumers -------------------------------------------------------------------------


def test_duplicate_consumer_tag_is_530() -> None:
    s, _ = World().session()
    consume(s, "c")
    with pytest.raises(NotAllowed) as info:
        consume(s, "c")
    assert info.value.reply_code == 530
    assert info.value.hard


def test_server_generated_consumer_tags_are_unique() -> None:
    s, _ = World().session()
    tags = {consume(s, "") for _ in range(5)}
    assert len(tags) == 5
    assert all(t.startswith("amq.ctag-") for t in tags)


def test_exclusive_consume_on_a_queue_with_consumers_is_403() -> None:
    w = World()
    s, _ = w.session()
    consume(s, "a")
    other, _ = w.session()
    with pytest.raises(AccessRefused) as info:
        other.consume("q", "b", no_ack=False, exclusive=True, arguments={})
    assert info.value.reply_code == 403


def test_consume_on_a_queue_with_an_exclusive_consumer_is_403() -> None:
    w = World()
    s, _ = w.session()
    s.consume("q", "a", no_ack=False, exclusive=True, arguments={})
    other, _ = w.session()
    with pytest.raises(AccessRefused):
        consume(other, "b")
    assert s.cancel("a")
    consume(other, "b")  # free again


def test_consume_on_a_missing_queue_is_404() -> None:
    s, _ = World().session()
    with pytest.raises(NotFound):
        consume(s, "c", queue="nope")


def test_empty_queue_name_means_the_last_declared_queue() -> None:
    w = World()
    s, _ = w.session()
    with pytest.raises(NotFound):
        s.queue_name("")
    s.last_queue = "q"
    assert consume(s, "c", queue="") == "c"
    assert w.queue.consumer_count == 1


def test_server_sent_cancel_when_the_queue_is_deleted() -> None:
    w = World()
    s, sink = w.session()
    consume(s, "a")
    consume(s, "b")
    w.publish(s, b"1")
    (delivery,) = sink.deliveries()
    w.vhost.delete_queue("q", owner=w.owner)
    assert sorted(e.consumer_tag for e in sink.take("consumer_cancelled")) == ["a", "b"]
    assert s.consumers == {}
    s.ack(delivery.delivery_tag)  # acking a message of a deleted queue is fine
    assert s.unacked == {}


# -- channel close ---------------------------------------------------------------------


def test_channel_close_requeues_unacked_in_order() -> None:
    w = World()
    s, sink = w.session()
    consume(s, "c")
    w.publish(s, *[str(i).encode() for i in range(5)])
    tags = [e.delivery_tag for e in sink.deliveries()]
    s.ack(tags[2])
    s.close()
    assert ready(w) == [b"0", b"1", b"3", b"4"]
    assert all(e.redelivered for e in w.queue.ready)
    assert w.queue.consumer_count == 0
    assert w.queue.unacked_count == 0


def test_channel_close_requeues_to_another_consumer_in_order() -> None:
    w = World()
    s, sink = w.session()
    consume(s, "c")
    w.publish(s, b"1", b"2", b"3")
    sink.deliveries()
    other, other_sink = w.session()
    consume(other, "d")
    s.close()
    again = other_sink.deliveries()
    assert bodies(again) == [b"1", b"2", b"3"]
    assert all(e.redelivered for e in again)


def test_channel_close_requeues_held_tx_acks_and_drops_tx_publishes() -> None:
    w = World()
    s, sink = w.session()
    s.select_tx()
    consume(s, "c")
    w.publish(s, b"1", b"2")
    s.commit(_ignore)
    tags = [e.delivery_tag for e in sink.deliveries()]
    s.ack(tags[0])
    w.publish(s, b"never")
    s.close()
    assert ready(w) == [b"1", b"2"]


def test_closed_session_gets_no_deliveries() -> None:
    w = World()
    s, sink = w.session()
    consume(s, "c")
    s.close()
    s.close()  # idempotent
    other, _ = w.session()
    w.publish(other, b"1")
    assert sink.events == []
    assert ready(w) == [b"1"]


# -- pacing of publishers whose queues fall behind ------------------------------------


def asks_for_pacing(session: Session) -> bool:
    return session.feeds_backlog


def test_a_publish_into_a_queue_whose_consumers_fall_behind_asks_for_pacing() -> None:
    w = World()
    w.queue.backlog_pace = 3
    consumer, _ = w.session()
    consumer.set_qos(0, 1, False)
    consume(consumer, "c")
    publisher, _ = w.session()
    w.publish(publisher, b"0", b"1", b"2", b"3")  # one unacked, three ready: not past 3 yet
    assert not w.queue.falling_behind()
    assert not asks_for_pacing(publisher)
    w.publish(publisher, b"4")
    assert w.queue.falling_behind()
    assert asks_for_pacing(publisher)
    assert not asks_for_pacing(consumer)


def test_a_backlog_without_consumers_does_not_pace_its_publishers() -> None:
    # A queue filling up with nobody consuming is what a buffer is for (scenario i).
    w = World()
    w.queue.backlog_pace = 3
    publisher, _ = w.session()
    w.publish(publisher, *[b"m%d" % i for i in range(10)])
    assert not w.queue.falling_behind()
    assert not asks_for_pacing(publisher)
