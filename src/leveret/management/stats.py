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

import sys
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

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


class Series(Sequence[tuple[int, tuple[int, ...]]]):
    """The samples of one object, oldest first, as (timestamp in ms, values).

    Kept as rows of one ``array`` of machine integers, a ring of at most ``MAX_SAMPLES``
    rows: a sample stores numbers, not two tuples that live for ten minutes, so with
    thousands of channels sampling neither grows the heap by a few MB a minute nor feeds
    the cyclic collector thousands of new objects per pass (issue 26)."""

    __slots__ = ("_last", "_next", "_rows", "_width", "obj")

    def __init__(self, obj: object) -> None:
        self.obj = obj
        self._rows = array("q")
        self._width = 0  # values per row, fixed by the first sample
        self._next = 0  # the oldest row once the ring is full
        self._last: tuple[int, ...] | None = None

    @property
    def samples(self) -> Series:
        return self

    @property
    def last(self) -> tuple[int, ...] | None:
        return self._last

    def append(self, ts: int, values: tuple[int, ...]) -> None:
        rows = self._rows
        width = self._width
        if not width:
            width = self._width = len(values)
        elif len(values) != width:
            raise ValueError(f"a sample of {len(values)} values in a series of {width}")
        self._last = values
        if len(rows) < MAX_SAMPLES * (width + 1):
            rows.append(ts)
            rows.extend(values)
            return
        at = self._next * (width + 1)
        rows[at] = ts
        for i, value in enumerate(values, at + 1):
            rows[i] = value
        self._next = (self._next + 1) % MAX_SAMPLES

    def __len__(self) -> int:
        return len(self._rows) // (self._width + 1) if self._width else 0

    def _row(self, index: int) -> tuple[int, tuple[int, ...]]:
        count = len(self)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("sample index out of range")
        stride = self._width + 1
        at = ((index + self._next) % count) * stride
        rows = self._rows
        return rows[at], tuple(rows[at + 1 : at + stride])

    @overload
    def __getitem__(self, index: int) -> tuple[int, tuple[int, ...]]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, tuple[int, ...]]]: ...

    def __getitem__(
        self, index: int | slice
    ) -> tuple[int, tuple[int, ...]] | list[tuple[int, tuple[int, ...]]]:
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        return self._row(index)

    def __iter__(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        return (self._row(i) for i in range(len(self)))

    def __reversed__(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        return (self._row(i) for i in range(len(self) - 1, -1, -1))


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


def _rate(samples: Sequence[tuple[int, tuple[int, ...]]], index: int) -> float:
    if len(samples) < 2:
        return 0.0
    (t0, v0), (t1, v1) = samples[-2], samples[-1]
    if t1 <= t0:
        return 0.0
    return round((v1[index] - v0[index]) * 1000 / (t1 - t0), 1)


def details(
    samples: Sequence[tuple[int, tuple[int, ...]]] | None,
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
    samples: Sequence[tuple[int, tuple[int, ...]]] | None,
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
        summed: list[tuple[int, tuple[int, ...]]] | None = None
        if samples:
            summed = [(ts, (sum(v[i] for i in indexes),)) for ts, v in samples]
        out["deliver_get_details"] = details(summed, 0, age, incr)
    return out


# Objects a pass reads per loop turn: about 0.4 ms of the loop's time (4 µs an object), so
# a broker with thousands of connections, channels or queues never holds its clients
# for the milliseconds a whole pass takes (issue 26: 5-8 ms every 5 s with 1000 of each).
SLICE = 100


def _wall_ms() -> int:
    return int(time.time() * 1000)


class SamplePass:
    """One pass over every queue, exchange, connection and channel, taken ``budget``
    objects at a time by :meth:`step`. What the pass reads goes into the sampler as it goes
    (each object's sample with the time it was read, so rates stay exact); the lists of live
    objects and the totals are replaced when it ends, so a reader between two slices sees
    the previous pass's lists, each series at most one sample newer."""

    __slots__ = ("_walk", "done")

    def __init__(self, walk: Iterator[None]) -> None:
        self._walk = walk
        self.done = False

    def step(self, budget: int) -> bool:
        """Read up to ``budget`` objects; True once the pass has ended."""
        if self.done:
            return True
        walk = self._walk
        for _ in range(budget):
            if next(walk, _END) is _END:
                self.done = True
                return True
        return False


_END = object()


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
        """Read every counter once, in one go."""
        self.begin(broker, connections, now_ms).step(sys.maxsize)

    def begin(
        self, broker: Any, connections: Iterable[Any], now_ms: int | None = None
    ) -> SamplePass:
        """A pass to take a slice at a time (the timer does, one slice per loop turn)."""
        clock = _wall_ms if now_ms is None else (lambda: now_ms)
        return SamplePass(self._walk(broker, list(connections), clock))

    def _walk(
        self, broker: Any, connections: list[Any], clock: Callable[[], int]
    ) -> Iterator[None]:
        """The pass: yields after each object it read."""
        queues: dict[tuple[str, str], Series] = {}
        exchanges: dict[tuple[str, str], Series] = {}
        totals_ready = totals_unacked = 0
        lengths: dict[str, tuple[int, int]] = {}
        for vhost in list(broker.vhosts.values()):
            vhost_ready = vhost_unacked = 0
            for queue in list(vhost.queues.values()):
                key = (vhost.name, queue.name)
                series = self.queues.get(key)
                if series is None or series.obj is not queue:
                    series = Series(queue)
                values = queue_values(queue)
                series.append(clock(), values)
                vhost_ready += values[8]
                vhost_unacked += values[9]
                queues[key] = series
                yield
            lengths[vhost.name] = (vhost_ready, vhost_unacked)
            totals_ready += vhost_ready
            totals_unacked += vhost_unacked
            for exchange in list(vhost.exchanges.values()):
                key = (vhost.name, exchange.name)
                series = self.exchanges.get(key)
                if series is None or series.obj is not exchange:
                    series = Series(exchange)
                series.append(clock(), (exchange.n_publish_in, exchange.n_publish_out))
                exchanges[key] = series
                yield
        self.queues, self.exchanges = queues, exchanges
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
            previous.append(clock(), octets)
            conns[id(conn)] = previous
            if vhost_name is not None:
                running = self.vhost_octets.setdefault(vhost_name, [0, 0])
                running[0] += octets[0] - last[0]
                running[1] += octets[1] - last[1]
            yield
            if vhost_name is None:
                continue
            for channel in shell.channels():
                key = channel.key
                series = self.channels.get(id(key))
                if series is None or series.obj is not key:
                    series = Series(key)
                before = series.last or (0,) * len(CHANNEL_COUNTERS)
                values = channel.counters
                series.append(clock(), values)
                channels[id(key)] = series
                assert vhost_name is not None
                running = self.vhost_totals.setdefault(vhost_name, [0] * len(CHANNEL_COUNTERS))
                for i, value in enumerate(values):
                    running[i] += value - before[i]
                yield
        self.channels, self.connections = channels, conns
        self._finish(broker, lengths, totals_ready, totals_unacked, clock())

    def _finish(
        self,
        broker: Any,
        lengths: dict[str, tuple[int, int]],
        totals_ready: int,
        totals_unacked: int,
        ts: int,
    ) -> None:
        """The pass's totals: the queues' lengths, each vhost's sample and the overview's."""
        self.samples_taken += 1
        self.queue_totals.append(ts, (totals_ready, totals_unacked, totals_ready + totals_unacked))
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
            series.append(ts, (*running, *vhost_octets, ready, unacked, ready + unacked))
            for i, value in enumerate(running):
                overall[i] += value
        self.overview.append(ts, tuple(overall))

    def queue_series(self, vhost: str, queue: object, name: str) -> Series | None:
        series = self.queues.get((vhost, name))
        return series if series is not None and series.obj is queue else None

    def exchange_series(self, vhost: str, exchange: object, name: str) -> Series | None:
        series = self.exchanges.get((vhost, name))
        return series if series is not None and series.obj is exchange else None
