"""Helpers the pika interop tests share: bounded connections, I/O pumping, polling, passive
declares and reply codes.

Plain functions (the ``conn`` and ``ch`` fixtures built on them live in ``conftest.py``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest

    from tests.integration.conftest import Broker


# --------------------------------------------------------------------------- connections


def connection_parameters(host: str, port: int, **params: Any) -> Any:
    """ConnectionParameters for guest/guest, bounded in time; ``params`` override any of it."""
    options: dict[str, Any] = {
        "credentials": pika.PlainCredentials("guest", "guest"),
        "blocked_connection_timeout": 10,
        "socket_timeout": 5,
        "stack_timeout": 10,
        "connection_attempts": 1,
        **params,
    }
    return pika.ConnectionParameters(host=host, port=port, **options)


def parameters(broker: Broker, **params: Any) -> Any:
    """``connection_parameters`` for the broker under test."""
    return connection_parameters(broker.host, broker.port, **params)


def connect_to(host: str, port: int, **params: Any) -> Any:
    """A BlockingConnection to ``host:port``, bounded in time."""
    return pika.BlockingConnection(connection_parameters(host, port, **params))


def connect(broker: Broker, **params: Any) -> Any:
    """A BlockingConnection to the broker under test, bounded in time."""
    return pika.BlockingConnection(parameters(broker, **params))


class Opened:
    """A context manager closing a pika connection if it is still open."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __enter__(self) -> Any:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        if self.conn.is_open:
            self.conn.close()


# --------------------------------------------------------------------------- waiting


def pump(conn: Any, until: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Process I/O until ``until()`` holds or ``timeout`` passes; returns ``until()``."""
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    return until()


def settle(conn: Any, seconds: float = 0.3) -> None:
    """Give the broker a moment to deliver whatever it is going to deliver."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)


def eventually(check: Callable[[], bool], timeout: float = 3.0) -> bool:
    """Poll ``check`` until it holds; RabbitMQ applies some effects (auto-delete, publishes seen by
    a passive declare) a moment after the method that caused them returns."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# --------------------------------------------------------------------------- queues and codes


def message_count(ch: Any, queue: str) -> int:
    """The ready count a passive queue.declare reports."""
    return int(ch.queue_declare(queue=queue, passive=True).method.message_count)


def count_is(ch: Any, queue: str, expected: int, timeout: float = 3.0) -> bool:
    """Whether the queue's message count reaches ``expected`` within ``timeout``.

    RabbitMQ answers a passive queue.declare ahead of publishes and acks still in flight to the
    queue (its queue process serves that call with priority), so counts are polled.
    """
    return eventually(lambda: message_count(ch, queue) == expected, timeout)


def _probe_code(conn: Any, declare: Callable[[Any], object]) -> int:
    """0 when ``declare`` succeeds on a throwaway channel, else the reply code that closed it."""
    probe = conn.channel()
    try:
        declare(probe)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return int(exc.reply_code)
    probe.close()
    return 0


def passive_code(conn: Any, queue: str) -> int:
    """0 when a passive declare of ``queue`` succeeds, else the reply code that closed the
    throwaway channel it was asked on."""
    return _probe_code(conn, lambda probe: probe.queue_declare(queue=queue, passive=True))


def exchange_code(conn: Any, exchange: str) -> int:
    """0 when a passive declare of ``exchange`` succeeds, else the reply code that closed the
    throwaway channel it was asked on."""
    return _probe_code(conn, lambda probe: probe.exchange_declare(exchange=exchange, passive=True))


def code_of(exc: pytest.ExceptionInfo[Any]) -> int:
    """The reply code of the channel or connection close a ``pytest.raises`` caught."""
    return int(exc.value.reply_code)
