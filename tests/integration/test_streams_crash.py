"""kill -9 while publishing to a stream with de-duplication ids: exactly-once across crashes.

One data directory, ``CYCLES`` times: start a broker, publish numbered messages with
``x-stream-producer``/``x-stream-sequence`` and confirms, with a live consumer attached at
``first``, SIGKILL the broker after a random moment, restart it on the same directory and
read the whole stream back. The publisher then resumes from its last *confirmed* sequence,
republishing what was in flight at the crash (the broker drops what it already stored).
What must hold after every restart:

- offsets are 0, 1, 2, ... with no gap or repeat, and each message keeps its offset;
- the sequences read back are 0..n-1, each once, in order: every confirmed one is there,
  and nothing beyond what was sent;
- passive declare reports n (the next offset).

``LEVERET_STREAM_CRASH_CYCLES`` sets a longer run.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from tests.integration.conftest import URL_ENV, start_broker
from tests.integration.pika_support import Opened, connect, pump

if TYPE_CHECKING:
    from pathlib import Path

    from tests.integration.conftest import Broker

# Left out of the compiled pass (scripts/test): the stream log's crash safety.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]

CYCLES = int(os.environ.get("LEVERET_STREAM_CRASH_CYCLES", "6"))
STREAM = "crash.stream"
ARGS = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 20_000}


def publish_until_killed(broker: Broker, first_seq: int, sent: list[int]) -> int:
    """Publish from ``first_seq`` until the connection dies; returns the next unconfirmed."""
    seq = first_seq
    try:
        with Opened(connect(broker)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            while True:
                props = pika.BasicProperties(
                    headers={"x-stream-producer": "crash", "x-stream-sequence": seq}
                )
                sent.append(seq)
                ch.basic_publish("", STREAM, b"%d|" % seq + b"p" * random.randrange(300), props)
                seq += 1  # confirmed
    except (pika.exceptions.AMQPError, OSError):
        return seq


def tail(broker: Broker, got: list[tuple[int, int]], stop: threading.Event) -> None:
    """A live consumer; it only checks order while the broker runs."""
    try:
        with Opened(connect(broker)) as conn:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=50)

            def on_message(c: Any, m: Any, p: Any, body: bytes) -> None:
                got.append((p.headers["x-stream-offset"], int(body.split(b"|")[0])))
                c.basic_ack(m.delivery_tag)

            ch.basic_consume(STREAM, on_message, arguments={"x-stream-offset": "first"})
            pump(conn, stop.is_set, 60)
    except (pika.exceptions.AMQPError, OSError):
        return


def read_all(broker: Broker) -> tuple[int, list[tuple[int, int]]]:
    with Opened(connect(broker)) as conn:
        ch = conn.channel()
        length = int(ch.queue_declare(STREAM, passive=True).method.message_count)
        got: list[tuple[int, int]] = []
        if length:
            ch.basic_qos(prefetch_count=min(length, 1000))

            def on_message(c: Any, m: Any, p: Any, body: bytes) -> None:
                got.append((p.headers["x-stream-offset"], int(body.split(b"|")[0])))
                if len(got) <= length - min(length, 1000):
                    c.basic_ack(m.delivery_tag)

            ch.basic_consume(STREAM, on_message, arguments={"x-stream-offset": "first"})
            assert pump(conn, lambda: len(got) >= length, 30)
        return length, got


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    if os.environ.get(URL_ENV):
        pytest.skip("needs a broker process the test controls")
    return str(tmp_path / "data")


def test_kill_9_while_publishing_with_dedup_ids_is_exactly_once(data_dir: str) -> None:
    rng = random.Random(int(os.environ.get("LEVERET_CRASH_SEED", "0")) or None)
    broker = start_broker("--data-dir", data_dir)
    next_seq = 0
    try:
        with Opened(connect(broker)) as conn:
            conn.channel().queue_declare(STREAM, durable=True, arguments=ARGS)
        for _cycle in range(CYCLES):
            sent: list[int] = []
            live: list[tuple[int, int]] = []
            stop = threading.Event()
            consumer = threading.Thread(target=tail, args=(broker, live, stop))
            consumer.start()
            assert broker.process is not None
            killer = threading.Timer(rng.uniform(0.3, 1.2), broker.process.kill)
            killer.start()
            confirmed_upto = publish_until_killed(broker, next_seq, sent)
            killer.join()
            stop.set()
            consumer.join(10)
            broker.stop(signal.SIGKILL)
            assert [o for o, _s in live] == list(range(len(live)))
            broker = start_broker("--data-dir", data_dir)
            length, got = read_all(broker)
            assert [o for o, _s in got] == list(range(length))
            assert [s for _o, s in got] == list(range(length))  # each sequence once, in order
            assert length >= confirmed_upto  # every confirmed message is there
            assert length <= (max(sent) + 1 if sent else next_seq)
            # Resume after the last confirmed: what was in flight is sent again and dropped
            # where the broker stored it.
            next_seq = confirmed_upto
        # One more publish round on a healthy broker: duplicates of stored ones are dropped.
        with Opened(connect(broker)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            length, _got = read_all(broker)
            for seq in range(next_seq, length + 3):
                props = pika.BasicProperties(
                    headers={"x-stream-producer": "crash", "x-stream-sequence": seq}
                )
                ch.basic_publish("", STREAM, b"%d|" % seq, props)
        final, got = read_all(broker)
        assert final == length + 3
        assert [s for _o, s in got] == list(range(final))
    finally:
        if broker.process is not None and broker.process.poll() is None:
            broker.stop()
