"""Interop: a real Celery worker executes tasks over the broker, results come back over rpc://.

One worker subprocess serves the whole module (Celery starts slowly). It runs
``tests.integration.celery_app.tasks`` with ``task_acks_late=True`` and consumes a queue of its
own, so runs against a shared broker do not meet each other's tasks.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from celery import chain, group

from tests.integration.celery_app import tasks
from tests.integration.celery_support import Worker, celery_worker

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

RESULT_TIMEOUT = 20.0


@pytest.fixture(scope="module")
def worker(broker: Broker) -> Iterator[Worker]:
    queue = f"leveret-celery-{uuid.uuid4().hex[:12]}"
    env = {tasks.BROKER_URL_ENV: broker.url, tasks.QUEUE_ENV: queue, tasks.HEARTBEAT_ENV: "3"}
    tasks.app.conf.update(broker_url=broker.url, task_default_queue=queue)
    with celery_worker(tasks.__name__, queue, queue, env) as w:
        yield w
    with tasks.app.connection_for_write() as conn:
        conn.default_channel.queue_delete(queue)
        conn.default_channel.exchange_delete(queue)  # Celery's same-named direct exchange
    tasks.app.close()
    assert w.returncode == 0, f"worker exited {w.returncode} after SIGTERM:\n{w.log_text()}"


def test_add_delay_get(worker: Worker) -> None:
    assert tasks.add.delay(2, 3).get(timeout=RESULT_TIMEOUT) == 5


def test_many_results_round_trip(worker: Worker) -> None:
    results = [tasks.add.delay(i, 100) for i in range(20)]
    assert [r.get(timeout=RESULT_TIMEOUT) for r in results] == [i + 100 for i in range(20)]


def test_retry_twice_then_succeed(worker: Worker) -> None:
    result = tasks.flaky.delay(2)
    assert result.get(timeout=RESULT_TIMEOUT) == 2  # the number of retries it took
    assert result.state == "SUCCESS"
    assert "Retry in" in worker.log_text()


def test_failure_reraises(worker: Worker) -> None:
    result = tasks.fail.delay("boom from the worker")
    with pytest.raises(ValueError, match="boom from the worker"):
        result.get(timeout=RESULT_TIMEOUT)
    assert result.state == "FAILURE"
    assert result.failed()


def test_chain(worker: Worker) -> None:
    workflow = chain(tasks.add.s(1, 2), tasks.add.s(3), tasks.mul.s(2))
    assert workflow.apply_async().get(timeout=RESULT_TIMEOUT) == 12


def test_group(worker: Worker) -> None:
    job = group(tasks.add.s(i, i) for i in range(5))
    assert job.apply_async().get(timeout=RESULT_TIMEOUT) == [0, 2, 4, 6, 8]


def test_acks_late_configured(worker: Worker) -> None:
    assert tasks.app.conf.task_acks_late is True
    assert tasks.ack_mode.delay().get(timeout=RESULT_TIMEOUT) == {
        "acks_late": True,
        "routing_key": worker.queue,
        "redelivered": False,
    }
