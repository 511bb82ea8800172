"""``python -m bench.store_path``: a persistent message's work in the message store on the
loop thread, in memory (no writer thread, no disk): ``DiskStore.enqueued``, its first
delivery (``delivered``), its removal by an ack (``removed``) and each one's share of the
batch handed to the writer (``_submit``: the records framed, checksummed and joined), as a
queue's leader does for scenario c (and one node for its own queue).

Each round, ``--batch`` messages of ``--size`` bytes enqueued, then delivered, then removed,
a batch each; the writer's jobs are dropped unwritten. Prints the best of ``--rounds``
timings per message, each step and the sum: what a change of the store's loop-thread path
saves, less blurred than the cluster runs on a busy machine. Run it on a build
(``PYTHONPATH=BUILD``) against another, interleaved.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from leveret.build_info import describe
from leveret.convert.amqp091 import wire_message
from leveret.store.disk import DiskStore
from leveret.store.records import COMMIT, scan

QUEUE = "cb-forwarded-c-r1-20801"  # a name as long as bench.cluster_scenarios' queues'
PROPS = b"\x10\x00\x02"  # 0-9-1 basic properties: delivery-mode 2 (persistent)
STEPS = ("enqueued", "submit", "delivered", "submit", "removed", "submit")


def run(size: int, batch: int, rounds: int) -> list[float]:
    """The best round's time per message of each of ``STEPS``, in ns."""
    with tempfile.TemporaryDirectory(prefix="leveret-store-bench-") as path:
        store = DiskStore(path)
        store.open()
        try:
            qid = store.queue_declared("/", QUEUE, False, {})
            messages = [wire_message("", QUEUE, PROPS, b"x" * size) for _ in range(batch)]
            best = [float("inf")] * len(STEPS)
            for _ in range(rounds):
                for message in messages:
                    message.store_id = 0  # a new message each round, not an ``E`` record
                marks = [time.perf_counter()]
                sids = [store.enqueued(qid, message) for message in messages]
                marks.append(time.perf_counter())
                _submit(store)
                marks.append(time.perf_counter())
                for sid in sids:
                    store.delivered(qid, sid)
                marks.append(time.perf_counter())
                _submit(store)
                marks.append(time.perf_counter())
                for sid in sids:
                    store.removed(qid, sid)
                marks.append(time.perf_counter())
                _submit(store)
                marks.append(time.perf_counter())
                for i in range(len(STEPS)):
                    best[i] = min(best[i], (marks[i + 1] - marks[i]) / batch)
                _drop_jobs(store)
            return [b * 1e9 for b in best]
        finally:
            _drop_jobs(store)
            store.close()


def batches(size: int, batch: int) -> list[list[bytes]]:
    """The records of one round's three batches, as the writer would get them (the tests
    check that the round writes what it claims to time)."""
    with tempfile.TemporaryDirectory(prefix="leveret-store-bench-") as path:
        store = DiskStore(path)
        store.open()
        try:
            qid = store.queue_declared("/", QUEUE, False, {})
            out: list[list[bytes]] = []
            sids = [
                store.enqueued(qid, wire_message("", QUEUE, PROPS, b"x" * size))
                for _ in range(batch)
            ]
            out.append(_taken(store))
            for sid in sids:
                store.delivered(qid, sid)
            out.append(_taken(store))
            for sid in sids:
                store.removed(qid, sid)
            out.append(_taken(store))
            return out
        finally:
            store.close()


def _taken(store: DiskStore) -> list[bytes]:
    """The open batch handed over and taken back from the writer's queue: its records."""
    _submit(store)
    job = store._jobs.get()
    assert job is not None
    segment = job[2]
    return [bytes(p) for p in scan(segment).payloads if bytes(p) != COMMIT]


def _submit(store: DiskStore) -> None:
    """The batch to the writer, as the loop's idle callback hands it (none runs here: the
    batch is taken as written at once)."""
    store._submit()
    store._busy = False


def _drop_jobs(store: DiskStore) -> None:
    jobs = store._jobs
    while not jobs.empty():
        jobs.get()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_path", description=__doc__)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    times = run(args.size, args.batch, args.rounds)
    steps = ", ".join(f"{step} {ns:.0f}" for step, ns in zip(STEPS, times, strict=True))
    print(f"{sum(times):.0f} ns a message ({steps}; {describe()})")


if __name__ == "__main__":
    main()
