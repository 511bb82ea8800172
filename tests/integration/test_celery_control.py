"""Interop: Celery's remote control and events, through the pidbox broadcast exchanges.

Issue 11 named these ("inspect conf", "revoked", received/revoked events): ``celery inspect`` and
``celery control`` publish to the fanout exchange ``celery.pidbox`` and collect the workers'
replies on a per-client ``reply.celery.pidbox`` direct exchange; events go over the topic
exchange ``celeryev``. A real worker subprocess answers; every command is addressed to it alone
(``destination``) so runs against a shared broker do not collect other workers' replies. The
same module passes against RabbitMQ 3.10.8 (``LEVERET_TEST_AMQP_URL``).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.celery_app import tasks
from tests.integration.celery_support import Worker, celery_worker

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

REPLY_TIMEOUT = 5.0
EVENT_TIMEOUT = 20.0
# Long enough for the revoke to reach the worker before the task is due, on a loaded machine too.
COUNTDOWN = 6.0


@pytest.fixture(scope="module")
def worker(broker: Broker) -> Iterator[Worker]:
    queue = f"leveret-celery-control-{uuid.uuid4().hex[:12]}"
    env = {
        tasks.BROKER_URL_ENV: broker.url,
        tasks.QUEUE_ENV: queue,
        tasks.HEARTBEAT_ENV: "3",
        tasks.EVENTS_ENV: "1",
    }
    tasks.app.conf.update(broker_url=broker.url, task_default_queue=queue)
    with celery_worker(tasks.__name__, queue, queue, env) as w:
        yield w
    with tasks.app.connection_for_write() as conn:
        conn.default_channel.queue_delete(queue)
        conn.default_channel.exchange_delete(queue)
    tasks.app.close()
    assert w.returncode == 0, f"worker exited {w.returncode} after SIGTERM:\n{w.log_text()}"


def _node(worker: Worker) -> str:
    return f"{worker.queue}@{socket.gethostname()}"


def _inspect(worker: Worker) -> Any:
    return tasks.app.control.inspect(destination=[_node(worker)], timeout=REPLY_TIMEOUT)


def test_ping_conf_registered(worker: Worker) -> None:
    node = _node(worker)
    inspect = _inspect(worker)
    assert inspect.ping() == {node: {"ok": "pong"}}
    conf = inspect.conf()[node]
    assert conf["task_default_queue"] == worker.queue
    assert "leveret_tests.add" in inspect.registered()[node]
    queues = [q["name"] for q in inspect.active_queues()[node]]
    assert queues == [worker.queue]


def test_received_revoke_revoked_and_the_events(worker: Worker) -> None:
    """A task with a countdown is received and held (``task-received``, ``inspect scheduled``);
    revoked, it is listed by ``inspect revoked`` and discarded when due (``task-revoked``)."""
    node = _node(worker)
    control = tasks.app.control
    task_id = str(uuid.uuid4())
    seen: list[str] = []
    consuming = threading.Event()

    def on_event(event: dict[str, Any]) -> None:
        if event.get("uuid") == task_id:
            seen.append(event["type"])
            if event["type"] == "task-revoked":
                receiver.should_stop = True

    conn = tasks.app.connection_for_read()
    receiver = tasks.app.events.Receiver(conn, handlers={"*": on_event})
    # Called once its (exclusive) queue is declared, bound and consumed, on a connection of its
    # own: only then may the task be sent.
    receiver.on_consume_ready = lambda *args, **kwargs: consuming.set()

    def capture() -> None:
        with contextlib.suppress(TimeoutError):
            receiver.capture(limit=None, timeout=EVENT_TIMEOUT)

    thread = threading.Thread(target=capture, daemon=True)
    try:
        thread.start()
        assert consuming.wait(EVENT_TIMEOUT)
        tasks.add.apply_async((1, 2), task_id=task_id, countdown=COUNTDOWN)
        inspect = _inspect(worker)
        deadline = time.monotonic() + COUNTDOWN
        while "task-received" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen == ["task-received"]
        scheduled = inspect.scheduled()[node]
        assert [s["request"]["id"] for s in scheduled] == [task_id]
        replies = control.revoke(task_id, destination=[node], reply=True, timeout=REPLY_TIMEOUT)
        assert replies == [{node: {"ok": f"tasks {{{task_id!r}}} flagged as revoked"}}]
        assert task_id in inspect.revoked()[node]
        thread.join(EVENT_TIMEOUT)
        assert not thread.is_alive(), f"events for the revoked task: {seen}"
        assert seen == ["task-received", "task-revoked"]
    finally:
        receiver.should_stop = True
        thread.join(EVENT_TIMEOUT)
        conn.release()
