"""The shell's deferral through the real adapter and a real client: a 0-9-1 handler that
defers its answer (as a cluster node's ``queue.declare`` will wait for etcd) leaves pika
waiting until the completion is resolved from outside any turn (here: the test, on the
broker's thread); the adapter then runs the turn that sends declare-ok, and the channel's
next method is answered after it. (That the connection's other channels are served
meanwhile is ``tests/unit/server/test_shell_deferral.py``'s.)"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, cast

import pika
import pytest

from leveret.model.completion import Completion
from leveret.protocol.amqp091._generated import methods as m
from leveret.server.amqp091 import handlers
from leveret.testing.embedded import EmbeddedBroker

if TYPE_CHECKING:
    from leveret.server.amqp091.channel import Channel
    from leveret.server.amqp091.connection import AMQP091Connection

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only]

TIMEOUT = 10.0


def test_a_deferred_declare_is_answered_when_its_completion_is_resolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pending: list[Completion[str]] = []

    def declare(channel: Channel, method: m.Method) -> None:
        assert isinstance(method, m.QueueDeclare)
        conn = cast("AMQP091Connection", channel.conn)
        completion: Completion[str] = Completion()
        pending.append(completion)

        def reply(name: str) -> None:
            conn.send_method(channel.id, m.QueueDeclareOk(queue=name))

        conn.defer(channel, completion, reply, class_id=50, method_id=10)

    monkeypatch.setitem(handlers.HANDLERS, m.QueueDeclare.INDEX, declare)
    with EmbeddedBroker() as broker:
        answers: dict[str, Any] = {}

        def client() -> None:
            conn = pika.BlockingConnection(pika.URLParameters(broker.url()))
            try:
                waiting = conn.channel()
                waiting.basic_qos(prefetch_count=3)  # answered at once: nothing held yet
                answers["declare"] = waiting.queue_declare("deferred")
                waiting.basic_qos(prefetch_count=4)  # held behind the declare, then answered
                answers["after"] = True
            finally:
                conn.close()

        thread = threading.Thread(target=client, daemon=True)
        thread.start()
        deadline = time.monotonic() + TIMEOUT
        while not broker.call(lambda: bool(pending)):
            assert time.monotonic() < deadline, "the declare never arrived"
            time.sleep(0.01)
        time.sleep(0.3)
        assert "declare" not in answers  # pika still waits
        broker.call(pending[0].resolve, "deferred")
        thread.join(TIMEOUT)
        assert not thread.is_alive()
        assert answers["declare"].method.queue == "deferred"
        assert answers["after"]
