"""A bounded subset of the Qpid project's 0-8 and 0-9 conformance tests (qpid-python's
``qpid_tests.broker_0_8`` / ``broker_0_9``, Python 2.7, Qpid's own client sending
``AMQP 1 1 0 9``) against a Leveret process. The whole run is ``python -m
tools.qpid_conformance --compare`` (docs/compatibility.md has its latest figures); this one
checks, against the recorded baseline, that every selected test passing on RabbitMQ 3.10.8
(or on Leveret when it was recorded) passes."""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING

import pytest
from tools import qpid_conformance

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.leveret_only, pytest.mark.interop, pytest.mark.timeout(300)]

SUBSET = (
    "qpid_tests.broker_0_8.basic.BasicTests.test_ack",
    "qpid_tests.broker_0_8.basic.BasicTests.test_get",
    "qpid_tests.broker_0_8.basic.BasicTests.test_qos_prefetch_count",
    "qpid_tests.broker_0_8.basic.BasicTests.test_recover_requeue",
    "qpid_tests.broker_0_8.broker.BrokerTests.test_channel_flow",
    "qpid_tests.broker_0_8.broker.BrokerTests.test_invalid_channel",
    "qpid_tests.broker_0_8.exchange.RecommendedTypesRuleTests.*",
    "qpid_tests.broker_0_8.queue.QueueTests.test_bind",
    "qpid_tests.broker_0_8.queue.QueueTests.test_delete_ifempty",
    "qpid_tests.broker_0_8.tx.TxTests.test_commit",
    "qpid_tests.broker_0_9.echo.*",
    "qpid_tests.broker_0_9.messageheader.*",
    "qpid_tests.broker_0_9.queue.QueueTests.test_unbind_*",
)


def test_the_qpid_subset_passes_where_the_baseline_says(broker: Broker) -> None:
    python2 = qpid_conformance.find_python2()
    if python2 is None:
        pytest.skip("no Python 2.7 for the Qpid tests (pyenv, $QPID_PYTHON2)")
    try:
        qpid_conformance.prepare(python2)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"qpid-python could not be downloaded: {exc}")
    results = qpid_conformance.run(
        python2,
        f"{broker.host}:{broker.port}",
        SUBSET,
        timeout=240,
        defines=("qpid.recv_timeout=0.5", "qpid.recv_timeout_negative=0.2"),
    )
    assert len(results) >= 25, results  # the patterns matched what they should
    baseline = json.loads(qpid_conformance.BASELINE.read_text())
    assert qpid_conformance.regressions(baseline, results) == []
    # The selection is of tests that pass on both brokers.
    assert all(outcome == "pass" for outcome in results.values()), results
