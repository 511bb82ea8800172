"""tools/qpid_conformance.py without Python 2: reading qpid-python-test's output (long
names wrap onto a second line, short ones end in a single dot), the per-group table and the
baseline check."""

from __future__ import annotations

import pytest
from tools.qpid_conformance import parse, regressions, table

# Left out of the compiled pass (scripts/test): a tool's own code.
pytestmark = pytest.mark.pure_only

OUTPUT = """\
qpid_tests.broker_0_8.basic.BasicTests.test_ack ......................... pass
qpid_tests.broker_0_8.basic.BasicTests. \\
    test_reconnect_to_durable_subscription .............................. fail
Error during test:  Traceback (most recent call last):
  AssertionError: 'connection' != 'channel'
qpid_tests.broker_0_8.exchange.RequiredInstancesRuleTests.testAmqDirect . pass
qpid_tests.broker_0_9.echo.EchoTests.test_small_message ................. skip
Totals: 4 tests, 2 passed, 1 skipped, 0 ignored, 1 failed
"""


def test_parse_reads_every_form_of_result_line() -> None:
    assert parse(OUTPUT) == {
        "qpid_tests.broker_0_8.basic.BasicTests.test_ack": "pass",
        "qpid_tests.broker_0_8.basic.BasicTests.test_reconnect_to_durable_subscription": "fail",
        "qpid_tests.broker_0_8.exchange.RequiredInstancesRuleTests.testAmqDirect": "pass",
        "qpid_tests.broker_0_9.echo.EchoTests.test_small_message": "skip",
    }


def test_table_counts_passes_per_group() -> None:
    leveret = parse(OUTPUT)
    rabbit = dict(leveret, **{"qpid_tests.broker_0_8.basic.BasicTests.test_ack": "fail"})
    text = table({"leveret": leveret, "rabbitmq": rabbit})
    assert "| broker_0_8.basic | 2 | 1 | 0 |" in text
    assert "| **all** | 4 | 2 | 1 |" in text


def test_regressions_name_what_passes_elsewhere() -> None:
    baseline = {
        "rabbitmq": {"a.b.c.T.t1": "pass", "a.b.c.T.t2": "fail"},
        "leveret": {"a.b.c.T.t2": "pass", "a.b.c.T.t3": "fail"},
    }
    now = {"a.b.c.T.t1": "fail", "a.b.c.T.t2": "fail", "a.b.c.T.t3": "fail"}
    assert regressions(baseline, now) == [
        "a.b.c.T.t1: passes on RabbitMQ, fail on Leveret",
        "a.b.c.T.t2: passed on Leveret in the baseline, fail now",
    ]
    assert regressions(baseline, {"a.b.c.T.t1": "pass"}) == []
