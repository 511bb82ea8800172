"""Memory flow control: publishers are blocked above the watermark and unblocked after a drain."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from typing import TYPE_CHECKING, Any

import pika
import pytest
import requests

from tests.integration.conftest import start_broker
from tests.integration.ctl_support import new_data_dir, ok
from tests.integration.mgmt_support import AUTH, start_mgmt_broker

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event

    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only]


def test_publisher_blocked_above_watermark_and_unblocked_after_drain(name: str) -> None:
    broker = start_broker("--memory-high-watermark", "200000")
    events: list[str] = []
    try:
        params = pika.URLParameters(broker.url)
        publisher = pika.BlockingConnection(params)
        publisher.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
        publisher.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
        pch = publisher.channel()
        pch.queue_declare(name)
        body = b"x" * 10_000
        for _ in range(40):  # 400 kB: well past the 200 kB watermark
            pch.basic_publish("", name, body)
        deadline = time.monotonic() + 10
        while "blocked" not in events and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.1)
        assert events == ["blocked"]

        # A consumer on another connection is still served while publishers are blocked.
        consumer = pika.BlockingConnection(params)
        cch = consumer.channel()
        drained = 0
        while drained < 40:
            method, _props, got = cch.basic_get(name, auto_ack=True)
            if method is None:
                consumer.process_data_events(time_limit=0.1)
                continue
            assert got == body
            drained += 1
        consumer.close()

        deadline = time.monotonic() + 10
        while events[-1] != "unblocked" and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.1)
        # The paused publisher's unread publishes may block it again before the drain ends.
        assert events[-1] == "unblocked"
        assert events == ["blocked", "unblocked"] * (len(events) // 2)
        pch.basic_publish("", name, b"after")
        method, _props, got = pch.basic_get(name, auto_ack=True)
        assert got == b"after"
        publisher.close()
    finally:
        broker.stop()


def test_client_without_capability_is_paused_but_not_told(name: str) -> None:
    broker = start_broker("--memory-high-watermark", "50000")
    try:
        params = pika.URLParameters(broker.url)
        # pika always advertises connection.blocked; turn it off through client properties.
        params.client_properties = {"capabilities": {"connection.blocked": False}}
        publisher = pika.BlockingConnection(params)
        events: list[str] = []
        publisher.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
        pch = publisher.channel()
        pch.queue_declare(name)
        for _ in range(10):
            pch.basic_publish("", name, b"y" * 10_000)
        deadline = time.monotonic() + 10
        while "memory alarm" not in broker.log_text() and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.1)
        assert "memory alarm" in broker.log_text()
        publisher.process_data_events(time_limit=0.3)
        assert events == []
        # The broker is not reading from the publisher. Drain until the alarm stays clear (the
        # publishes still unread when it was paused may raise it again), then close cleanly.
        other = pika.BlockingConnection(pika.URLParameters(broker.url))
        och = other.channel()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            och.queue_purge(name)
            time.sleep(0.3)
            log = broker.log_text()
            cleared = log.count("memory alarm cleared") == log.count("memory alarm:")
            if cleared and och.queue_declare(name, passive=True).method.message_count == 0:
                break
        other.close()
        publisher.close()
    finally:
        broker.stop()


def test_a_publisher_outrunning_its_consumer_is_paced_without_loss_or_reordering(
    broker: Broker, name: str
) -> None:
    """Past ``Queue.backlog_pace`` ready messages with a consumer attached, the publisher's
    turns shrink (server/connection.py); every message still arrives once, in order."""
    total = 20_000
    params = pika.URLParameters(broker.url)
    consumer = pika.BlockingConnection(params)
    cch = consumer.channel()
    cch.queue_declare(name)
    cch.basic_qos(prefetch_count=20)
    received: list[int] = []

    def on_message(ch: Any, method: Any, _props: Any, body: bytes) -> None:
        received.append(int(body))
        ch.basic_ack(method.delivery_tag)

    cch.basic_consume(name, on_message)

    def publish() -> None:
        publisher = pika.BlockingConnection(params)
        pch = publisher.channel()
        for i in range(total):
            pch.basic_publish("", name, b"%d" % i)
        publisher.close()

    thread = threading.Thread(target=publish)
    thread.start()
    deadline = time.monotonic() + 60
    while len(received) < total and time.monotonic() < deadline:
        consumer.process_data_events(time_limit=0.2)
    thread.join(timeout=10)
    consumer.close()
    assert received == list(range(total))


def _flood(url: str, queue: str, stop: Event) -> None:
    publisher = pika.BlockingConnection(pika.URLParameters(url))
    pch = publisher.channel()
    body = b"x" * 16
    while not stop.is_set():
        for _ in range(100):
            pch.basic_publish("", queue, body)
    publisher.close()


def _consume_slowly(url: str, queue: str, stop: Event, acked: Any) -> None:
    """A slow consumer that keeps acking, in a process of its own: as a thread of the
    test's process it shared the GIL with the monitor, and on a loaded machine a pause of
    a whole ``HOLD_MAX`` looked like a consumer that stopped."""
    consumer = pika.BlockingConnection(pika.URLParameters(url))
    cch = consumer.channel()
    cch.basic_qos(prefetch_count=10)

    def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
        time.sleep(0.001)  # a slow consumer, but one that keeps acking
        ch.basic_ack(method.delivery_tag)
        with acked.get_lock():
            acked.value += 1

    cch.basic_consume(queue, on_message)
    while not stop.is_set():
        consumer.process_data_events(time_limit=0.1)
    consumer.close()


def _consume_with_a_pause(url: str, queue: str, stop: Event, acked: Any, pause: float) -> None:
    """``_consume_slowly``'s consumer that, after its first 500 acks, acks nothing for
    ``pause`` seconds (a long collection, a slow batch: its prefetch stays full, nothing
    departs from its queue), then acks on as before."""
    consumer = pika.BlockingConnection(pika.URLParameters(url))
    cch = consumer.channel()
    cch.basic_qos(prefetch_count=10)
    paused = False

    def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
        nonlocal paused
        time.sleep(0.001)
        ch.basic_ack(method.delivery_tag)
        with acked.get_lock():
            acked.value += 1
        if acked.value >= 500 and not paused:
            paused = True
            time.sleep(pause)

    cch.basic_consume(queue, on_message)
    while not stop.is_set():
        consumer.process_data_events(time_limit=0.1)
    consumer.close()


def _backlog_depths(
    broker: Broker, name: str, publishers: int, *, pause: float = 0.0, seconds: float = 3.0
) -> list[int]:
    """The queue's depth every 50 ms for ``seconds`` while ``publishers`` connections
    flood it and a slow consumer that keeps acking drains it (with ``pause``: that stops
    acking once for so long, ``_consume_with_a_pause``)."""
    params = pika.URLParameters(broker.url)
    monitor = pika.BlockingConnection(params)
    mch = monitor.channel()
    mch.queue_declare(name)

    # The publishers in processes of their own: threads of this one would take the GIL from
    # the consumer for long enough (a whole HOLD_MAX) that its queue looked stalled.
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    acked = spawn.Value("i", 0)

    if pause:
        consumer = spawn.Process(
            target=_consume_with_a_pause, args=(broker.url, name, stop, acked, pause)
        )
    else:
        consumer = spawn.Process(target=_consume_slowly, args=(broker.url, name, stop, acked))
    consumer.start()
    while mch.queue_declare(name, passive=True).method.consumer_count < 1:
        time.sleep(0.01)
    flooders = [
        spawn.Process(target=_flood, args=(broker.url, name, stop)) for _ in range(publishers)
    ]
    for flooder in flooders:
        flooder.start()
    depths: list[int] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            depths.append(mch.queue_declare(name, passive=True).method.message_count)
            time.sleep(0.05)
    finally:
        stop.set()
        # The queue goes first: its consumer's slow pace held the publishers, and what
        # their sockets still held went in a paced turn per hold, longer than the joins
        # waited (each test took 20-70 s of time-outs). Without it, they publish to no
        # queue and finish at once; the consumer is told its queue went.
        mch.queue_delete(name)
        for flooder in flooders:
            flooder.join(timeout=30)
            if flooder.exitcode is None:
                flooder.kill()
        consumer.join(timeout=10)
        if consumer.exitcode is None:
            consumer.kill()
    monitor.close()
    assert acked.value > 0
    return depths


def test_a_publisher_far_ahead_of_its_consumer_is_held_and_the_backlog_stays_bounded(
    broker: Broker, name: str
) -> None:
    """Past ``Queue.backlog_hold`` ready messages with a consumer that still acks, the
    publisher's connection is not read until the backlog shrinks (``Shell.held``): its
    client blocks on write, and the backlog stays near the hold level rather than growing
    as fast as the publisher can write."""
    depths = _backlog_depths(broker, name, 1)
    # backlog_hold is 4096; what the paused socket and one paced turn let in comes on top.
    # Unheld, pika's publisher outruns this consumer by several thousand messages a second.
    assert max(depths) < 8000, max(depths)


def test_publishers_far_ahead_of_their_consumer_are_held_and_the_backlog_stays_bounded(
    broker: Broker, name: str
) -> None:
    """Two publishers on one queue: while one is held, the others' publishes may keep the
    queue as long as it was although its consumer drains it. A hold judged by the queue's
    length took that for a consumer that stopped (``Shell._stalled``) and let each
    publisher go by turns, and the backlog grew as fast as they could write; judged by what
    departed from the queue (``Queue.departed``), every one stays held."""
    depths = _backlog_depths(broker, name, 2)
    # As for one publisher: what two paused sockets and paced turns let in comes on top.
    assert max(depths) < 8000, max(depths)


def test_a_publisher_is_held_again_once_its_consumer_acks_again_after_a_pause(
    broker: Broker, name: str
) -> None:
    """A consumer that stops acking for longer than ``STALL_WINDOW`` looks stopped: its
    queue holds no publisher for a while (``Shell._stalled``). Once messages depart from it again
    it holds its publishers again (after ``STALL_RECHECK``), and the backlog stops growing.
    Marked stalled until the queue drained below the hold, a publisher faster than the
    consumer never let it drain: the backlog grew for good (scenario e with the Go tool:
    two million messages in 10 s, docs/benchmarks.md)."""
    depths = _backlog_depths(broker, name, 1, pause=0.6, seconds=5.0)
    # The pause comes after 500 acks (0.5 s or more): from 3 s on, the publisher is held
    # again and the backlog shrinks at the consumer's pace. Unheld, pika's publisher
    # outruns this consumer by thousands of messages a second (about 28,000 here).
    at_3s = depths[len(depths) * 3 // 5]
    assert depths[-1] < at_3s + 4000, depths


def test_a_queue_without_consumers_is_never_held(broker: Broker, name: str) -> None:
    """A queue no one consumes from is not behind: it takes 20,000 publishes at the
    publisher's pace (held past ``backlog_hold``, it would let in a paced turn per
    ``HOLD_MAX``: minutes for the rest)."""
    total = 20_000
    params = pika.URLParameters(broker.url)
    publisher = pika.BlockingConnection(params)
    pch = publisher.channel()
    pch.queue_declare(name)
    started = time.monotonic()
    for _ in range(total):
        pch.basic_publish("", name, b"x" * 16)
    depth = pch.queue_declare(name, passive=True).method.message_count
    elapsed = time.monotonic() - started
    pch.queue_delete(name)
    publisher.close()
    assert depth == total
    assert elapsed < 30, elapsed


def test_a_publisher_whose_queues_consumer_stopped_acking_is_not_slowed(
    broker: Broker, name: str
) -> None:
    """A consumer that holds its prefetch and acks nothing does not drain its queue: a hold
    of its publisher would only slow it (a paced turn per ``HOLD_MAX``), so after one
    ``HOLD_MAX`` that queue holds no publisher until it is drained below the hold
    (``Shell._stalled``), and the publishes go in at the publisher's pace, as into a queue
    without consumers."""
    total = 20_000
    params = pika.URLParameters(broker.url)
    consumer = pika.BlockingConnection(params)
    cch = consumer.channel()
    cch.queue_declare(name)
    cch.basic_qos(prefetch_count=10)
    cch.basic_consume(name, lambda *_: None)  # takes ten, acks none
    publisher = pika.BlockingConnection(params)
    pch = publisher.channel()
    started = time.monotonic()
    try:
        for _ in range(total):
            pch.basic_publish("", name, b"x" * 16)
        depth = 0
        while time.monotonic() - started < 30:
            depth = pch.queue_declare(name, passive=True).method.message_count
            if depth >= total - 10:
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - started
    finally:
        pch.queue_delete(name)
        publisher.close()
        consumer.close()
    # Held past backlog_hold (4096) at ten messages per 50 ms, the rest would take ~80 s.
    assert depth == total - 10, depth
    assert elapsed < 30, elapsed


def test_a_held_publisher_shows_as_flow_to_operators(name: str) -> None:
    """While its queue is far behind, the publisher's connection is in RabbitMQ's "flow"
    state for the management API and ``leveret ctl list_connections``; the consumer's and
    a third connection's stay "running"."""
    data = new_data_dir()
    mgmt = start_mgmt_broker("--data-dir", str(data))
    url = mgmt.broker.url
    params = pika.URLParameters(url)
    monitor = pika.BlockingConnection(params)
    monitor.channel().queue_declare(name)
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    acked = spawn.Value("i", 0)
    consumer = spawn.Process(target=_consume_slowly, args=(url, name, stop, acked))
    flooder = spawn.Process(target=_flood, args=(url, name, stop))
    api_states: list[str] = []
    ctl_states: list[str] = []
    try:
        consumer.start()
        flooder.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "flow" not in api_states:
            rows = requests.get(mgmt.api("connections"), auth=AUTH, timeout=5).json()
            api_states = sorted(row["state"] for row in rows)
            time.sleep(0.1)
        listed = ok(data, "list_connections", "--formatter", "json", "state")
        ctl_states = sorted(row["state"] for row in json.loads(listed))
    finally:
        stop.set()
        monitor.channel().queue_delete(name)  # frees the held flooder (``_backlog_depths``)
        flooder.join(timeout=30)
        if flooder.exitcode is None:
            flooder.kill()
        consumer.join(timeout=10)
        if consumer.exitcode is None:
            consumer.kill()
        monitor.close()
        mgmt.broker.stop()
    # Only the flooder publishes: the consumer's and the monitor's connections are never held.
    assert api_states == ["flow", "running", "running"], api_states
    # Read within FLOW_SHOWN (5 s) of the hold, whether or not it has ended by then.
    assert ctl_states == ["flow", "running", "running"], ctl_states
