"""The core's errors (``leveret.errors``, AMQP 0-9-1 reply codes) as AMQP 1.0 error
conditions, as RabbitMQ 4 reports them on a link, a session or the connection."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.protocol.amqp10 import Error

if TYPE_CHECKING:
    from leveret.errors import AMQPError

__all__ = ["condition_for", "error_for"]

_CONDITIONS = {
    320: "amqp:connection:forced",
    403: "amqp:unauthorized-access",
    404: "amqp:not-found",
    405: "amqp:resource-locked",
    406: "amqp:precondition-failed",
    311: "amqp:link:message-size-exceeded",
    502: "amqp:decode-error",
    503: "amqp:not-allowed",
    530: "amqp:not-allowed",
    540: "amqp:not-implemented",
}


def condition_for(reply_code: int) -> str:
    return _CONDITIONS.get(reply_code, "amqp:internal-error")


def error_for(exc: AMQPError) -> Error:
    return Error(condition=condition_for(exc.reply_code), description=exc.reply_text)
