"""A short part of ``python -m tests.cluster.conformance``: pika's queue and exchange suites
against a node of a three-node cluster whose queues are spread over the nodes (a balanced
leader locator), as they run against RabbitMQ. The whole run's figures are in
docs/cluster.md."""

from __future__ import annotations

import pytest

from tests.cluster import conformance

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


def test_pika_queue_and_exchange_suites_pass_against_a_cluster_node() -> None:
    code = conformance.run(
        ["-x", "tests/integration/test_pika_queues.py", "tests/integration/test_pika_exchanges.py"]
    )
    assert code == 0
