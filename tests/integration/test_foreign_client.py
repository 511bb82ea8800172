"""Interop with a client that is not Python: rabbitmq-c's command-line tools (Debian amqp-tools).

``amqp-declare-queue``, ``amqp-publish``, ``amqp-get``, ``amqp-consume`` and ``amqp-delete-queue``
each open their own connection, so every call also exercises a full handshake and close.
pika (blocking) is the Python side of the cross-client checks.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

import pika
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.integration.conftest import Broker

TOOLS = ("amqp-declare-queue", "amqp-publish", "amqp-get", "amqp-consume", "amqp-delete-queue")
_missing = [tool for tool in TOOLS if shutil.which(tool) is None]

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(
        bool(_missing),
        reason=f"rabbitmq-c command-line tools not installed (apt install amqp-tools): {_missing}",
    ),
]

TOOL_TIMEOUT = 15.0
AMQP_GET_EMPTY = 2  # amqp-get's exit status when the queue has no message


def tool(
    broker: Broker, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """Run one amqp-tools command against the broker, bounded in time."""
    result = subprocess.run(
        [args[0], "--url", broker.url, *args[1:]],
        input=stdin.encode() if stdin is not None else None,
        capture_output=True,
        timeout=TOOL_TIMEOUT,
        check=False,
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"{args} exited {result.returncode}: stdout={result.stdout!r} stderr={result.stderr!r}"
        )
    return result


@pytest.fixture
def queue(broker: Broker, name: str) -> Iterator[str]:
    """A queue declared by amqp-declare-queue, deleted afterwards by amqp-delete-queue."""
    result = tool(broker, "amqp-declare-queue", "-q", name)
    assert result.stdout.decode().strip() == name
    yield name
    tool(broker, "amqp-delete-queue", "-q", name, check=False)


@pytest.fixture
def blocking(broker: Broker) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        yield connection.channel()
    finally:
        connection.close()


def test_publish_then_get_in_order(broker: Broker, queue: str) -> None:
    for i in range(3):
        tool(broker, "amqp-publish", "-r", queue, "-b", f"message {i}")
    bodies = [tool(broker, "amqp-get", "-q", queue).stdout for _ in range(3)]
    assert bodies == [b"message 0", b"message 1", b"message 2"]
    empty = tool(broker, "amqp-get", "-q", queue, check=False)
    assert empty.returncode == AMQP_GET_EMPTY
    assert empty.stdout == b""


def test_publish_then_consume_count(broker: Broker, queue: str) -> None:
    for i in range(3):
        tool(broker, "amqp-publish", "-r", queue, "-b", f"body-{i}")
    # amqp-consume runs the command once per message with the body on stdin; -c stops it.
    result = tool(broker, "amqp-consume", "-q", queue, "-c", "3", "--", "sh", "-c", "cat; echo")
    assert result.stdout.decode().splitlines() == ["body-0", "body-1", "body-2"]
    assert tool(broker, "amqp-get", "-q", queue, check=False).returncode == AMQP_GET_EMPTY


def test_consume_with_prefetch_and_line_buffered_publish(broker: Broker, queue: str) -> None:
    text = "".join(f"line {i}\n" for i in range(5))
    tool(broker, "amqp-publish", "-r", queue, "-l", stdin=text)  # one message per line
    result = tool(broker, "amqp-consume", "-q", queue, "-c", "5", "-p", "1", "--", "cat")
    assert result.stdout.decode() == text  # each body keeps its newline
    assert tool(broker, "amqp-get", "-q", queue, check=False).returncode == AMQP_GET_EMPTY


def test_delete_queue_reports_message_count(broker: Broker, name: str) -> None:
    tool(broker, "amqp-declare-queue", "-q", name)
    for i in range(4):
        tool(broker, "amqp-publish", "-r", name, "-b", str(i))
    deleted = tool(broker, "amqp-delete-queue", "-q", name)
    assert deleted.stdout.decode().strip() == "4"


def test_get_from_missing_queue_fails(broker: Broker, name: str) -> None:
    result = tool(broker, "amqp-get", "-q", f"{name}.missing", check=False)
    assert result.returncode not in (0, AMQP_GET_EMPTY)
    assert b"404" in result.stderr


def test_pika_publishes_amqp_get_reads(
    broker: Broker, queue: str, blocking: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    blocking.confirm_delivery()
    for i in range(3):
        blocking.basic_publish(
            "",
            queue,
            f"from pika {i}".encode(),
            pika.BasicProperties(content_type="text/plain", headers={"n": i}),
        )
    bodies = [tool(broker, "amqp-get", "-q", queue).stdout for _ in range(3)]
    assert bodies == [b"from pika 0", b"from pika 1", b"from pika 2"]


def test_amqp_publish_pika_reads_properties(
    broker: Broker, queue: str, blocking: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    tool(
        broker,
        "amqp-publish",
        "-r",
        queue,
        "-b",
        "payload",
        "-p",
        "-C",
        "application/json",
        "-E",
        "utf-8",
        "-t",
        "reply.here",
        "-H",
        "x-trace: abc",
        "-H",
        "origin: rabbitmq-c",
    )
    method, properties, body = blocking.basic_get(queue, auto_ack=True)
    assert method is not None
    assert body == b"payload"
    assert properties.delivery_mode == 2
    assert properties.content_type == "application/json"
    assert properties.content_encoding == "utf-8"
    assert properties.reply_to == "reply.here"
    assert properties.headers == {"x-trace": "abc", "origin": "rabbitmq-c"}


def test_amqp_publish_to_exchange_routes_to_pika_queue(
    broker: Broker, name: str, blocking: pika.adapters.blocking_connection.BlockingChannel
) -> None:
    blocking.exchange_declare(f"{name}.topic", exchange_type="topic", auto_delete=True)
    result = blocking.queue_declare("", exclusive=True)
    queue = result.method.queue
    blocking.queue_bind(queue, f"{name}.topic", routing_key="logs.#")
    for key in ("logs.a", "other", "logs.b.c"):
        tool(broker, "amqp-publish", "-e", f"{name}.topic", "-r", key, "-b", key)
    got = []
    while True:
        method, _props, body = blocking.basic_get(queue, auto_ack=True)
        if method is None:
            break
        got.append((method.routing_key, body))
    assert got == [("logs.a", b"logs.a"), ("logs.b.c", b"logs.b.c")]
