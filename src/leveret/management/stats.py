"""Message and byte counts and rates: the sampler behind ``message_stats`` and the
``*_details`` objects of the HTTP API.

The hot path only increments plain integer attributes on objects that exist anyway
(``Queue.n_*``, ``Exchange.n_publish_*``, ``Publisher.n_*``, the 0-9-1 ``Session.n_*``, a
connection's socket counters), read through each connection's introspection record
(``server/shell/info.py``: ``ConnectionInfo``, ``ChannelInfo.counters``). Every
``collect_statistics_interval`` this module reads them all once, keeps the last samples of
each object (enough for the largest ``msg_rates_age`` asked, bounded), and adds what every
channel did since the previous sample to its vhost's running totals, so vhost and overview
counts survive the channels that made them (what a channel did after the last sample
before it closed is lost, at most one interval of it). Rates are computed from the two
newest samples, as RabbitMQ's basic rates mode does.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret.server.shell.info import CHANNEL_COUNTERS as CHANNEL_COUNTERS

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

# What is counted for each kind of object, in the order of the sampled tuples.
QUEUE_COUNTERS = (
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "ack",
    "redeliver",
    "get_empty",
)
QUEUE_GAUGES = ("messages_ready", "messages_unacknowledged", "messages")
EXCHANGE_COUNTERS = ("publish_in", "publish_out")
# CHANNEL_COUNTERS (server/shell/info.py): a channel's, in ChannelInfo.counters' order.
CONNECTION_COUNTERS = ("recv_oct", "send_oct")
# Samples kept per object: RabbitMQ's basic retention (10 minutes at 5 s).
MAX_SAMPLES = 120


@dataclass
class Series:
    """The samples of one object: (timestamp in ms, values)."""

    obj: object
    samples: deque[tuple[int, tuple[int, ...]]] = field(
        default_factory=lambda: deque(maxlen=MAX_SAMPLES)
    )

    @property
    def last(self) -> tuple[int, ...] | None:
        return self.samples[-1][1] if self.samples else None


def queue_values(queue: Any) -> tuple[int, ...]:
    ready = queue.message_count
    unacked = queue.unacked_count
    return (
        queue.n_publish,
        queue.n_deliver,
        queue.n_deliver_no_ack,
        queue.n_get,
        queue.n_get_no_ack,
        queue.n_ack,
        queue.n_redeliver,
        queue.n_get_empty,
        ready,
        unacked,
        ready + unacked,
    )


def _rate(samples: deque[tuple[int, tuple[int, ...]]], index: int) -> float:
    if len(samples) < 2:
        return 0.0
    (t0, v0), (t1, v1) = samples[-2], samples[-1]
    if t1 <= t0:
        return 0.0
    return round((v1[index] - v0[index]) * 1000 / (t1 - t0), 1)


def details(
    samples: deque[tuple[int, tuple[int, ...]]] | None,
    index: int,
    age: int | None = None,
    incr: int | None = None,
) -> dict[str, Any]:
    """RabbitMQ's ``<name>_details``: the rate, and with ``msg_rates_age``/``_incr`` the
    samples (newest first), their average and average rate."""
    if not samples:
        out: dict[str, Any] = {"rate": 0.0}
        if age is not None:
            out.update(samples=[], avg_rate=0.0, avg=0.0)
        return out
    out = {"rate": _rate(samples, index)}
    if age is None or incr is None or incr <= 0:
        return out
    newest = samples[-1][0]
    picked: list[tuple[int, int]] = []
    want = newest
    for ts, values in reversed(samples):
        if ts < newest - age * 1000:
            break
        if ts <= want:
            picked.append((ts, values[index]))
            want = ts - incr * 1000
    points = [{"sample": v, "timestamp": ts} for ts, v in picked]
    avg = sum(v for _ts, v in picked) / len(picked) if picked else 0.0
    if len(picked) >= 2 and picked[0][0] != picked[-1][0]:
        avg_rate = (picked[0][1] - picked[-1][1]) * 1000 / (picked[0][0] - picked[-1][0])
    else:
        avg_rate = 0.0
    out.update(samples=points, avg_rate=round(avg_rate, 1), avg=round(avg, 1))
    return out


def message_stats(
    names: Iterable[str],
    values: tuple[int, ...] | Mapping[str, int] | None,
    samples: deque[tuple[int, tuple[int, ...]]] | None,
    age: int | None = None,
    incr: int | None = None,
) -> dict[str, Any]:
    """``message_stats`` of one object: each count and its ``_details``, plus
    ``deliver_get`` (deliveries of every kind and gets), as RabbitMQ adds it."""
    names = tuple(names)
    if values is None:
        return {}
    if not isinstance(values, tuple):
        values = tuple(values.get(n, 0) for n in names)
    out: dict[str, Any] = {}
    for i, name in enumerate(names):
        out[name] = values[i]
        out[name + "_details"] = details(samples, i, age, incr)
    parts = ("deliver", "deliver_no_ack", "get", "get_no_ack")
    if "deliver" in out:
        out["deliver_get"] = sum(out.get(n, 0) for n in parts)
        indexes = [names.index(n) for n in parts if n in names]
        summed: deque[tuple[int, tuple[int, ...]]] | None = None
        if samples:
            summed = deque((ts, (sum(v[i] for i in indexes),)) for ts, v in samples)
        out["deliver_get_details"] = details(summed, 0, age, incr)
    return out


class Sampler:
    """Samples every queue, exchange, channel and connection of the server on a timer."""

    def __init__(self) -> None:
        self.queues: dict[tuple[str, str], Series] = {}
        self.exchanges: dict[tuple[str, str], Series] = {}
        self.channels: dict[int, Series] = {}
        self.connections: dict[int, Series] = {}
        # Running totals by vhost (channel counters) and their samples.
        self.vhost_totals: dict[str, list[int]] = {}
        self.vhost_series: dict[str, Series] = {}
        # Connection octets by vhost (running totals) and the overview's samples.
        self.vhost_octets: dict[str, list[int]] = {}
        self.overview: Series = Series(None)
        self.queue_totals: Series = Series(None)
        self.samples_taken = 0

    def sample(self, broker: Any, connections: Iterable[Any], now_ms: int | None = None) -> None:
        """Read every counter once (the timer calls this)."""
        ts = int(time.time() * 1000) if now_ms is None else now_ms
        self.samples_taken += 1
        queues: dict[tuple[str, str], Series] = {}
        exchanges: dict[tuple[str, str], Series] = {}
        totals_ready = totals_unacked = 0
        lengths: dict[str, tuple[int, int]] = {}
        for vhost in broker.vhosts.values():
            vhost_ready = vhost_unacked = 0
            for queue in vhost.queues.values():
                key = (vhost.name, queue.name)
                series = self.queues.get(key)
                if series is None or series.obj is not queue:
                    series = Series(queue)
                values = queue_values(queue)
                series.samples.append((ts, values))
                vhost_ready += values[8]
                vhost_unacked += values[9]
                queues[key] = series
            lengths[vhost.name] = (vhost_ready, vhost_unacked)
            totals_ready += vhost_ready
            totals_unacked += vhost_unacked
            for exchange in vhost.exchanges.values():
                key = (vhost.name, exchange.name)
                series = self.exchanges.get(key)
                if series is None or series.obj is not exchange:
                    series = Series(exchange)
                series.samples.append((ts, (exchange.n_publish_in, exchange.n_publish_out)))
                exchanges[key] = series
        self.queues, self.exchanges = queues, exchanges
        self.queue_totals.samples.append(
            (ts, (totals_ready, totals_unacked, totals_ready + totals_unacked))
        )
        channels: dict[int, Series] = {}
        conns: dict[int, Series] = {}
        last: tuple[int, ...]
        for conn in connections:
            shell = conn.shell
            if shell is None:
                continue
            info = shell.info
            vhost_name = info.vhost if shell.opened else None
            previous = self.connections.get(id(conn))
            if previous is None or previous.obj is not conn:
                previous = Series(conn)
            last = previous.last or (0, 0)
            octets = (info.recv_oct, info.send_oct)
            previous.samples.append((ts, octets))
            conns[id(conn)] = previous
            if vhost_name is not None:
                running = self.vhost_octets.setdefault(vhost_name, [0, 0])
                running[0] += octets[0] - last[0]
                running[1] += octets[1] - last[1]
            if vhost_name is None:
                continue
            for channel in shell.channels():
                key = channel.key
                series = self.channels.get(id(key))
                if series is None or series.obj is not key:
                    series = Series(key)
                before = series.last or (0,) * len(CHANNEL_COUNTERS)
                values = channel.counters
                series.samples.append((ts, values))
                channels[id(key)] = series
                assert vhost_name is not None
                running = self.vhost_totals.setdefault(vhost_name, [0] * len(CHANNEL_COUNTERS))
                for i, value in enumerate(values):
                    running[i] += value - before[i]
        self.channels, self.connections = channels, conns
        overall = [0] * len(CHANNEL_COUNTERS)
        for name in [n for n in self.vhost_totals if n not in broker.vhosts]:
            del self.vhost_totals[name]
        for name in [n for n in self.vhost_series if n not in broker.vhosts]:
            del self.vhost_series[name]
        for name in [n for n in self.vhost_octets if n not in broker.vhosts]:
            del self.vhost_octets[name]
        empty = [0] * len(CHANNEL_COUNTERS)
        for name, (ready, unacked) in lengths.items():
            # A vhost's sample: its channel counters, its octets, its queue lengths.
            running = self.vhost_totals.get(name, empty)
            series = self.vhost_series.setdefault(name, Series(None))
            vhost_octets = self.vhost_octets.get(name, [0, 0])
            series.samples.append((ts, (*running, *vhost_octets, ready, unacked, ready + unacked)))
            for i, value in enumerate(running):
                overall[i] += value
        self.overview.samples.append((ts, tuple(overall)))

    def queue_series(self, vhost: str, queue: object, name: str) -> Series | None:
        series = self.queues.get((vhost, name))
        return series if series is not None and series.obj is queue else None

    def exchange_series(self, vhost: str, exchange: object, name: str) -> Series | None:
        series = self.exchanges.get((vhost, name))
        return series if series is not None and series.obj is exchange else None
