"""Restarts: durable entities and persistent messages come back, transient ones do not.

Each test starts its own broker on a temporary data directory, stops it (SIGTERM: a clean
shutdown; SIGKILL: a crash) and starts a new one on the same directory. Before a SIGKILL the
test waits for a publisher confirm of a later persistent message: confirms come after the
group commit, and the store writes in order, so everything the broker was told before that
publish is on disk too.
"""

from __future__ import annotations

import datetime
import decimal
import signal
import time
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from tests.integration.conftest import URL_ENV, Broker, start_broker
from tests.integration.pika_support import Opened, connect

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.leveret_only

SIGNALS = [pytest.param(signal.SIGTERM, id="sigterm"), pytest.param(signal.SIGKILL, id="sigkill")]
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    import os

    if os.environ.get(URL_ENV):
        pytest.skip("needs a broker process the test controls")
    return str(tmp_path / "data")


class Restarting:
    """A broker on one data directory that the test restarts."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.broker: Broker = start_broker("--data-dir", data_dir)

    def restart(self, sig: int) -> None:
        if sig == signal.SIGKILL:
            self.sync()
        self.broker.stop(sig)
        self.broker = start_broker("--data-dir", self.data_dir)

    def sync(self) -> None:
        """Wait until everything said so far is on disk (see the module docstring)."""
        with Opened(connect(self.broker)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("sync.marker", durable=True)
            ch.basic_publish("", "sync.marker", b"", PERSISTENT)
            ch.queue_purge("sync.marker")
            ch.basic_publish("", "sync.marker", b"", PERSISTENT)

    def stop(self) -> None:
        if self.broker.process is not None and self.broker.process.poll() is None:
            self.broker.stop()


@pytest.fixture
def node(data_dir: str) -> Iterator[Restarting]:
    n = Restarting(data_dir)
    try:
        yield n
    finally:
        n.stop()


def exists(broker: Broker, kind: str, name: str) -> bool:
    with Opened(connect(broker)) as conn:
        ch = conn.channel()
        try:
            if kind == "queue":
                ch.queue_declare(name, passive=True)
            else:
                ch.exchange_declare(name, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != 404:
                raise
            return False
        return True


def drain(ch: Any, queue: str) -> list[tuple[Any, Any, bytes]]:
    got: list[tuple[Any, Any, bytes]] = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=False)
        if method is None:
            return got
        got.append((method, props, body))


@pytest.mark.parametrize("sig", SIGNALS)
def test_durable_definitions_survive_and_transient_ones_do_not(node: Restarting, sig: int) -> None:
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.exchange_declare("d.topic", "topic", durable=True)
        ch.exchange_declare("d.fanout", "fanout", durable=True, auto_delete=True)
        ch.exchange_declare("d.headers", "headers", durable=True, internal=True)
        ch.exchange_declare("d.alt", "fanout", durable=True)
        ch.exchange_declare(
            "d.direct", "direct", durable=True, arguments={"alternate-exchange": "d.alt"}
        )
        ch.exchange_declare("t.direct", "direct", durable=False)
        ch.exchange_bind("d.fanout", "d.topic", "a.#")  # exchange-to-exchange
        ch.exchange_bind("d.headers", "d.fanout")
        args = {
            "x-max-priority": 5,
            "x-message-ttl": 600000,
            "x-dead-letter-exchange": "d.alt",
            "x-max-length": 1000,
        }
        ch.queue_declare("d.q", durable=True, arguments=args)
        ch.queue_declare("d.headers.q", durable=True)
        ch.queue_declare("d.alt.q", durable=True)
        ch.queue_declare("d.unbound", durable=True)
        ch.queue_declare("t.q", durable=False)
        ch.queue_bind("d.q", "d.direct", "k")
        ch.queue_bind("d.headers.q", "d.headers", arguments={"x-match": "all", "n": 1, "s": "v"})
        ch.queue_bind("d.alt.q", "d.alt")
        ch.queue_bind("d.unbound", "d.direct", "u")
        ch.queue_unbind("d.unbound", "d.direct", "u")
        ch.queue_bind("t.q", "d.direct", "t")
        ch.queue_bind("d.q", "t.direct", "k")
    node.restart(sig)
    broker = node.broker
    for name in ("d.topic", "d.fanout", "d.headers", "d.alt", "d.direct"):
        assert exists(broker, "exchange", name), name
    for name in ("d.q", "d.headers.q", "d.alt.q", "d.unbound"):
        assert exists(broker, "queue", name), name
    assert not exists(broker, "exchange", "t.direct")
    assert not exists(broker, "queue", "t.q")
    with Opened(connect(broker)) as conn:
        ch = conn.channel()
        # Redeclaring with the same arguments is fine; different ones are refused (406).
        ch.queue_declare("d.q", durable=True, arguments=args)
        ch.exchange_declare("d.fanout", "fanout", durable=True, auto_delete=True)
        ch.exchange_declare("d.headers", "headers", durable=True, internal=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("d.q", durable=True, arguments={**args, "x-max-length": 5})
        assert info.value.reply_code == 406
        ch = conn.channel()
        ch.confirm_delivery()
        # The bindings route: topic -> fanout -> headers -> queue, direct -> queue,
        # the alternate exchange catches the rest, the unbound queue gets nothing.
        ch.basic_publish(
            "d.topic", "a.b", b"via-e2e", pika.BasicProperties(headers={"n": 1, "s": "v"})
        )
        ch.basic_publish("d.direct", "k", b"direct", pika.BasicProperties(priority=3))
        ch.basic_publish("d.direct", "u", b"to-alt")
        assert [b for _m, _p, b in drain(ch, "d.headers.q")] == [b"via-e2e"]
        assert [b for _m, _p, b in drain(ch, "d.q")] == [b"direct"]
        assert [b for _m, _p, b in drain(ch, "d.alt.q")] == [b"to-alt"]
        assert drain(ch, "d.unbound") == []


@pytest.mark.parametrize("sig", SIGNALS)
def test_persistent_messages_come_back_in_order_with_identical_properties(
    node: Restarting, sig: int
) -> None:
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    sent = []
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("q", durable=True)
        ch.queue_declare("q.transient", durable=False)
        for i in range(50):
            props = pika.BasicProperties(
                content_type="application/json",
                content_encoding="utf-8",
                headers={
                    "i": i,
                    "s": "text",
                    "b": b"\x00\xff",
                    "d": decimal.Decimal("1.25"),
                    "t": when,
                    "l": [1, "two", {"three": 3}],
                    "yes": True,
                },
                delivery_mode=2 if i % 3 else 1,
                priority=i % 10,
                correlation_id=f"c{i}",
                reply_to="replies",
                expiration="3600000",
                message_id=f"m{i}",
                timestamp=1700000000 + i,
                type="kind",
                user_id="guest",
                app_id="tests",
            )
            ch.basic_publish("", "q", b"body %d" % i, props)
            ch.basic_publish("", "q.transient", b"lost %d" % i, PERSISTENT)
            if i % 3:
                sent.append((b"body %d" % i, props))
    node.restart(sig)
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        got = drain(ch, "q")
        assert [b for _m, _p, b in got] == [b for b, _p in sent]
        for (_method, props, _body), (_b, expected) in zip(got, sent, strict=True):
            assert props.__dict__ == expected.__dict__
        assert all(not m.redelivered for m, _p, _b in got)
        assert not exists(node.broker, "queue", "q.transient")


@pytest.mark.parametrize("sig", SIGNALS)
def test_unacked_come_back_redelivered_and_acked_do_not(node: Restarting, sig: int) -> None:
    conn = connect(node.broker)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("q", durable=True)
        for i in range(10):
            ch.basic_publish("", "q", b"%d" % i, PERSISTENT)
        ch.basic_qos(prefetch_count=6)
        got: list[tuple[int, bytes]] = []

        def on_message(c: Any, method: Any, _props: Any, body: bytes) -> None:
            got.append((method.delivery_tag, body))

        tag = ch.basic_consume("q", on_message)
        while len(got) < 6:
            conn.process_data_events(time_limit=0.1)
        ch.basic_cancel(tag)  # no more deliveries; the unacked stay unacked
        ch.basic_ack(got[0][0])  # 0 acked
        ch.basic_ack(got[2][0])  # 2 acked
        ch.basic_nack(got[3][0], requeue=False)  # 3 rejected: gone
        ch.basic_nack(got[4][0], requeue=True)  # 4 requeued: redelivered later
        conn.process_data_events(time_limit=0.2)
        # 1, 4, 5 (and 4 again) are unacked now; 6..9 never delivered.
        if sig == signal.SIGKILL:
            node.sync()
        node.broker.stop(sig)
    finally:
        try:
            conn.close()
        except pika.exceptions.AMQPError:
            pass  # the broker went first
    node.broker = start_broker("--data-dir", node.data_dir)
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        after = [(b, m.redelivered) for m, _p, b in drain(ch, "q")]
    assert after == [
        (b"1", True),
        (b"4", True),
        (b"5", True),
        (b"6", False),
        (b"7", False),
        (b"8", False),
        (b"9", False),
    ]


@pytest.mark.parametrize("sig", SIGNALS)
def test_purge_delete_and_dead_lettering_are_durable(node: Restarting, sig: int) -> None:
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare("dlx", "fanout", durable=True)
        ch.queue_declare("dlq", durable=True)
        ch.queue_bind("dlq", "dlx")
        ch.queue_declare("src", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
        ch.queue_declare("purged", durable=True)
        ch.queue_declare("deleted", durable=True)
        for i in range(3):
            ch.basic_publish("", "src", b"s%d" % i, PERSISTENT)
            ch.basic_publish("", "purged", b"p%d" % i, PERSISTENT)
            ch.basic_publish("", "deleted", b"d%d" % i, PERSISTENT)
        ch.queue_purge("purged")
        ch.queue_delete("deleted")
        method, _props, _body = ch.basic_get("src")
        assert method is not None
        ch.basic_reject(method.delivery_tag, requeue=False)  # dead-lettered to dlq
        ch.queue_declare("deleted", durable=True)  # a new queue of the same name
        ch.basic_publish("", "deleted", b"new", PERSISTENT)
    node.restart(sig)
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        assert [b for _m, _p, b in drain(ch, "src")] == [b"s1", b"s2"]
        dead = drain(ch, "dlq")
        assert [b for _m, _p, b in dead] == [b"s0"]
        reason = dead[0][1].headers["x-death"][0]["reason"]
        assert reason in ("rejected", b"rejected")
        assert drain(ch, "purged") == []
        assert [b for _m, _p, b in drain(ch, "deleted")] == [b"new"]


def test_acks_before_a_clean_shutdown_are_kept(node: Restarting) -> None:
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("q", durable=True)
        for i in range(100):
            ch.basic_publish("", "q", b"%d" % i, PERSISTENT)
        for _ in range(60):
            method, _p, _b = ch.basic_get("q")
            ch.basic_ack(method.delivery_tag)
    node.broker.stop(signal.SIGTERM)  # acks not yet committed are written at shutdown
    node.broker = start_broker("--data-dir", node.data_dir)
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        assert [b for _m, _p, b in drain(ch, "q")] == [b"%d" % i for i in range(60, 100)]


def test_ttls_count_from_the_first_enqueue_across_a_restart(node: Restarting) -> None:
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.queue_declare("ttl.q", durable=True, arguments={"x-message-ttl": 6000})
        ch.queue_declare("plain.q", durable=True)
        published = time.monotonic()
        ch.basic_publish("", "ttl.q", b"short", PERSISTENT)
        ch.basic_publish(
            "", "plain.q", b"own-ttl", pika.BasicProperties(delivery_mode=2, expiration="6000")
        )
        ch.basic_publish(
            "", "plain.q", b"long", pika.BasicProperties(delivery_mode=2, expiration="600000")
        )
    time.sleep(3)
    node.restart(signal.SIGKILL)
    # Counted from the restart they would live until at least 9 s after the publish.
    time.sleep(max(0.0, 6.5 - (time.monotonic() - published)))
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        assert ch.basic_get("ttl.q", auto_ack=True)[0] is None
        _method, _props, body = ch.basic_get("plain.q", auto_ack=True)
        assert body == b"long"
        assert ch.basic_get("plain.q", auto_ack=True)[0] is None


def test_data_dir_from_the_environment(data_dir: str) -> None:
    broker = start_broker(env={"LEVERET_DATA_DIR": data_dir})
    try:
        with Opened(connect(broker)) as conn:
            conn.channel().queue_declare("env.q", durable=True)
    finally:
        broker.stop()
    assert "from " + data_dir in broker.log_text()
    broker = start_broker("--data-dir", data_dir)
    try:
        assert exists(broker, "queue", "env.q")
    finally:
        broker.stop()


def test_a_torn_tail_is_dropped_with_one_log_line(node: Restarting) -> None:
    from pathlib import Path

    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("q", durable=True)
        for i in range(5):
            ch.basic_publish("", "q", b"%d" % i, PERSISTENT)
    node.broker.stop(signal.SIGKILL)
    segment = Path(node.data_dir) / "msgs" / "00000001.seg"
    with open(segment, "ab") as f:
        f.write(b"\xa7\x4c\x40\x00\x00\x00\x12\x34\x56\x78half a record")
    node.broker = start_broker("--data-dir", node.data_dir)
    lines = [line for line in node.broker.log if "torn tail" in line]
    assert len(lines) == 1, node.broker.log_text()
    assert "00000001.seg" in lines[0]
    assert "dropped 23 bytes" in lines[0]
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        assert [b for _m, _p, b in drain(ch, "q")] == [b"%d" % i for i in range(5)]


def test_corruption_in_the_middle_stops_the_broker_with_a_clear_error(
    node: Restarting,
) -> None:
    import subprocess
    import sys
    from pathlib import Path

    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("q", durable=True)
        for i in range(5):
            ch.basic_publish("", "q", b"message-%d" % i, PERSISTENT)
    node.broker.stop(signal.SIGKILL)
    segment = Path(node.data_dir) / "msgs" / "00000001.seg"
    data = bytearray(segment.read_bytes())
    data[data.index(b"message-1")] ^= 0x20
    segment.write_bytes(bytes(data))
    result = subprocess.run(
        [sys.executable, "-m", "leveret", "serve", "--port", "0", "--data-dir", node.data_dir],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("leveret: store file ")
    assert "00000001.seg is damaged at offset" in last
    assert "listening on" not in result.stderr
    assert segment.read_bytes() == bytes(data)


def test_a_quorum_queue_keeps_its_transient_messages_too(node: Restarting) -> None:
    """RabbitMQ's quorum queues keep every message, whatever its delivery mode (a classic
    queue keeps the persistent ones only): a kill -9 after the confirms loses none, and
    each comes back as it was published, delivery mode 1 included."""
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_declare("classic", durable=True)
        for i in range(10):
            mode = 1 if i % 2 else 2
            props = pika.BasicProperties(delivery_mode=mode, message_id=f"m{i}")
            ch.basic_publish("", "qq", b"q%d" % i, props)
            ch.basic_publish("", "classic", b"c%d" % i, props)
    node.restart(signal.SIGKILL)
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        got = drain(ch, "qq")
        assert [b for _m, _p, b in got] == [b"q%d" % i for i in range(10)]
        assert [p.delivery_mode for _m, p, _b in got] == [1 if i % 2 else 2 for i in range(10)]
        assert [b for _m, _p, b in drain(ch, "classic")] == [b"c%d" % i for i in range(0, 10, 2)]
