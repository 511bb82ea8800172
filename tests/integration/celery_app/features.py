"""Celery app for test_celery_features.py: Celery's own use of the queue features.

The worker consumes two queues, both bound to one topic exchange named after the first:

- ``<queue>``: a quorum queue (so Celery turns on native delayed delivery and declares its
  ``celery_delayed_*`` topology) that dead-letters rejected messages through the default
  exchange into ``<queue>.retry``, which holds them for ``RETRY_TTL_MS`` and dead-letters
  them back: retries through dead-letter queues, counted by ``x-death``;
- ``<queue>.b``: a classic queue whose rejected messages end in ``<queue>.dead``, a
  dead-letter queue without consumers.

The test declares the two helper queues, configures its own copy of the app with
``configure`` and starts the worker with the same environment.
"""

# kombu ships py.typed but leaves most of its API unannotated.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.exceptions import Reject
from kombu.entity import Exchange, Queue

BROKER_URL_ENV = "LEVERET_CELERY_BROKER_URL"
QUEUE_ENV = "LEVERET_CELERY_QUEUE"
RETRY_TTL_MS = 200

app = Celery("leveret_feature_tests")


def task_queues(queue: str) -> tuple[Queue, Queue]:
    exchange = Exchange(queue, type="topic", durable=True)
    main = Queue(
        queue,
        exchange,
        routing_key=queue,
        durable=True,
        queue_arguments={
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": f"{queue}.retry",
        },
    )
    other = Queue(
        f"{queue}.b",
        exchange,
        routing_key=f"{queue}.b",
        durable=True,
        queue_arguments={
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": f"{queue}.dead",
        },
    )
    return main, other


def helper_queue_arguments(queue: str) -> dict[str, dict[str, Any]]:
    """Arguments of the helper queues the test declares: name -> arguments."""
    return {
        f"{queue}.retry": {
            "x-message-ttl": RETRY_TTL_MS,
            "x-dead-letter-exchange": queue,
            "x-dead-letter-routing-key": queue,
        },
        f"{queue}.dead": {},
    }


def configure(broker_url: str, queue: str) -> None:
    app.conf.update(
        broker_url=broker_url,
        result_backend="rpc://",
        task_queues=task_queues(queue),
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_exchange_type="topic",
        task_default_routing_key=queue,
        task_default_queue_type="quorum",
        worker_detect_quorum_queues=True,
        broker_transport_options={"confirm_publish": True},
        task_acks_late=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=5,
        broker_heartbeat=3.0,  # wakes the worker's loop often, so SIGTERM is noticed soon
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )


if os.environ.get(QUEUE_ENV):
    configure(os.environ[BROKER_URL_ENV], os.environ[QUEUE_ENV])


def _add(x: int, y: int) -> int:
    return x + y


def _requeue_once(self: Any) -> dict[str, Any]:
    """acks_late: reject with requeue on the first delivery, succeed on the redelivery."""
    info = self.request.delivery_info or {}
    if not info.get("redelivered"):
        raise Reject("first delivery: requeue", requeue=True)
    return {"acks_late": bool(self.acks_late), "redelivered": True}


def _deaths(request: Any) -> dict[str, int]:
    """x-death counts by reason and queue, as the broker recorded them."""
    counts: dict[str, int] = {}
    for death in request.get("x-death") or []:
        counts[f"{death['reason']}:{death['queue']}"] = int(death["count"])
    return counts


def _retry_via_dlq(self: Any, attempts: int) -> str:
    """Reject (no requeue) until the message has been dead-lettered ``attempts`` times."""
    deaths = _deaths(self.request)
    queue = (self.request.delivery_info or {}).get("routing_key", "")
    if deaths.get(f"rejected:{queue}", 0) < attempts:
        raise Reject("retry through the dead-letter queue", requeue=False)
    return "deaths " + ", ".join(f"{key}={count}" for key, count in sorted(deaths.items()))


def _poison(self: Any) -> None:
    raise Reject("poison message", requeue=False)


add = app.task(name="leveret_features.add")(_add)
requeue_once = app.task(name="leveret_features.requeue_once", bind=True)(_requeue_once)
# ignore_result: Celery records a FAILURE for each Reject(requeue=False), which would end the
# caller's wait at the first rejection; the test reads the outcome from the worker's log.
retry_via_dlq = app.task(name="leveret_features.retry_via_dlq", bind=True, ignore_result=True)(
    _retry_via_dlq
)
poison = app.task(name="leveret_features.poison", bind=True)(_poison)
