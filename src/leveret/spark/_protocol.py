"""Which protocol a read or a write uses: RabbitMQ's stream protocol, or AMQP 0-9-1.

Decided once, on the driver, when Spark asks the data source for a reader or a writer; the
choice travels to the executors inside the pickled :class:`~leveret.spark._options.Options`
(``protocol`` is then ``"stream"`` or ``"amqp"``), so every task of a query speaks the same.

``protocol=auto`` (the default) takes the stream protocol when all of these hold, else 0-9-1:

- the stream port is known: given (``streamPort``, or a ``rabbitmq-stream://`` uri), or the
  AMQP port is the standard 5672 / 5671, beside which brokers serve it on 5552 / 5551 (a
  broker on another AMQP port may share the machine with one whose stream port is 5552: it is
  not guessed);
- a stream-protocol handshake there succeeds with the same credentials and vhost;
- reading: every queue read is a stream there (metadata); writing: the target is a stream
  (option ``stream``, or the ``routingKey`` of a write to the default exchange with neither
  an ``exchange`` nor a ``routing_key`` column: the default exchange routes by queue name,
  which the stream protocol does without an exchange).

``protocol=stream`` requires it (and fails with the reason); ``protocol=amqp`` never tries.
No pyspark import here.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from leveret.protocol.rabbitstream.constants import Code
from leveret.spark._options import AMQP_PORTS
from leveret.spark._stream_client import StreamClient, StreamClientError

if TYPE_CHECKING:
    from leveret.spark._options import Options

__all__ = ["resolve_read", "resolve_write", "sink_stream"]

log = logging.getLogger("leveret.spark")

_PROBE_TIMEOUT = 3.0


def _stream_port_known(o: Options) -> bool:
    return o.stream_port_given or o.params.port in AMQP_PORTS


def _why_not(o: Options, streams: tuple[str, ...]) -> str | None:
    """None when the stream protocol serves every one of ``streams``; else the reason."""
    if not _stream_port_known(o):
        return (
            f"the stream port is not known (AMQP port {o.params.port} is not a standard one;"
            " set streamPort)"
        )
    p = o.stream_params
    params = dataclasses.replace(p, connect_timeout=min(p.connect_timeout, _PROBE_TIMEOUT))
    try:
        with StreamClient(params, timeout=_PROBE_TIMEOUT).connect() as client:
            codes = client.metadata(list(streams))
    except (StreamClientError, OSError, TimeoutError) as exc:
        return f"no stream protocol on {p.host}:{p.port}: {exc}"
    missing = [s for s in streams if codes.get(s) != Code.OK]
    if missing:
        return f"not streams on {p.host}:{p.port}: {', '.join(sorted(missing))}"
    return None


def _decide(o: Options, streams: tuple[str, ...], what: str) -> Options:
    if o.protocol == "amqp":
        return o
    if not streams:
        if o.protocol == "stream":
            raise ValueError(f"protocol=stream: {what} has no stream to use it on")
        return dataclasses.replace(o, protocol="amqp")
    reason = _why_not(o, streams)
    if reason is None:
        log.info("%s of %s over the stream protocol", what, ", ".join(streams))
        return dataclasses.replace(o, protocol="stream")
    if o.protocol == "stream":
        raise ValueError(f"protocol=stream: {reason}")
    log.info("%s of %s over AMQP 0-9-1: %s", what, ", ".join(streams), reason)
    return dataclasses.replace(o, protocol="amqp")


def resolve_read(o: Options) -> Options:
    """``o`` with ``protocol`` decided for reading ``o.queues`` (stream queues only)."""
    if o.queue_mode != "stream":
        return dataclasses.replace(o, protocol="amqp")
    return _decide(o, o.queues, "read")


def sink_stream(o: Options, column_names: list[str]) -> str | None:
    """The stream a write can publish to over the stream protocol, if it has one."""
    if o.stream:
        return o.stream
    if o.exchange or "exchange" in column_names or "routing_key" in column_names:
        return None
    return o.routing_key or None


def resolve_write(o: Options, column_names: list[str]) -> Options:
    """``o`` with ``protocol`` decided for a write of these columns (``stream`` set to the
    target when it is the stream protocol)."""
    target = sink_stream(o, column_names)
    if o.stream and o.protocol == "amqp":
        raise ValueError("option stream publishes over the stream protocol: not with protocol=amqp")
    decided = _decide(o, (target,) if target else (), "write")
    if decided.protocol == "stream":
        return dataclasses.replace(decided, stream=target)
    if o.stream:
        raise ValueError(f"option stream={o.stream!r}: the stream protocol is not available")
    return decided
