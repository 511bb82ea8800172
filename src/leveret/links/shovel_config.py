"""The ``shovel`` runtime parameter: RabbitMQ 3.10's keys, checked and read as its
``rabbit_shovel_parameters`` checks and reads them.

``validate`` refuses what RabbitMQ refuses, with its texts; ``parse`` turns an accepted value
into a :class:`ShovelSpec`: the two ends (protocol, URIs, queue or exchange or 1.0 address,
what is declared), the ack mode, ``delete-after``, the reconnect delay, and what the
destination adds to each message (forward headers, a timestamp, fixed properties). The keys
(defaults in brackets):

================================  =========================================================
``src-protocol`` / ``dest-...``   ``amqp091`` | ``amqp10`` [amqp091]
``src-uri`` / ``dest-uri``        one URI or a list (one is picked at random per connect)
``src-queue``                     consumed; declared durable if missing (``src-queue-args``)
``src-exchange`` (+``-key``)      an exclusive server-named queue bound with the key [""]
``src-address`` (1.0)             the 1.0 source address
``src-prefetch-count``            basic.qos / link credit [1000] (legacy ``prefetch-count``)
``src-delete-after``              ``never`` | ``queue-length`` | a count [never]; the shovel
                                  deletes its own parameter when done (legacy
                                  ``delete-after``)
``src-consumer-args``             basic.consume arguments (0-9-1)
``dest-queue``                    published to through the default exchange; declared
``dest-exchange`` (+``-key``)     published to, with the key or the message's own
``dest-address`` (1.0)            the 1.0 target address
``dest-add-forward-headers``      0-9-1: an ``x-shovelled`` header table; 1.0:
                                  application properties [false]
``dest-add-timestamp-header``     0-9-1: ``x-shovelled-timestamp`` (s); 1.0: creation-time
``dest-publish-properties``       0-9-1 properties set on every message
``dest-properties``,              1.0 properties / application properties / message
``dest-application-properties``,  annotations set on every message
``dest-message-annotations``
``ack-mode``                      ``on-confirm`` | ``on-publish`` | ``no-ack`` [on-confirm]
``reconnect-delay``               seconds before a failed shovel starts again; 0: never [5]
================================  =========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from leveret.links.uri import Endpoint, UriError, parse_amqp091, parse_amqp10
from leveret.links.validation import (
    Check,
    ValidationError,
    binary,
    boolean,
    enum,
    erl,
    number,
    proplist,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_PREFETCH",
    "DEFAULT_RECONNECT_DELAY",
    "DestSpec",
    "ShovelSpec",
    "SourceSpec",
    "parse",
    "validate",
]

DEFAULT_PREFETCH = 1000
DEFAULT_RECONNECT_DELAY = 5
COMPONENT = "shovel"

AckMode = Literal["on-confirm", "on-publish", "no-ack"]
# 0-9-1 basic properties dest-publish-properties may set (RabbitMQ's P_basic fields).
PUBLISH_PROPERTIES: dict[str, Check] = {
    "content_type": binary,
    "content_encoding": binary,
    "delivery_mode": number,
    "priority": number,
    "correlation_id": binary,
    "reply_to": binary,
    "expiration": binary,
    "message_id": binary,
    "timestamp": number,
    "type": binary,
    "user_id": binary,
    "app_id": binary,
    "cluster_id": binary,
}


@dataclass(frozen=True)
class SourceSpec:
    protocol: str
    uris: tuple[str, ...]
    queue: str | None = None
    exchange: str | None = None
    exchange_key: str = ""
    address: str | None = None
    prefetch: int = DEFAULT_PREFETCH
    delete_after: str | int = "never"
    queue_args: dict[str, Any] = field(default_factory=dict)
    consumer_args: dict[str, Any] = field(default_factory=dict)

    def endpoint(self, uri: str) -> Endpoint:
        return parse_amqp10(uri) if self.protocol == "amqp10" else parse_amqp091(uri)

    def details(self) -> dict[str, str]:
        """What ``/api/shovels`` shows of this end (RabbitMQ's ``source_endpoint``)."""
        if self.protocol == "amqp10":
            return {"src_address": self.address or ""}
        if self.queue is not None:
            return {"src_queue": self.queue}
        return {"src_exchange": self.exchange or "", "src_exchange_key": self.exchange_key}

    def headers(self) -> list[tuple[str, str]]:
        """What RabbitMQ's forward headers and 1.0 application properties say of the
        source (``SourceHeaders``)."""
        if self.protocol == "amqp10":
            return []
        if self.queue is not None:
            return [("src-queue", self.queue)]
        return [("src-exchange", self.exchange or ""), ("src-exchange-key", self.exchange_key)]


@dataclass(frozen=True)
class DestSpec:
    protocol: str
    uris: tuple[str, ...]
    queue: str | None = None
    exchange: str | None = None
    exchange_key: str | None = None
    address: str | None = None
    add_forward_headers: bool = False
    add_timestamp_header: bool = False
    publish_properties: dict[str, Any] = field(default_factory=dict)
    queue_args: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    application_properties: dict[str, Any] = field(default_factory=dict)
    message_annotations: dict[str, Any] = field(default_factory=dict)

    def endpoint(self, uri: str) -> Endpoint:
        return parse_amqp10(uri) if self.protocol == "amqp10" else parse_amqp091(uri)

    def details(self) -> dict[str, str]:
        if self.protocol == "amqp10":
            return {"dest_address": self.address or ""}
        out: dict[str, str] = {}
        if self.exchange is not None:
            out["dest_exchange"] = self.exchange
        if self.exchange_key is not None:
            out["dest_exchange_key"] = self.exchange_key
        if self.queue is not None:
            out["dest_queue"] = self.queue
        return out

    def headers(self) -> list[tuple[str, str]]:
        """The destination's part of the forward headers (RabbitMQ's ``Table2``)."""
        out: list[tuple[str, str]] = []
        if self.exchange is not None:
            out.append(("dest-exchange", self.exchange))
        if self.exchange_key is not None:
            out.append(("dest-exchange-key", self.exchange_key))
        if self.queue is not None:
            out.append(("dest-queue", self.queue))
        return out


@dataclass(frozen=True)
class ShovelSpec:
    vhost: str
    name: str
    source: SourceSpec
    dest: DestSpec
    ack_mode: AckMode = "on-confirm"
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY

    @property
    def key(self) -> tuple[str, str]:
        return (self.vhost, self.name)


def _protocols(value: Mapping[str, Any]) -> tuple[str, str]:
    src = value.get("src-protocol", "amqp091")
    dest = value.get("dest-protocol", "amqp091")
    return (
        src if src in ("amqp091", "amqp10") else "amqp091",
        dest if dest in ("amqp091", "amqp10") else "amqp091",
    )


def _uri_check(protocol: str) -> Check:
    parser = parse_amqp10 if protocol == "amqp10" else parse_amqp091

    def check(name: str, value: object) -> str | None:
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value:
            return f"{name} should be a list of URIs, actually was []"
        for uri in values:
            if not isinstance(uri, str):
                return f"{name} should be binary, actually was {erl(uri)}"
            try:
                parser(uri)
            except UriError as exc:
                return str(exc)
        return None

    return check


def _delete_after(name: str, value: object) -> str | None:
    if value in ("never", "queue-length"):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return None
    return (
        f'{name} should be a number greater than or equal to 0, "never" or "queue-length",'
        f" actually was {erl(value)}"
    )


def _table(name: str, value: object) -> str | None:
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return None
    return f"{name} not a list {erl(value)}"


def _string_map(name: str, value: object) -> str | None:
    if not isinstance(value, dict):
        return f"{name} not a list {erl(value)}"
    for key, item in value.items():
        error = binary(key, item)
        if error is not None:
            return error
    return None


def _publish_properties(name: str, value: object) -> str | None:
    if not isinstance(value, dict):
        return f"{name} not a list {erl(value)}"
    errors = proplist(name, [(k, c, False) for k, c in PUBLISH_PROPERTIES.items()], value)
    return errors[0] if errors else None


def _queue_name(name: str, value: object) -> str | None:
    if not isinstance(value, str):
        return f"{name} should be binary, actually was {erl(value)}"
    if len(value.encode()) > 255:
        return f"{name} should be less than 255 bytes, actually was {len(value.encode())}"
    return None


def validate(value: object, name: str = COMPONENT) -> None:
    """Raise :class:`ValidationError` with RabbitMQ's texts if RabbitMQ would refuse
    ``value`` as a shovel definition (``name``: the parameter's, as the texts say it)."""
    if not isinstance(value, dict):
        raise ValidationError([f"{name} not a list {erl(value)}"])
    errors: list[str] = []
    src_protocol, dest_protocol = _protocols(value)
    if src_protocol == "amqp091":
        has_x, has_q = "src-exchange" in value, "src-queue" in value
        if not has_x and not has_q:
            errors.append("Must specify 'src-exchange' or 'src-queue'")
        elif has_x and has_q:
            errors.append("Cannot specify 'src-exchange' and 'src-queue'")
        delete_after = value.get("src-delete-after", value.get("delete-after"))
        if (
            isinstance(delete_after, int)
            and not isinstance(delete_after, bool)
            and value.get("ack-mode") == "no-ack"
        ):
            errors.append("Cannot specify 'no-ack' and numerical 'delete-after'")
    if dest_protocol == "amqp091" and "dest-exchange" in value and "dest-queue" in value:
        errors.append("Cannot specify 'dest-exchange' and 'dest-queue'")
    constraints: list[tuple[str, Check, bool]] = [
        ("reconnect-delay", number, False),
        ("ack-mode", enum("no-ack", "on-publish", "on-confirm"), False),
        ("src-protocol", enum("amqp10", "amqp091"), False),
        ("dest-protocol", enum("amqp10", "amqp091"), False),
    ]
    if src_protocol == "amqp10":
        constraints += [
            ("src-uri", _uri_check("amqp10"), True),
            ("src-address", binary, True),
            ("src-prefetch-count", number, False),
            ("src-delete-after", _delete_after, False),
        ]
    else:
        constraints += [
            ("src-uri", _uri_check("amqp091"), True),
            ("src-exchange", binary, False),
            ("src-exchange-key", binary, False),
            ("src-queue", binary, False),
            ("src-queue-args", _table, False),
            ("src-consumer-args", _table, False),
            ("prefetch-count", number, False),
            ("src-prefetch-count", number, False),
            ("delete-after", _delete_after, False),
            ("src-delete-after", _delete_after, False),
        ]
    if dest_protocol == "amqp10":
        constraints += [
            ("dest-uri", _uri_check("amqp10"), True),
            ("dest-address", binary, True),
            ("dest-add-forward-headers", boolean, False),
            ("dest-add-timestamp-header", boolean, False),
            ("dest-application-properties", _string_map, False),
            ("dest-message-annotations", _string_map, False),
            ("dest-properties", _string_map, False),
        ]
    else:
        constraints += [
            ("dest-uri", _uri_check("amqp091"), True),
            ("dest-exchange", binary, False),
            ("dest-exchange-key", binary, False),
            ("dest-queue", _queue_name, False),
            ("dest-queue-args", _table, False),
            ("add-forward-headers", boolean, False),
            ("add-timestamp-header", boolean, False),
            ("dest-add-forward-headers", boolean, False),
            ("dest-add-timestamp-header", boolean, False),
            ("publish-properties", _publish_properties, False),
            ("dest-publish-properties", _publish_properties, False),
        ]
    errors += proplist(name, constraints, value)
    if errors:
        raise ValidationError(errors)


def _uris(value: object) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, list) else (str(value),)


def parse(vhost: str, name: str, value: Mapping[str, Any]) -> ShovelSpec:
    """A validated definition (:func:`validate`) as a :class:`ShovelSpec`."""
    src_protocol, dest_protocol = _protocols(value)
    delete_after = value.get("src-delete-after", value.get("delete-after", "never"))
    prefetch = value.get("src-prefetch-count", value.get("prefetch-count", DEFAULT_PREFETCH))
    if src_protocol == "amqp10":
        source = SourceSpec(
            "amqp10",
            _uris(value["src-uri"]),
            address=str(value["src-address"]),
            prefetch=int(prefetch),
            delete_after=delete_after,
        )
    else:
        source = SourceSpec(
            "amqp091",
            _uris(value["src-uri"]),
            queue=value.get("src-queue"),
            exchange=value.get("src-exchange"),
            exchange_key=value.get("src-exchange-key", ""),
            prefetch=int(prefetch),
            delete_after=delete_after,
            queue_args=dict(value.get("src-queue-args") or {}),
            consumer_args=dict(value.get("src-consumer-args") or {}),
        )
    if dest_protocol == "amqp10":
        dest = DestSpec(
            "amqp10",
            _uris(value["dest-uri"]),
            address=str(value["dest-address"]),
            add_forward_headers=bool(value.get("dest-add-forward-headers", False)),
            add_timestamp_header=bool(value.get("dest-add-timestamp-header", False)),
            properties=dict(value.get("dest-properties") or {}),
            application_properties=dict(value.get("dest-application-properties") or {}),
            message_annotations=dict(value.get("dest-message-annotations") or {}),
        )
    else:
        dest = DestSpec(
            "amqp091",
            _uris(value["dest-uri"]),
            queue=value.get("dest-queue"),
            exchange=value.get("dest-exchange"),
            exchange_key=value.get("dest-exchange-key"),
            add_forward_headers=bool(
                value.get("dest-add-forward-headers", value.get("add-forward-headers", False))
            ),
            add_timestamp_header=bool(
                value.get("dest-add-timestamp-header", value.get("add-timestamp-header", False))
            ),
            publish_properties=dict(
                value.get("dest-publish-properties") or value.get("publish-properties") or {}
            ),
            queue_args=dict(value.get("dest-queue-args") or {}),
        )
    return ShovelSpec(
        vhost,
        name,
        source,
        dest,
        ack_mode=value.get("ack-mode", "on-confirm"),
        reconnect_delay=float(value.get("reconnect-delay", DEFAULT_RECONNECT_DELAY)),
    )
