"""The sampler (management/stats.py) and the list queries (management/query.py) without
sockets: counters read on a timer, rates and samples, running vhost totals that outlive
channels, and RabbitMQ's paging, sorting, filtering and columns."""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest

from leveret.config import Settings
from leveret.management import query
from leveret.management.app import ManagementServer
from leveret.management.stats import (
    CHANNEL_COUNTERS,
    MAX_SAMPLES,
    SLICE,
    Sampler,
    Series,
    details,
    message_stats,
)
from leveret.model.broker import Broker
from leveret.protocol.amqp091._generated import methods as m
from leveret.testing import CodecClient


def test_rate_and_samples_newest_first() -> None:
    samples: deque[tuple[int, tuple[int, ...]]] = deque(
        [(0, (0,)), (5000, (50,)), (10000, (150,)), (15000, (150,))]
    )
    assert details(samples, 0) == {"rate": 0.0}
    samples.pop()
    assert details(samples, 0) == {"rate": 20.0}
    out = details(samples, 0, age=60, incr=5)
    assert [p["sample"] for p in out["samples"]] == [150, 50, 0]
    assert out["avg_rate"] == 15.0
    assert out["avg"] == pytest.approx(66.7)
    # msg_rates_incr picks one sample per increment.
    assert [p["timestamp"] for p in details(samples, 0, age=60, incr=10)["samples"]] == [10000, 0]
    assert details(None, 0, age=60, incr=5) == {
        "rate": 0.0,
        "samples": [],
        "avg_rate": 0.0,
        "avg": 0.0,
    }


def test_message_stats_adds_deliver_get() -> None:
    stats = message_stats(("deliver", "deliver_no_ack", "get", "get_no_ack"), (1, 2, 3, 4), None)
    assert stats["deliver_get"] == 10
    assert stats["deliver_details"] == {"rate": 0.0}


def test_sampler_reads_the_core_counters_and_keeps_vhost_totals() -> None:
    broker = Broker()
    vhost = broker.vhosts["/"]
    vhost.declare_queue("s-q", owner=None)
    client = CodecClient.connect(broker)
    client.handshake()
    client.open_channel(1)
    conn = SimpleNamespace(shell=client.shell)
    sampler = Sampler()
    sampler.sample(broker, [conn], now_ms=0)
    client.send(1, m.ConfirmSelect())
    client.expect(1, m.ConfirmSelectOk)
    for _ in range(10):
        client.publish(1, "", "s-q", b"x")
    client.frames()  # the confirms
    client.send(1, m.BasicGet(queue="s-q"))
    got = client.expect_content(1, m.BasicGetOk)
    assert isinstance(got.method, m.BasicGetOk)
    client.send(1, m.BasicAck(delivery_tag=got.method.delivery_tag))
    client.frames()
    sampler.sample(broker, [conn], now_ms=5000)
    queue = vhost.queues["s-q"]
    series = sampler.queue_series("/", queue, "s-q")
    assert series is not None
    stats = message_stats(("publish",), series.last[:1] if series.last else None, series.samples)
    assert stats == {"publish": 10, "publish_details": {"rate": 2.0}}
    totals = dict(zip(CHANNEL_COUNTERS, sampler.vhost_totals["/"], strict=True))
    assert (totals["publish"], totals["confirm"], totals["get"], totals["ack"]) == (10, 10, 1, 1)
    info = client.shell.info
    assert info.recv_oct > 0
    assert sampler.vhost_octets["/"] == [info.recv_oct, info.send_oct]
    # The channel closes: the vhost's totals keep what it did; a new one adds to them.
    client.send(1, m.ChannelClose())
    client.expect(1, m.ChannelCloseOk)
    client.open_channel(2)
    client.publish(2, "", "s-q", b"y")
    sampler.sample(broker, [conn], now_ms=10000)
    totals = dict(zip(CHANNEL_COUNTERS, sampler.vhost_totals["/"], strict=True))
    assert totals["publish"] == 11
    assert sampler.queue_totals.samples[-1][1] == (10, 0, 10)
    # A deleted queue's samples go; a queue of the same name starts afresh.
    vhost.delete_queue("s-q", owner=None)
    vhost.declare_queue("s-q", owner=None)
    sampler.sample(broker, [conn], now_ms=15000)
    fresh = sampler.queue_series("/", vhost.queues["s-q"], "s-q")
    assert fresh is not None
    assert len(fresh.samples) == 1


def test_a_series_keeps_the_newest_samples_in_a_ring() -> None:
    assert Series(None).last is None
    series = Series(None)
    assert not series
    total = MAX_SAMPLES + 7
    for i in range(total):
        series.append(1000 * i, (i, 2 * i))
    assert len(series) == MAX_SAMPLES
    oldest = total - MAX_SAMPLES
    assert series[0] == (1000 * oldest, (oldest, 2 * oldest))
    assert series[-1] == (1000 * (total - 1), (total - 1, 2 * (total - 1)))
    assert series.last == (total - 1, 2 * (total - 1))
    assert [ts for ts, _v in series] == [1000 * i for i in range(oldest, total)]
    assert [ts for ts, _v in reversed(series)] == [1000 * i for i in reversed(range(oldest, total))]
    assert series[-3:] == list(series)[-3:]
    with pytest.raises(IndexError):
        series[MAX_SAMPLES]
    with pytest.raises(ValueError, match="3 values in a series of 2"):
        series.append(0, (1, 2, 3))
    # The readers take it as they took the deque: the rate from the two newest samples.
    assert details(series, 0) == {"rate": 1.0}


def _broker_with(queues: int, channels: int) -> tuple[Broker, list[Any]]:
    """A broker with ``queues`` queues and ``channels`` connections of one channel each,
    the connection ``i`` with ``i`` octets read and ``2 i`` written."""
    broker = Broker()
    vhost = broker.vhosts["/"]
    for i in range(queues):
        vhost.declare_queue(f"q{i}", owner=None)
    conns = []
    for i in range(channels):
        client = CodecClient.connect(broker)
        client.handshake()
        client.open_channel(1)
        info = client.shell.info
        info.recv_oct, info.send_oct = i, 2 * i
        conns.append(SimpleNamespace(shell=client.shell))
    return broker, conns


def test_a_pass_is_taken_a_slice_at_a_time_and_ends_as_a_whole_one() -> None:
    broker, conns = _broker_with(queues=150, channels=120)
    whole, sliced = Sampler(), Sampler()
    whole.sample(broker, conns, now_ms=0)
    sliced.sample(broker, conns, now_ms=0)
    for conn in conns:
        conn.shell.info.recv_oct += 500
    whole.sample(broker, conns, now_ms=5000)
    # 150 queues, 7 exchanges (the default ones), 120 connections, 120 channels.
    objects = 150 + len(broker.vhosts["/"].exchanges) + 120 + 120
    step = sliced.begin(broker, conns, now_ms=5000)
    slices = 1
    while not step.step(100):
        # Between two slices the lists are whole: the previous pass's or this one's.
        assert len(sliced.connections) == 120
        assert sliced.samples_taken == 1
        slices += 1
    assert slices == -(-objects // 100)
    assert step.step(100)  # an ended pass stays ended
    assert sliced.samples_taken == whole.samples_taken == 2
    assert sliced.vhost_octets == whole.vhost_octets == {"/": [sum(range(120)) + 60_000, 14280]}
    assert sliced.vhost_totals == whole.vhost_totals
    assert list(sliced.vhost_series["/"]) == list(whole.vhost_series["/"])
    assert list(sliced.overview) == list(whole.overview)
    assert [list(s) for s in sliced.queues.values()] == [list(s) for s in whole.queues.values()]


def test_a_pass_leaves_no_new_objects_for_the_collector() -> None:
    broker, conns = _broker_with(queues=50, channels=300)
    sampler = Sampler()
    sampler.sample(broker, conns, now_ms=0)  # the series are made once, here
    gc.collect()
    gc.disable()
    try:
        # The collector runs when allocations less deallocations of the objects it tracks
        # pass a threshold: that count, not the objects alive, is what a pass feeds it
        # (after one pass: the count stops at 0 when a collection just emptied it).
        sampler.sample(broker, conns, now_ms=5000)
        before = gc.get_count()[0]
        for i in range(2, 5):
            sampler.sample(broker, conns, now_ms=5000 * i)
        grown = gc.get_count()[0] - before
    finally:
        gc.enable()
    # 650 samples a pass, three passes: stored as numbers, not as (ts, values) tuples
    # (which were 2 tracked objects a sample, 3,900 here); what remains is each pass's
    # dictionaries of live objects, which replace the previous ones.
    assert grown < 20, grown


def test_the_timer_takes_a_slice_per_loop_turn() -> None:
    broker, conns = _broker_with(queues=2 * SLICE, channels=SLICE)
    settings = Settings(collect_statistics_interval=60_000)
    admin_host = SimpleNamespace(settings=settings, users=None, broker=broker, connections=conns)
    server = ManagementServer(SimpleNamespace(admin_host=admin_host))
    turns: list[int] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server._tick(loop)
        # A client's work queued meanwhile runs between two slices, not after the pass.
        while server._pass is not None:
            turns.append(server.sampler.samples_taken)
            await asyncio.sleep(0)
        await server.close()

    asyncio.run(run())
    objects = 2 * SLICE + len(broker.vhosts["/"].exchanges) + 2 * SLICE
    assert len(turns) == -(-objects // SLICE) - 1
    assert set(turns) == {0}
    assert server.sampler.samples_taken == 1
    assert len(server.sampler.channels) == SLICE


ITEMS: list[dict[str, Any]] = [
    {"name": "b", "message_stats": {"publish": 5}},
    {"name": "a", "message_stats": {"publish": 9}},
    {"name": "c"},
]


def test_query_sort_filter_columns_and_pages() -> None:
    assert [i["name"] for i in query.apply(ITEMS, {"sort": "name"})] == ["a", "b", "c"]
    by_publish = query.apply(ITEMS, {"sort": "message_stats.publish", "sort_reverse": "true"})
    assert [i["name"] for i in by_publish] == ["a", "b", "c"]
    assert query.apply(ITEMS, {"name": "^[ab]$", "use_regex": "true", "columns": "name"}) == [
        {"name": "b"},
        {"name": "a"},
    ]
    assert query.apply(ITEMS, {"columns": "message_stats.publish"})[0] == {
        "message_stats": {"publish": 5}
    }
    page = query.apply(ITEMS, {"page": "2", "page_size": "2", "sort": "name"})
    assert page == {
        "filtered_count": 3,
        "item_count": 1,
        "items": [{"name": "c"}],
        "page": 2,
        "page_count": 2,
        "page_size": 2,
        "total_count": 3,
    }
    for bad in ({"page": "x"}, {"page": "0"}, {"page": "1", "page_size": "501"}):
        with pytest.raises(query.BadQuery):
            query.apply(ITEMS, bad)
    with pytest.raises(query.BadQuery):
        query.apply(ITEMS, {"name": "(", "use_regex": "true"})


def test_query_renders_only_the_page_when_sorting_by_name() -> None:
    rendered: list[str] = []

    def render(stub: dict[str, Any]) -> dict[str, Any]:
        rendered.append(stub["name"])
        return {"name": stub["name"], "vhost": "/", "messages": len(stub["name"])}

    stubs = [{"name": f"q{i:03}", "vhost": "/"} for i in range(300)]
    page = query.apply(stubs, {"page": "2", "page_size": "10", "name": "q1"}, render)
    assert [i["name"] for i in page["items"]] == [f"q1{i:02}" for i in range(10, 20)]
    assert rendered == [f"q1{i:02}" for i in range(10, 20)]
    assert page["filtered_count"] == 100
    rendered.clear()
    by_size = query.apply(stubs, {"page": "1", "page_size": "1", "sort": "messages"}, render)
    assert len(rendered) == 300  # another sort key: every item is rendered first
    assert by_size["items"][0]["messages"] == 4
