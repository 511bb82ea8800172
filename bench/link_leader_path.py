"""``python -m bench.link_leader_path``: a forwarded message's work on its queue's leader,
in memory (no sockets, no loop): the inter-node link's front end (``LinkFrontEnd``) reads a
burst of ``Publish`` frames, enqueues each, delivers it to the peer's consumer and writes
its ``Deliver``, as node ``b`` does in ``bench.cluster_scenarios``' forwarded setup.

Scenarios (``--scenario``), each round ``--burst`` publishes read at once:

- ``a``: one queue, 16 B messages, an auto-settled consumer (scenario a);
- ``e``: ten queues, a publish to each in turn, 256 B messages, manual settlement: each
  round also reads a ``Settle`` accepting the previous round's deliveries (scenario e; the
  consumers' credit is not limited, the rest of e's credit traffic is not here).

Prints the best of ``--rounds`` timings (process time, ten bursts each) per message: what a
change of the leader's path saves, less blurred than the cluster runs on a busy machine.
Run it on a build (``PYTHONPATH=BUILD``) against another, interleaved.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from leveret.build_info import describe
from leveret.model.broker import Broker
from leveret.protocol.cluster import codec as c
from leveret.server.cluster_link.frontend import LinkFrontEnd, LinkIdentity
from leveret.testing.client import feed, new_shell

if TYPE_CHECKING:
    from leveret.server.shell.shell import Shell

SECRET = "bench-secret"  # noqa: S105 - the in-memory link's, nothing's password
PROPS = b"\x00\x00"  # 0-9-1 basic properties: no flags
CREDIT = 2**32 - 1  # the most a Consume gives: never runs out in a run


def _linked(broker: Broker) -> LinkFrontEnd:
    """A leader's link front end, its peer ``a`` proven (every link feature announced)."""
    identity = LinkIdentity("b", SECRET, 7)
    shell = new_shell(lambda s: LinkFrontEnd(s, identity), broker)
    front = shell.front
    assert isinstance(front, LinkFrontEnd)
    hello = c.Hello("a", 1, b"n" * 16, c.cluster_tag(SECRET), c.FEATURES)
    feed(shell, c.encode(hello), 0.0)
    leader_hello = c.Reader().feed(b"".join(shell.take_output(0.0)))[0]
    assert isinstance(leader_hello, c.Hello)
    proof = c.Proof(c.proof(SECRET, "dialer", "a", c.challenge(leader_hello)))
    feed(shell, c.encode(proof), 0.0)
    shell.take_output(0.0)
    assert front.proven
    return front


def _setup(scenario: str, burst: int) -> tuple[Shell, bytes]:
    """The leader's link with its consumers, and a burst of publishes' bytes."""
    queues = 10 if scenario == "e" else 1
    size = 256 if scenario == "e" else 16
    broker = Broker()
    for i in range(queues):
        broker.vhosts["/"].declare_queue(f"q{i}", owner=None)
    shell = _linked(broker).shell
    auto = scenario != "e"
    consumes = [c.Consume(i + 1, "/", f"q{i}", auto, False, CREDIT, 0) for i in range(queues)]
    feed(shell, b"".join(c.encode(op) for op in consumes), 0.0)
    shell.take_output(0.0)
    body = b"x" * size
    data = b"".join(
        c.publish_frame(0, "/", f"q{k % queues}", "", f"q{k % queues}", 0, PROPS, body)
        for k in range(burst)
    )
    return shell, data


def deliveries(scenario: str, burst: int) -> list[c.Deliver]:
    """What the leader writes for one burst (the tests check it delivers each publish)."""
    shell, data = _setup(scenario, burst)
    feed(shell, data, 1.0)
    out = c.Reader().feed(b"".join(shell.take_output(1.0)))
    return [op for op in out if isinstance(op, c.Deliver)]


def run(scenario: str, burst: int, rounds: int) -> float:
    """The best round's process time per message, in ns."""
    shell, data = _setup(scenario, burst)
    manual = scenario == "e"
    dids: list[int] = []
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(10):
            if dids:
                feed(shell, c.settle_frame(c.ACCEPT, dids), 1.0)
            feed(shell, data, 1.0)
            out = b"".join(shell.take_output(1.0))
            if manual:
                dids = [op.did for op in c.Reader().feed(out) if isinstance(op, c.Deliver)]
        best = min(best, (time.process_time() - started) / (10 * burst))
    return best * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.link_leader_path", description=__doc__)
    parser.add_argument("--scenario", choices=("a", "e"), default="a")
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    ns = run(args.scenario, args.burst, args.rounds)
    print(f"{args.scenario}: {ns:.0f} ns a message on the leader ({describe()})")


if __name__ == "__main__":
    main()
