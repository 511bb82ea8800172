"""The front-end mutation fuzzer's short run (``tools.frontend_traffic``): real clients'
recorded traffic (pika, Qpid Proton, qpid.messaging over 0-10, rstream, the project's
AMQP/Fast and 0-8/0-9 clients), mutated and replayed against every front end in memory,
through its shell, never makes an internal error. The longer run, over sockets too, is
``python -m tools.frontend_traffic fuzz`` (docs/front-ends.md, "Fuzzing")."""

from __future__ import annotations

import pytest
from tools.frontend_traffic import load_corpora, replay_in_memory

from leveret.server.amqpfast.connection import FastConnection
from leveret.testing.conformance import DRIVERS

# Mutated connections per recorded client in the suite (about a second in all).
PER_CORPUS = 150
CORPORA = load_corpora()


def test_every_front_end_has_recorded_traffic() -> None:
    recorded = {corpus.protocol for corpus in CORPORA}
    assert {driver.protocol for driver in DRIVERS} <= recorded
    for corpus in CORPORA:
        assert corpus.connections, corpus.name
        assert all(corpus.connections), corpus.name


@pytest.mark.parametrize("corpus", CORPORA, ids=[c.name for c in CORPORA])
def test_mutated_traffic_never_makes_an_internal_error(corpus: object) -> None:
    findings = list(replay_in_memory([corpus], per_corpus=PER_CORPUS, seed=23))  # type: ignore[list-item]
    assert findings == [], "\n".join(
        f"{f.corpus} seed {f.seed}: {f.what}; chunks {[c.hex() for c in f.chunks]}"
        for f in findings
    )


def test_the_fuzzer_sees_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle works: a front end that raises is reported, with the input that did it."""

    def broken(self: FastConnection, event: object) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr(FastConnection, "_login", broken)
    fast = [corpus for corpus in CORPORA if corpus.name.startswith("fast")]
    findings = list(replay_in_memory(fast, per_corpus=20, seed=1))
    assert findings
    assert all(f.what == "1 internal error(s)" and f.chunks for f in findings)
