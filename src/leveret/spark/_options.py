"""Option parsing for the ``amqp`` data source (names are case-insensitive, as in Spark).

Only plain values cross into Spark's pickled partitions and readers: :class:`Options` is a
frozen dataclass of str/int/bool/float fields, built once on the driver.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from leveret.spark._client import ConnectionParams

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Options", "parse_offsets_spec"]

_TRUE = frozenset(("true", "1", "yes", "on"))
_FALSE = frozenset(("false", "0", "no", "off"))

EARLIEST = -2
LATEST = -1

PROTOCOLS = ("auto", "stream", "amqp")
STREAM_SCHEMES = {"rabbitmq-stream": False, "rabbitmq-stream+tls": True}
# The stream protocol's conventional ports, beside AMQP's 5672 / 5671.
STREAM_PORT, STREAM_TLS_PORT = 5552, 5551
AMQP_PORTS = (5672, 5671)


def _bool(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"option {name}: expected true or false, got {value!r}")


def _int(value: str, name: str, minimum: int | None = None) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ValueError(f"option {name}: expected an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ValueError(f"option {name}: must be at least {minimum}, got {number}")
    return number


def parse_offsets_spec(value: str, queues: tuple[str, ...], name: str) -> dict[str, int]:
    """``earliest`` / ``latest`` / JSON ``{"queue": n}`` → ``{queue: n}`` (-2 earliest, -1 latest).

    Queues missing from a JSON object default to ``earliest`` for ``startingOffsets`` and to
    ``latest`` for ``endingOffsets`` (the caller passes which via the name).
    """
    v = value.strip()
    if v.lower() == "earliest":
        return dict.fromkeys(queues, EARLIEST)
    if v.lower() == "latest":
        return dict.fromkeys(queues, LATEST)
    try:
        spec = json.loads(v)
    except json.JSONDecodeError:
        raise ValueError(
            f"option {name}: expected earliest, latest or a JSON object, got {value!r}"
        ) from None
    if not isinstance(spec, dict) or not all(
        isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool) and n >= -2
        for k, n in spec.items()
    ):
        raise ValueError(f"option {name}: JSON must map queue names to offsets >= -2: {value!r}")
    unknown = set(spec) - set(queues)
    if unknown:
        raise ValueError(f"option {name}: queues {sorted(unknown)} are not being read")
    default = EARLIEST if name.lower().startswith("starting") else LATEST
    return {q: int(spec.get(q, default)) for q in queues}


@dataclass(frozen=True)
class Options:
    """Every option of the source and the sink, parsed and validated."""

    params: ConnectionParams
    # RabbitMQ's stream protocol: where it is (the same host and credentials, its own port),
    # whether to use it ("auto" until the driver decides: ``_protocol.resolve``), and
    # whether the port was given (``streamPort`` or a rabbitmq-stream:// uri).
    stream_params: ConnectionParams
    protocol: str
    stream_port_given: bool
    queues: tuple[str, ...]
    queue_mode: str  # "stream" or "consume"
    starting_offsets: str | None
    starting_timestamp: int | None  # ms since the epoch
    ending_offsets: str | None
    max_offsets_per_trigger: int | None
    min_partitions: int
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    include_headers: bool
    prefetch: int
    poll_timeout: float  # seconds
    read_timeout: float  # seconds
    tail_probe_window: float  # seconds
    tail_probe_timeout: float  # seconds
    tail_probe_max: float  # seconds
    batch_rows: int
    credit: int  # stream protocol: chunks in flight per reader
    # Classic queues.
    max_messages_per_trigger: int
    max_messages: int | None
    idle_timeout: float  # seconds
    # Sink.
    exchange: str
    routing_key: str | None
    persistent: bool
    mandatory: bool
    max_in_flight: int | None  # None: 1000 over 0-9-1, 20000 over the stream protocol
    confirm_timeout: float  # seconds
    stream: str | None  # the stream the sink publishes to over the stream protocol
    message_id_prefix: str | None
    ignore_unknown_columns: bool

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, need_queue: bool = True) -> Options:
        opts = {str(k).lower(): str(v) for k, v in raw.items()}

        def get(name: str, default: str | None = None) -> str | None:
            return opts.get(name.lower(), default)

        overrides: dict[str, object] = {}
        if get("heartbeat") is not None:
            overrides["heartbeat"] = _int(get("heartbeat") or "0", "heartbeat", 0)
        if get("ssl.verify") is not None:
            overrides["tls_verify"] = _bool(get("ssl.verify") or "true", "ssl.verify")
        if get("ssl.cafile") is not None:
            overrides["tls_ca_file"] = get("ssl.cafile")
        uri = get("uri")
        stream_uri: ConnectionParams | None = None
        if uri is not None and urlsplit(uri).scheme in STREAM_SCHEMES:
            stream_uri = _stream_uri(uri, overrides)
            params = dataclasses.replace(stream_uri, port=5671 if stream_uri.use_tls else 5672)
        elif uri is not None:
            params = ConnectionParams.from_uri(uri, **overrides)
        else:
            use_tls = _bool(get("ssl", "false") or "false", "ssl")
            params = ConnectionParams(
                host=get("host", "127.0.0.1") or "127.0.0.1",
                port=_int(get("port", "5671" if use_tls else "5672") or "5672", "port", 1),
                vhost=get("vhost", "/") or "/",
                username=get("username", "guest") or "guest",
                password=get("password", "guest") or "guest",
                use_tls=use_tls,
                **overrides,  # type: ignore[arg-type]
            )
        protocol = (get("protocol", "auto") or "auto").lower()
        if protocol not in PROTOCOLS:
            raise ValueError(f"option protocol: expected auto, stream or amqp, got {protocol!r}")
        stream_port = get("streamPort")
        if stream_uri is not None:
            if protocol == "amqp":
                raise ValueError("option protocol=amqp does not go with a rabbitmq-stream:// uri")
            protocol = "stream"
            stream_params = stream_uri
        else:
            default = STREAM_TLS_PORT if params.use_tls else STREAM_PORT
            port = _int(stream_port, "streamPort", 1) if stream_port is not None else default
            stream_params = dataclasses.replace(params, port=port)
        # load("events") passes the queue as Spark's "path" option.
        names = get("queues") or get("queue") or get("path") or ""
        queues = tuple(q.strip() for q in names.split(",") if q.strip())
        if need_queue and not queues:
            raise ValueError("option queue (or queues) is required")
        if len(set(queues)) != len(queues):
            raise ValueError(f"option queues lists a queue twice: {names!r}")
        mode = (get("queueMode", "stream") or "stream").lower()
        if mode not in ("stream", "consume"):
            raise ValueError(f"option queueMode: expected stream or consume, got {mode!r}")
        if mode == "consume" and len(queues) > 1:
            raise ValueError("queueMode=consume reads one queue")
        starting_ts = get("startingTimestamp")
        max_per_trigger = get("maxOffsetsPerTrigger") or get("maxRecordsPerTrigger")
        max_per_partition = get("maxRecordsPerPartition")
        max_messages = get("maxMessages")
        routing_key = get("routingKey")
        ms = 1000.0
        max_in_flight = get("maxInFlight")
        return cls(
            params=params,
            stream_params=stream_params,
            protocol=protocol,
            stream_port_given=stream_uri is not None or stream_port is not None,
            queues=queues,
            queue_mode=mode,
            starting_offsets=get("startingOffsets"),
            starting_timestamp=_int(starting_ts, "startingTimestamp", 0)
            if starting_ts is not None
            else None,
            ending_offsets=get("endingOffsets"),
            max_offsets_per_trigger=_int(max_per_trigger, "maxOffsetsPerTrigger", 1)
            if max_per_trigger is not None
            else None,
            min_partitions=_int(get("minPartitions", "1") or "1", "minPartitions", 1),
            max_records_per_partition=_int(max_per_partition, "maxRecordsPerPartition", 1)
            if max_per_partition is not None
            else None,
            fail_on_data_loss=_bool(get("failOnDataLoss", "true") or "true", "failOnDataLoss"),
            include_headers=_bool(get("includeHeaders", "true") or "true", "includeHeaders"),
            prefetch=_int(get("prefetch", "2000") or "2000", "prefetch", 1),
            poll_timeout=_int(get("pollTimeoutMs", "500") or "500", "pollTimeoutMs", 1) / ms,
            read_timeout=_int(get("readTimeoutMs", "30000") or "30000", "readTimeoutMs", 1) / ms,
            tail_probe_window=_int(get("tailProbeWindowMs", "10") or "10", "tailProbeWindowMs", 1)
            / ms,
            tail_probe_timeout=_int(
                get("tailProbeTimeoutMs", "300") or "300", "tailProbeTimeoutMs", 1
            )
            / ms,
            tail_probe_max=_int(get("tailProbeMaxMs", "100") or "100", "tailProbeMaxMs", 1) / ms,
            batch_rows=_int(get("arrowBatchRows", "8192") or "8192", "arrowBatchRows", 1),
            credit=_int(get("streamCredit", "8") or "8", "streamCredit", 1),
            max_messages_per_trigger=_int(
                get("maxMessagesPerTrigger", "10000") or "10000", "maxMessagesPerTrigger", 1
            ),
            max_messages=_int(max_messages, "maxMessages", 0) if max_messages is not None else None,
            idle_timeout=_int(get("idleTimeoutMs", "1000") or "1000", "idleTimeoutMs", 1) / ms,
            exchange=get("exchange", "") or "",
            routing_key=routing_key,
            persistent=_bool(get("persistent", "true") or "true", "persistent"),
            mandatory=_bool(get("mandatory", "false") or "false", "mandatory"),
            max_in_flight=_int(max_in_flight, "maxInFlight", 1)
            if max_in_flight is not None
            else None,
            confirm_timeout=_int(get("confirmTimeoutMs", "60000") or "60000", "confirmTimeoutMs", 1)
            / ms,
            message_id_prefix=get("messageIdPrefix"),
            ignore_unknown_columns=_bool(
                get("ignoreUnknownColumns", "false") or "false", "ignoreUnknownColumns"
            ),
            stream=get("stream"),
        )


def _stream_uri(uri: str, overrides: dict[str, object]) -> ConnectionParams:
    """``rabbitmq-stream[+tls]://user:pass@host:port/vhost`` (vhost percent-encoded)."""
    parts = urlsplit(uri)
    tls = STREAM_SCHEMES[parts.scheme]
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    values: dict[str, object] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or (STREAM_TLS_PORT if tls else STREAM_PORT),
        "vhost": unquote(path) if path else "/",
        "username": unquote(parts.username) if parts.username else "guest",
        "password": unquote(parts.password) if parts.password else "guest",
        "use_tls": tls,
    }
    values.update(overrides)
    return ConnectionParams(**values)  # type: ignore[arg-type]
