"""Confirms gated by a queue led by another node (model/confirms.py): in order, a refusal
nacks that publish alone, and the others around it are acked."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.model.completion import Completion
from leveret.model.confirms import Confirms
from leveret.model.journal import Journal, NullJournal


class Store:
    def __init__(self) -> None:
        self.journal: Journal = NullJournal()
        self.store_journal: Journal = self.journal


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bool, bool]] = []

    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        self.sent.append((upto, multiple, ack))


def outcome(sent: list[tuple[int, bool, bool]]) -> dict[int, bool]:
    """Each publish's verdict from the confirms, checking they come in order, once."""
    verdicts: dict[int, bool] = {}
    last = 0
    for upto, multiple, ack in sent:
        assert upto > last
        first = last + 1 if multiple else upto
        for seq in range(first, upto + 1):
            verdicts[seq] = ack
        last = upto
    return verdicts


def test_a_remote_publish_waits_and_its_refusal_is_a_nack_alone() -> None:
    sink = Sink()
    confirms = Confirms(Store(), sink)
    pending: list[Completion[bool]] = []
    for _ in range(4):
        confirms.seq += 1
        done: Completion[bool] = Completion()
        pending.append(done)
        confirms.published(True, False, done)
    confirms.flush()
    assert sink.sent == []
    pending[1].resolve(True)
    pending[0].resolve(True)
    pending[3].resolve(True)
    assert sink.sent == []  # 3 is still out
    pending[2].resolve(False)
    assert sink.sent == [(2, True, True), (3, False, False), (4, False, True)]


@given(
    st.lists(st.sampled_from(["local", "remote-ack", "remote-nack", "flush"]), max_size=40),
    st.randoms(use_true_random=False),
)
@settings(max_examples=200)
def test_every_publish_gets_its_verdict_in_order(script: list[str], rng: object) -> None:
    sink = Sink()
    confirms = Confirms(Store(), sink)
    expected: dict[int, bool] = {}
    waiting: list[tuple[Completion[bool], bool]] = []
    for step in script:
        if step == "flush":
            confirms.flush()
            continue
        confirms.seq += 1
        if step == "local":
            confirms.published(True, False)
            expected[confirms.seq] = True
        else:
            done: Completion[bool] = Completion()
            ack = step == "remote-ack"
            waiting.append((done, ack))
            confirms.published(True, False, done)
            expected[confirms.seq] = ack
    confirms.flush()
    rng.shuffle(waiting)  # type: ignore[attr-defined]
    for done, ack in waiting:
        done.resolve(ack)
    assert outcome(sink.sent) == expected


def _remote_batch(confirms: Confirms, count: int) -> list[Completion[bool]]:
    pending: list[Completion[bool]] = []
    for _ in range(count):
        confirms.seq += 1
        done: Completion[bool] = Completion()
        pending.append(done)
        confirms.published(True, False, done)
    confirms.flush()
    return pending


def test_a_batch_confirmed_in_order_waits_on_its_last_publish_alone() -> None:
    # One callback a confirm send, not one a publish: the leader confirms in order.
    sink = Sink()
    confirms = Confirms(Store(), sink)
    pending = _remote_batch(confirms, 100)
    assert [len(done._callbacks or ()) for done in pending] == [0] * 99 + [1]
    for done in pending[:-1]:
        done.resolve(True)
    assert sink.sent == []
    pending[-1].resolve(True)
    assert sink.sent == [(100, True, True)]


def test_a_batch_whose_last_publish_is_confirmed_first_waits_for_the_others() -> None:
    # Two leaders: the last publish's confirm comes before an earlier one's (a failure).
    sink = Sink()
    confirms = Confirms(Store(), sink)
    pending = _remote_batch(confirms, 5)
    pending[4].resolve(True)
    pending[3].resolve(True)
    assert sink.sent == []
    assert [len(done._callbacks or ()) for done in pending] == [0, 0, 1, 0, 0]
    pending[0].resolve(True)
    pending[2].fail(ConnectionError("the leader's node went"))
    assert sink.sent == []
    pending[1].resolve(True)
    assert sink.sent == [(2, True, True), (3, False, False), (5, True, True)]
