"""``bench.link_peer_path``: every delivery the leader's frames carry reaches its consumer
(a message kept once, delivered to all four), and every ack goes back in the turn's
``Settle`` with the consumers' credit (the figure it prints is per delivery)."""

from __future__ import annotations

from bench import link_peer_path
from leveret.protocol.cluster import codec as c


def test_every_delivery_is_handed_and_acked() -> None:
    ops, delivered = link_peer_path.written(100)
    assert [len(messages) for messages in delivered] == [100] * 4
    for k in range(100):
        first = delivered[0][k]
        assert first.body == link_peer_path.BODY
        assert all(messages[k] is first for messages in delivered[1:])
    settled = [did for op in ops if isinstance(op, c.Settle) for did in op.dids]
    assert sorted(settled) == list(range(1, 401))
    assert {op.cid for op in ops if isinstance(op, c.Credit)} == {1, 2, 3, 4}


def test_a_run_times_its_rounds() -> None:
    whole, acks = link_peer_path.run(25, 2)
    assert whole > acks > 0
