"""The fault harness's checker (``tools/faults/checker.py``) against a reference written
the plain way (one question per message, nested loops, no counters), on random
histories: publishes with every outcome from several publishers' connections, deliveries
in any order of published, unknown, id-less and misrouted messages to several consumers,
redelivered or not, and queues left empty, not empty or unreadable."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tools.faults.checker import check
from tools.faults.history import Delivery, History, Outcome, Publish

# Left out of the compiled pass (scripts/test): the harness is not compiled.
pytestmark = pytest.mark.pure_only

QUEUES = ("q1", "q2")
CONSUMERS = ("c1.1", "c1.2", "c2.1")
OUTCOMES = [o for o in Outcome if o is not Outcome.PENDING]


@st.composite
def histories(draw: st.DrawFn) -> tuple[History, dict[str, int | None]]:
    history = History()
    t = 0.0
    for publisher in ("p1", "p2")[: draw(st.integers(1, 2))]:
        seq = 0
        for session in range(1, draw(st.integers(1, 3)) + 1):
            for _ in range(draw(st.integers(0, 6))):
                seq += 1
                t += 0.01
                sent_id = f"{publisher}.{seq}"
                queue = draw(st.sampled_from(QUEUES))
                history.sent(Publish(sent_id, publisher, session, seq, queue, t))
                history.settle(sent_id, draw(st.sampled_from(OUTCOMES)), t + 0.001)
    ids = list(history.publishes)
    for _ in range(draw(st.integers(0, 3 * len(ids) + 2))):
        kind = draw(st.sampled_from(("published", "published", "published", "unknown", "none")))
        if kind == "published" and ids:
            message_id: str | None = draw(st.sampled_from(ids))
            assert message_id is not None
            queue = history.publishes[message_id].queue
            if draw(st.integers(0, 9)) == 0:  # now and then from the wrong queue
                queue = next(q for q in QUEUES if q != queue)
        else:
            message_id = None if kind == "none" else f"p9.{draw(st.integers(1, 5))}"
            queue = draw(st.sampled_from(QUEUES))
        history.delivered(
            Delivery(message_id, queue, draw(st.sampled_from(CONSUMERS)), draw(st.booleans()), t)
        )
    depths = {q: draw(st.sampled_from((0, 0, 0, 1, None))) for q in QUEUES}
    return history, depths


def reference(history: History, depths: dict[str, int | None]) -> dict[str, Any]:
    publishes = list(history.publishes.values())
    deliveries = history.deliveries

    def valid(d: Delivery) -> bool:
        return any(p.id == d.id and p.queue == d.queue for p in publishes)

    def times(message_id: str) -> int:
        return sum(1 for d in deliveries if d.id == message_id and valid(d))

    lost = {p.id for p in publishes if p.outcome is Outcome.CONFIRMED and times(p.id) == 0}
    unexpected = sum(1 for d in deliveries if not valid(d))
    duplicated = {p.id: times(p.id) for p in publishes if times(p.id) > 1}
    recovered = {p.id for p in publishes if p.outcome is Outcome.INDETERMINATE and times(p.id)}
    # A delivery breaks the order when an earlier one to the same consumer connection,
    # neither redelivered, came from the same publisher connection with a later or equal
    # sequence number.
    violations = 0
    for j, later in enumerate(deliveries):
        if later.redelivered or not valid(later):
            continue
        pj = history.publishes[str(later.id)]
        for earlier in deliveries[:j]:
            if earlier.redelivered or not valid(earlier) or earlier.consumer != later.consumer:
                continue
            pi = history.publishes[str(earlier.id)]
            if (pi.publisher, pi.session) == (pj.publisher, pj.session) and pi.seq >= pj.seq:
                violations += 1
                break
    empty = all(depth == 0 for depth in depths.values())
    return {
        "lost": lost,
        "unexpected": unexpected,
        "duplicated": duplicated,
        "recovered": recovered,
        "violations": violations,
        "ok": not lost and not unexpected and not violations and empty,
    }


@settings(max_examples=150)
@given(histories())
def test_the_checker_agrees_with_the_reference(
    drawn: tuple[History, dict[str, int | None]],
) -> None:
    history, depths = drawn
    verdict = check(history, depths)
    expected = reference(history, depths)
    assert set(verdict.lost) == expected["lost"]
    assert len(verdict.lost) == len(expected["lost"])
    assert len(verdict.unexpected) == expected["unexpected"]
    assert verdict.duplicated == expected["duplicated"]
    assert set(verdict.recovered) == expected["recovered"]
    assert len(verdict.order_violations) == expected["violations"]
    assert verdict.ok == expected["ok"]
    counts = verdict.counts
    assert counts["attempted"] == sum(counts[o.value] for o in OUTCOMES)
    assert counts["deliveries"] == len(history.deliveries)
