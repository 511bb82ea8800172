"""The fault harness's checker (``tools/faults/checker.py``) on histories made by hand and
by a deliberately faulty in-memory broker: each kind of fault it must catch is caught,
and a correct broker's history passes. The random-history comparison with a reference
is in ``tests/property/test_faults_checker_props.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from tools.faults.checker import check
from tools.faults.history import Delivery, Fault, History, Outcome, Publish

# Left out of the compiled pass (scripts/test): the harness is not compiled.
pytestmark = pytest.mark.pure_only


@dataclass
class FakeBroker:
    """One FIFO queue and its consumer, with faults to order: ``lose`` drops those
    confirmed messages, ``duplicate`` delivers those twice (the second redelivered
    unless ``silent``), ``invent`` delivers a message nobody published, ``swap`` delivers
    the two messages after it in reverse order, ``keep`` leaves messages behind."""

    lose: set[int] = field(default_factory=set)
    duplicate: set[int] = field(default_factory=set)
    silent: bool = False
    invent: bool = False
    swap: int | None = None
    keep: int = 0
    history: History = field(default_factory=History)

    def run(self, count: int, queue: str = "q") -> History:
        t = 0.0
        stored: list[str] = []
        for seq in range(1, count + 1):
            t += 0.01
            message_id = f"p1.{seq}"
            self.history.sent(Publish(message_id, "p1", 1, seq, queue, t))
            self.history.settle(message_id, Outcome.CONFIRMED, t + 0.005)
            if seq not in self.lose:
                stored.append(message_id)
        if self.swap is not None:
            i = self.swap
            stored[i], stored[i + 1] = stored[i + 1], stored[i]
        for message_id in stored[: len(stored) - self.keep]:
            t += 0.01
            self._deliver(message_id, queue, t, redelivered=False)
            if int(message_id.split(".")[1]) in self.duplicate:
                self._deliver(message_id, queue, t, redelivered=not self.silent)
        if self.invent:
            self._deliver("p9.1", queue, t, redelivered=False)
        return self.history

    def _deliver(self, message_id: str, queue: str, t: float, *, redelivered: bool) -> None:
        self.history.delivered(Delivery(message_id, queue, "c1.1", redelivered, t))

    def depths(self, queue: str = "q") -> dict[str, int | None]:
        return {queue: self.keep}


def test_a_correct_broker_passes() -> None:
    broker = FakeBroker()
    verdict = check(broker.run(50), broker.depths())
    assert verdict.ok
    assert verdict.counts["confirmed"] == verdict.counts["delivered"] == 50
    assert verdict.counts["lost"] == verdict.counts["unexpected"] == 0


def test_a_lost_confirmed_message_fails_the_run() -> None:
    broker = FakeBroker(lose={7, 30})
    verdict = check(broker.run(50), broker.depths())
    assert not verdict.ok
    assert verdict.lost == ["p1.7", "p1.30"]
    assert verdict.per_queue["q"]["lost"] == 2


def test_a_message_nobody_published_fails_the_run() -> None:
    broker = FakeBroker(invent=True)
    verdict = check(broker.run(5), broker.depths())
    assert not verdict.ok
    assert verdict.unexpected == ["p9.1"]


def test_a_message_without_id_or_from_another_queue_is_unexpected() -> None:
    history = FakeBroker().run(3)
    history.delivered(Delivery(None, "q", "c1.1", False, 1.0))
    history.delivered(Delivery("p1.2", "other", "c1.1", False, 1.0))
    verdict = check(history, {"q": 0})
    assert len(verdict.unexpected) == 2
    assert not verdict.ok


def test_a_redelivered_duplicate_is_counted_not_failed() -> None:
    broker = FakeBroker(duplicate={3})
    verdict = check(broker.run(10), broker.depths())
    assert verdict.ok
    assert verdict.duplicated == {"p1.3": 2}
    assert verdict.counts["duplicate_deliveries"] == 1


def test_a_duplicate_without_the_redelivered_flag_breaks_the_order() -> None:
    broker = FakeBroker(duplicate={3}, silent=True)
    verdict = check(broker.run(10), broker.depths())
    assert not verdict.ok
    assert [(v.before, v.after) for v in verdict.order_violations] == [(3, 3)]


def test_messages_of_one_publisher_out_of_order_fail_the_run() -> None:
    broker = FakeBroker(swap=4)
    verdict = check(broker.run(10), broker.depths())
    assert not verdict.ok
    assert [(v.before, v.after) for v in verdict.order_violations] == [(6, 5)]


def test_order_is_per_publisher_connection_and_consumer_connection() -> None:
    history = History()
    # One publisher's two connections, interleaved in the queue (a message of the first
    # connection can land after the second's first ones): not a violation.
    for seq, session in ((1, 1), (2, 1), (3, 2), (4, 2)):
        history.sent(Publish(f"p1.{seq}", "p1", session, seq, "q", 0.0))
        history.settle(f"p1.{seq}", Outcome.CONFIRMED, 0.1)
    for seq, consumer in ((3, "c1.1"), (1, "c1.1"), (4, "c1.2"), (2, "c1.2")):
        history.delivered(Delivery(f"p1.{seq}", "q", consumer, False, 1.0))
    assert check(history, {"q": 0}).ok


def test_a_queue_left_with_messages_or_unreadable_fails_the_run() -> None:
    broker = FakeBroker(keep=2)
    verdict = check(broker.run(10), broker.depths())
    assert not verdict.ok
    assert not verdict.empty
    assert verdict.lost == ["p1.9", "p1.10"]
    history = FakeBroker().run(3)
    assert not check(history, {"q": None}).ok


def test_indeterminate_and_nacked_messages_may_or_may_not_arrive() -> None:
    history = History()
    outcomes = [Outcome.INDETERMINATE, Outcome.INDETERMINATE, Outcome.NACKED, Outcome.RETURNED]
    for seq, outcome in enumerate(outcomes, 1):
        history.sent(Publish(f"p1.{seq}", "p1", 1, seq, "q", 0.0))
        history.settle(f"p1.{seq}", outcome, 0.1)
    history.delivered(Delivery("p1.1", "q", "c1.1", False, 1.0))
    history.delivered(Delivery("p1.3", "q", "c1.1", False, 1.0))
    verdict = check(history, {"q": 0})
    assert verdict.ok
    assert verdict.recovered == ["p1.1"]
    assert verdict.unconfirmed_delivered == ["p1.3"]


def test_a_publish_never_answered_is_indeterminate_once_the_run_closes() -> None:
    history = History()
    history.sent(Publish("p1.1", "p1", 1, 1, "q", 0.0))
    history.close(5.0)
    assert history.publishes["p1.1"].outcome is Outcome.INDETERMINATE
    assert check(history, {"q": 0}).counts["indeterminate"] == 1


def test_failover_is_the_first_confirm_of_a_message_sent_after_the_fault() -> None:
    history = History()
    # (sent, settled): one sent before the kill and confirmed after it does not count.
    for seq, (sent, settled) in enumerate(((9.0, 12.5), (10.5, 13.0), (11.0, 12.9)), 1):
        history.sent(Publish(f"p1.{seq}", "p1", 1, seq, "q", sent))
        history.settle(f"p1.{seq}", Outcome.CONFIRMED, settled)
    # A second publisher, which lost its node with the leader, is back later.
    history.sent(Publish("p2.1", "p2", 2, 1, "q", 10.2))
    history.settle("p2.1", Outcome.CONFIRMED, 16.0)
    history.faults.append(Fault("kill", "n1", "leader", ["q"], start=10.0))
    history.faults.append(Fault("kill", "n2", "follower", [], start=20.0))
    history.faults.append(Fault("pause", "n1", "leader", ["q"], start=30.0))
    verdict = check(history, {"q": 0})
    kill = verdict.failover_summary()
    assert kill["faults"] == 1
    assert kill["median"] == pytest.approx(2.9)
    assert kill["every_publisher_worst"] == pytest.approx(6.0)
    paused = verdict.to_json()["failover_by_kind"]["pause"]
    assert paused["never"] == 1
    assert paused["median"] is None


def test_a_history_survives_its_json() -> None:
    broker = FakeBroker(lose={2}, duplicate={4})
    history = broker.run(6)
    history.faults.append(Fault("kill", "n1", "leader", ["q"], start=0.02, notes=["x"]))
    again = History.from_json(history.to_json())
    assert check(again, broker.depths()).to_json() == check(history, broker.depths()).to_json()


def test_a_fault_window_counts_what_was_sent_while_it_lasted() -> None:
    history = History()
    rows = (
        (1.0, Outcome.CONFIRMED, 1.1),
        (2.0, Outcome.CONFIRMED, 4.0),
        (3.0, Outcome.NACKED, 3.5),
    )
    for seq, (sent, outcome, settled) in enumerate(rows, 1):
        history.sent(Publish(f"p1.{seq}", "p1", 1, seq, "q", sent))
        history.settle(f"p1.{seq}", outcome, settled)
    history.sent(Publish("p1.4", "p1", 1, 4, "q", 3.2))
    history.close(9.0)
    history.faults.append(Fault("slowdisk", "n1", "leader", ["q"], start=1.5, healed=3.3))
    (window,) = check(history, {"q": 0}).windows
    assert (window.sent, window.confirmed, window.nacked, window.indeterminate) == (3, 1, 1, 1)
    assert window.latency_worst == pytest.approx(2.0)


def test_a_stream_is_read_whole_by_every_consumer() -> None:
    history = FakeBroker().run(4)
    history.consumers = {"c1": "q", "c2": "q"}
    # c2 reads everything once, and message 2 twice (a resumed read); c1 never got 4.
    for seq in (1, 2, 3, 4, 2):
        history.delivered(Delivery(f"p1.{seq}", "q", "c2.1", False, 1.0))
    history.deliveries = [d for d in history.deliveries if d.id != "p1.4" or d.consumer != "c1.1"]
    verdict = check(history, {}, every_consumer=True)
    assert verdict.lost == ["p1.4"]
    assert verdict.duplicated == {"p1.2": 2}
    assert verdict.counts["duplicate_deliveries"] == 1
    # Read as a queue, one delivery of each is enough and c1 plus c2 are duplicates.
    assert check(history, {}).lost == []


def test_a_streams_readers_are_counted_each_on_its_own() -> None:
    history = FakeBroker().run(5)
    history.deliveries.clear()
    history.consumers = {"c1": "q", "s2": "q"}
    for seq in range(1, 6):
        history.delivered(Delivery(f"p1.{seq}", "q", "c1.1", False, 1.0))
    # s2 resumed on a new connection after the offset it stored (2): 3 comes again.
    for consumer, seqs in (("s2.1", (1, 2, 3)), ("s2.2", (3, 4))):
        for seq in seqs:
            history.delivered(Delivery(f"p1.{seq}", "q", consumer, False, 2.0))
    verdict = check(history, {}, every_consumer=True)
    assert verdict.lost == ["p1.5"]  # s2 never got it
    assert verdict.per_reader == {
        "c1": {"deliveries": 5, "messages": 5, "duplicate_deliveries": 0, "lost": 0},
        "s2": {"deliveries": 5, "messages": 4, "duplicate_deliveries": 1, "lost": 1},
    }
    assert verdict.order_violations == []  # a repeat on a new connection is allowed
    # The same repeat within one connection is not (a stream delivers each offset once).
    history.deliveries[-2].consumer = "s2.1"
    assert check(history, {}, every_consumer=True).order_violations
