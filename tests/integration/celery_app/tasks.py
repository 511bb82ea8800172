"""Celery app and tasks for test_celery.py; the worker runs ``celery -A`` on this module.

The broker URL and the task queue come from the environment (set by the test for the worker
subprocess), so the worker and the test's own client talk to the same broker and queue.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

BROKER_URL_ENV = "LEVERET_CELERY_BROKER_URL"
QUEUE_ENV = "LEVERET_CELERY_QUEUE"
HEARTBEAT_ENV = "LEVERET_CELERY_HEARTBEAT"
EVENTS_ENV = "LEVERET_CELERY_EVENTS"

app = Celery("leveret_tests")
app.conf.update(
    broker_url=os.environ.get(BROKER_URL_ENV, "amqp://guest:guest@127.0.0.1:5672//"),
    result_backend="rpc://",
    task_default_queue=os.environ.get(QUEUE_ENV, "leveret-celery"),
    task_acks_late=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    broker_connection_timeout=5,
    # The worker's event loop wakes for its heartbeat timer (every heartbeat/3 s); a short
    # heartbeat makes it notice SIGTERM promptly, and exercises heartbeats both ways.
    broker_heartbeat=float(os.environ.get(HEARTBEAT_ENV, "120")),
    # Task events (``worker -E``): the worker decides at start whether it sends them.
    worker_send_task_events=os.environ.get(EVENTS_ENV) == "1",
    worker_hijack_root_logger=False,
    worker_redirect_stdouts=False,
)


def _add(x: int, y: int) -> int:
    return x + y


def _mul(x: int, y: int) -> int:
    return x * y


def _fail(message: str) -> None:
    raise ValueError(message)


def _flaky(self: Any, succeed_after: int) -> int:
    """Retry ``succeed_after`` times (each a new message through the broker), then succeed."""
    if self.request.retries < succeed_after:
        raise self.retry(countdown=0.1)
    return int(self.request.retries)


def _ack_mode(self: Any) -> dict[str, Any]:
    """How the worker runs this task: acks_late as configured, and the delivery it came from."""
    info = self.request.delivery_info or {}
    return {
        "acks_late": bool(self.acks_late),
        "routing_key": info.get("routing_key"),
        "redelivered": info.get("redelivered"),
    }


# Registered explicitly rather than with ``@app.task``: celery is untyped, and a plain call
# keeps the functions above fully typed for mypy --strict.
add = app.task(name="leveret_tests.add")(_add)
mul = app.task(name="leveret_tests.mul")(_mul)
fail = app.task(name="leveret_tests.fail")(_fail)
flaky = app.task(name="leveret_tests.flaky", bind=True, max_retries=3)(_flaky)
ack_mode = app.task(name="leveret_tests.ack_mode", bind=True)(_ack_mode)
