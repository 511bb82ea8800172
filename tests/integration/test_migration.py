"""docs/migration.md end to end, short: a RabbitMQ 3.10.8 with persistent messages in three
queues and two publishers still publishing moves to Leveret through on-confirm shovels made
by the doc's commands, with a ``kill -9`` of Leveret and a restart of RabbitMQ in the middle.
Every message arrives once, in order per queue and publisher; duplicates are allowed only
where RabbitMQ's ack was lost with a connection (counted, and bounded by the prefetch
window). The 100,000-message run: ``scripts/migration-soak``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.integration.migration_support import Plan, run

if TYPE_CHECKING:
    from tests.integration.rabbitmq_support import RabbitMQ

# Left out of the compiled pass (scripts/test): leveret.links is not compiled.
pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.pure_only]


@pytest.mark.timeout(600)
def test_a_rabbitmq_moves_to_leveret_through_faults(links_rabbitmq: RabbitMQ) -> None:
    plan = Plan(
        queues=3,
        prefill=500,
        publishers=2,
        publish_seconds=6.0,
        prefetch=100,
        kill_leveret_at=1.0,
        restart_rabbitmq_at=2.5,
    )
    report = run(plan, log=lambda _line: None, rabbit=links_rabbitmq)
    assert report.faults == ["kill -9 Leveret", "restart RabbitMQ"]
    assert report.missing == 0
    assert report.out_of_order == 0
    assert report.messages >= plan.queues * plan.prefill
    # Each fault may make RabbitMQ deliver again at most what was unacknowledged: one
    # prefetch window per queue.
    assert report.shovel_duplicates <= len(report.faults) * plan.queues * plan.prefetch
    assert (
        report.arrived == (report.messages + report.shovel_duplicates + report.publisher_duplicates)
        or report.arrived >= report.messages
    )
