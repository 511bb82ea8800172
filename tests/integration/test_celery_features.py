"""Celery's own use of the queue features, with a real worker (one for the module):
``task_acks_late`` with a task that requeues, retries through dead-letter queues with
``x-death``, a poison message in a dead-letter queue, and Celery's native delayed delivery
(the ``celery_delayed_*`` quorum queues with TTL and at-least-once dead-lettering it
declares when the task queues are quorum queues). Passes against RabbitMQ 3.10 as well.
"""

# kombu ships py.typed but leaves most of its API unannotated.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from kombu.connection import Connection

from tests.integration.celery_app import features
from tests.integration.celery_support import Worker, celery_worker

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

RESULT_TIMEOUT = 20.0


def _declare_helpers(url: str, queue: str) -> None:
    with Connection(url) as conn:
        channel = conn.default_channel
        for name, arguments in features.helper_queue_arguments(queue).items():
            channel.queue_declare(name, durable=True, arguments=arguments)


def _cleanup(url: str, queue: str) -> None:
    with Connection(url) as conn:
        channel = conn.default_channel
        for name in (queue, f"{queue}.b", *features.helper_queue_arguments(queue)):
            channel.queue_delete(name)
        channel.exchange_delete(queue)


@pytest.fixture(scope="module")
def worker(broker: Broker) -> Iterator[Worker]:
    queue = f"leveret-celery-f-{uuid.uuid4().hex[:12]}"
    _declare_helpers(broker.url, queue)
    features.configure(broker.url, queue)
    env = {features.BROKER_URL_ENV: broker.url, features.QUEUE_ENV: queue}
    with celery_worker(features.__name__, queue, f"{queue},{queue}.b", env) as w:
        yield w
    _cleanup(broker.url, queue)
    features.app.close()
    assert w.returncode == 0, f"worker exited {w.returncode} after SIGTERM:\n{w.log_text()}"


def test_acks_late_task_rejects_and_requeues(worker: Worker) -> None:
    result = features.requeue_once.delay()
    assert result.get(timeout=RESULT_TIMEOUT) == {"acks_late": True, "redelivered": True}
    assert "first delivery: requeue" in worker.log_text()


def test_retries_through_dead_letter_queues(worker: Worker) -> None:
    """Rejected -> <queue>.retry (TTL) -> back, twice; x-death counts each hop."""
    queue = worker.queue
    result = features.retry_via_dlq.delay(2)
    expected = (
        f"retry_via_dlq[{result.id}] succeeded in",
        f"deaths expired:{queue}.retry=2, rejected:{queue}=2",
    )
    deadline = time.monotonic() + RESULT_TIMEOUT
    while time.monotonic() < deadline:
        if any(all(part in line for part in expected) for line in worker.log):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"no success with two dead-letter rounds:\n{worker.log_text()}")
    assert worker.log_text().count(f"retry_via_dlq[{result.id}]") >= 3


def test_rejected_task_lands_in_dead_letter_queue_with_x_death(worker: Worker) -> None:
    queue = worker.queue
    result = features.poison.apply_async(queue=f"{queue}.b")
    deadline = time.monotonic() + RESULT_TIMEOUT
    message: Any = None
    with Connection(features.app.conf.broker_url) as conn:
        channel = conn.default_channel
        while message is None and time.monotonic() < deadline:
            message = channel.basic_get(f"{queue}.dead", no_ack=True)
            if message is None:
                time.sleep(0.05)
    assert message is not None, worker.log_text()
    headers = message.headers
    assert headers["id"] == result.id
    assert headers["task"] == "leveret_features.poison"
    (death,) = headers["x-death"]
    assert death["reason"] == "rejected"
    assert death["queue"] == f"{queue}.b"
    assert death["count"] == 1
    assert death["exchange"] == queue
    assert death["routing-keys"] == [f"{queue}.b"]
    assert headers["x-first-death-queue"] == f"{queue}.b"


def test_native_delayed_delivery(worker: Worker) -> None:
    with Connection(features.app.conf.broker_url) as conn:
        channel = conn.default_channel
        # The topology the worker declared at start: 28 quorum queues and their exchanges.
        for level in (0, 1, 27):
            channel.queue_declare(f"celery_delayed_{level}", passive=True)
        channel.exchange_declare("celery_delayed_delivery", "topic", passive=True)
    started = time.monotonic()
    result = features.add.apply_async((2, 3), countdown=2)
    assert result.get(timeout=30) == 5
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 10, elapsed
