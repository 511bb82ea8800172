"""Queue arguments: their values validated as RabbitMQ 3.10 does on queue.declare, parsed
once into a ``QueueConfig``.

Which arguments a type takes and refuses, and the flags it requires, are the type's own
(``QueueType.parse`` in ``base.py``); this module validates the values every type shares.
It raises ``PreconditionFailed`` (406) with RabbitMQ's reply texts for a wrong type or value.
A queue whose config has no feature set (``QueueConfig.special`` is false) runs the plain
FIFO code and pays nothing for the features.

Type names in the messages are RabbitMQ's (``longstr``, ``signedint``, ``bool``...); the
decoded field table no longer knows the exact integer width, so every integer is reported
as ``signedint``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from leveret.errors import PreconditionFailed
from leveret.model.qpid_args import has_qpid_arguments, qpid_priority_level, qpid_settings

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

OVERFLOWS = ("drop-head", "reject-publish", "reject-publish-dlx")
QUEUE_TYPE_ARG = "x-queue-type"
# x-max-age units (RabbitMQ: Y M D h m s).
_AGE_UNITS = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """The parsed arguments of one queue; times in seconds, None = not set."""

    queue_type: str = "classic"
    message_ttl: float | None = None
    expires: float | None = None
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    max_priority: int | None = None
    single_active_consumer: bool = False
    delivery_limit: int | None = None
    consumer_timeout: float | None = None
    # A replicated queue's least in-sync set (the leader counted) for a confirm: None is a
    # majority of its members (docs/cluster.md, "Lowering the minimum").
    min_in_sync: int | None = None
    # Streams: retention by age (seconds) and the size at which a segment is closed.
    max_age: float | None = None
    segment_bytes: int | None = None
    # Qpid's queue features (model/qpid_args.py): priority levels with Qpid's mapping (then
    # max_priority is levels - 1), fair shares per level, a sequence-number header, the
    # delay before an unused auto-delete queue goes, the last-value key, the group key.
    priority_levels: int | None = None
    fairshare: tuple[int, ...] | None = None
    sequence_key: str | None = None
    auto_delete_timeout: float | None = None
    lvq_key: str | None = None
    group_key: str | None = None

    @property
    def special(self) -> bool:
        """Whether the queue needs the feature paths for enqueue and dispatch."""
        return (
            self.message_ttl is not None
            or self.max_length is not None
            or self.max_length_bytes is not None
            or self.max_priority is not None
            or self.single_active_consumer
            or self.queue_type == "quorum"
            or self.sequence_key is not None
            or self.lvq_key is not None
            or self.group_key is not None
        )

    def priority_level(self, priority: int | None) -> int:
        """The level of a priority queue a message of ``priority`` (None: it has none)
        goes to: RabbitMQ's (capped at ``max_priority``) or, for a queue declared with
        Qpid's arguments, Qpid's mapping onto ``priority_levels``."""
        levels = self.priority_levels
        if levels is not None:
            return qpid_priority_level(priority, levels)
        return min(priority or 0, self.max_priority or 0)


PLAIN = QueueConfig()


def type_name(value: object) -> str:
    """RabbitMQ's name of a field-table value's type."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    if value is None:
        return "void"
    return type(value).__name__


class _Invalid(Exception):
    pass


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def _integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f'"expected integer, got {type_name(value)}"')
    return value


def _non_negative(value: object) -> int:
    number = _integer(value)
    if number < 0:
        raise _Invalid(f"{{value_negative,{number}}}")
    return number


def _positive(value: object) -> int:
    number = _non_negative(value)
    if number == 0:
        raise _Invalid("{value_zero,0}")
    return number


def _string(value: object) -> str:
    text = _text(value)
    if text is None:
        raise _Invalid(f"{{unacceptable_type,{type_name(value)}}}")
    return text


def parse_age(text: str) -> float | None:
    """Seconds of a RabbitMQ interval such as ``7D`` or ``30s``; None when malformed."""
    if len(text) < 2 or text[-1] not in _AGE_UNITS or not text[:-1].isdigit():
        return None
    if not text[:-1].isascii():
        return None
    return int(text[:-1]) * _AGE_UNITS[text[-1]]


def where(queue: str, vhost: str) -> str:
    """How RabbitMQ's argument errors name a queue."""
    return f"for queue '{queue}' in vhost '{vhost}'"


def queue_type_name(arguments: Mapping[str, object] | None, known: Collection[str], at: str) -> str:
    """The ``x-queue-type`` of ``arguments`` ("classic" without one); 406 when it is not a
    string or not one of ``known``. ``at``: the queue, as :func:`where` names it."""
    if not arguments or QUEUE_TYPE_ARG not in arguments:
        return "classic"
    try:
        name = _string(arguments[QUEUE_TYPE_ARG])
        if name not in known:
            raise _Invalid(f"\"unsupported queue type '{name}'\"")
    except _Invalid as exc:
        raise PreconditionFailed(f"invalid arg '{QUEUE_TYPE_ARG}' {at}: {exc}") from None
    return name


def parse_values(
    arguments: Mapping[str, object] | None, queue_type: str, *, queue: str, vhost: str
) -> QueueConfig:
    """The config of ``arguments``, whose type is ``queue_type`` and whose refused
    arguments were checked by it; 406 with RabbitMQ's text for an invalid value."""
    if not arguments:
        return PLAIN if queue_type == "classic" else QueueConfig(queue_type=queue_type)
    args = dict(arguments)
    key = ""
    try:
        values: dict[str, object] = {"queue_type": queue_type}
        key = "x-message-ttl"
        if key in args:
            values["message_ttl"] = _non_negative(args[key]) / 1000
        key = "x-expires"
        if key in args:
            values["expires"] = _positive(args[key]) / 1000
        key = "x-max-length"
        if key in args:
            values["max_length"] = _non_negative(args[key])
        key = "x-max-length-bytes"
        if key in args:
            values["max_length_bytes"] = _non_negative(args[key])
        key = "x-max-priority"
        if key in args:
            priority = _non_negative(args[key])
            if priority > 255:
                raise _Invalid(f"{{max_value_exceeded,{priority}}}")
            values["max_priority"] = priority
        key = "x-overflow"
        if key in args:
            overflow = _string(args[key])
            if overflow not in OVERFLOWS:
                raise _Invalid("invalid_overflow")
            values["overflow"] = overflow
        key = "x-dead-letter-exchange"
        if key in args:
            dlx = _text(args[key])
            if dlx is None:
                raise PreconditionFailed(
                    f"invalid type '{type_name(args[key])}' for arg '{key}' "
                    f"in queue '{queue}' in vhost '{vhost}'"
                )
            values["dead_letter_exchange"] = dlx
        key = "x-dead-letter-routing-key"
        if key in args:
            if "dead_letter_exchange" not in values:
                raise _Invalid("routing_key_but_no_dlx_defined")
            values["dead_letter_routing_key"] = _string(args[key])
        key = "x-single-active-consumer"
        if key in args:
            sac = args[key]
            if not isinstance(sac, bool):
                raise _Invalid(f"{{unacceptable_type,{type_name(sac)}}}")
            values["single_active_consumer"] = sac
        key = "x-queue-mode"
        if key in args and _string(args[key]) not in ("default", "lazy"):
            raise _Invalid(f"\"unsupported queue mode '{_string(args[key])}'\"")
        key = "x-queue-version"
        if key in args and _integer(args[key]) not in (1, 2):
            raise _Invalid(f"\"unsupported queue version '{args[key]}'\"")
        key = "x-dead-letter-strategy"
        if key in args and _string(args[key]) not in ("at-most-once", "at-least-once"):
            raise _Invalid("invalid_dlx_strategy")
        key = "x-queue-leader-locator"
        if key in args and _string(args[key]) not in ("client-local", "balanced"):
            raise _Invalid("invalid_queue_locator_arg")
        key = "x-quorum-initial-group-size"
        if key in args:
            _integer(args[key])
        key = "x-delivery-limit"
        if key in args:
            # RabbitMQ 3.10 accepts anything here and ignores what is not a number.
            limit = args[key]
            if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
                values["delivery_limit"] = limit
        key = "x-min-in-sync"
        if key in args:
            least = args[key]
            if isinstance(least, bool) or not isinstance(least, int) or least < 1:
                raise _Invalid(f"{{value_must_be_positive_integer,{least!r}}}")
            values["min_in_sync"] = least
        key = "x-consumer-timeout"
        if key in args:
            # RabbitMQ 3.10 ignores a value it cannot use; later versions read positive ms.
            timeout = args[key]
            if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0:
                values["consumer_timeout"] = timeout / 1000
        key = "x-max-age"
        if key in args:
            age = parse_age(_string(args[key]))
            if age is None:
                raise _Invalid("invalid_max_age")
            values["max_age"] = age
        key = "x-stream-max-segment-size-bytes"
        if key in args:
            values["segment_bytes"] = _non_negative(args[key])
    except _Invalid as exc:
        raise PreconditionFailed(f"invalid arg '{key}' {where(queue, vhost)}: {exc}") from None
    if queue_type == "classic" and has_qpid_arguments(args):
        qpid = qpid_settings(args)
        # RabbitMQ's own arguments win where both say the same thing.
        for field_name, value in qpid.items():
            values.setdefault(field_name, value)
        if "priority_levels" in qpid and values["max_priority"] != qpid["max_priority"]:
            del values["priority_levels"]  # x-max-priority given too: RabbitMQ's mapping
            values.pop("fairshare", None)
    return QueueConfig(**values)  # type: ignore[arg-type]


def consumer_priority(arguments: Mapping[str, object] | None) -> int:
    """The ``x-priority`` of basic.consume (default 0); 406 when not an integer."""
    if not arguments or "x-priority" not in arguments:
        return 0
    value = arguments["x-priority"]
    if isinstance(value, bool) or not isinstance(value, int):
        raise PreconditionFailed(
            f"invalid arg 'x-priority' for consumer: \"expected integer, got {type_name(value)}\""
        )
    return value


def consumer_timeout(arguments: Mapping[str, object] | None) -> float | None:
    """The ``x-consumer-timeout`` of basic.consume in seconds, None when absent/unusable."""
    if not arguments:
        return None
    value = arguments.get("x-consumer-timeout")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value / 1000
    return None
