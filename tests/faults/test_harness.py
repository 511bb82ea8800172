"""The fault harness (``tools/faults``) driving a real Leveret cluster: etcd and two
``leveret serve`` nodes behind the harness's proxies, publishers with confirms and
consumers with acks, one kill -9 of a leader and its restart. The queues it led hold a
backlog when it dies: the checker finds the transient queue's confirmed messages lost
and none of the persistent queues', and everything the run started is stopped.

The soak runs and the RabbitMQ side by side are ``python -m tools.faults`` (docs/faults.md).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import pytest
from tools.faults.runner import RunConfig, run
from tools.faults.targets.leveret import LeveretTarget
from tools.faults.workload import WorkloadSettings

from leveret.testing.etcd import EtcdMissing, etcd_binary

if TYPE_CHECKING:
    from pathlib import Path

# Left out of the compiled pass (scripts/test): its subject is the harness, which is not
# compiled (the nodes it starts are brokers like any other test's).
pytestmark = pytest.mark.pure_only


def test_a_kill_of_a_leader_loses_the_transient_backlog_only(tmp_path: Path) -> None:
    try:
        etcd_binary()
    except EtcdMissing as exc:
        pytest.skip(str(exc))
    config = RunConfig(
        target="leveret",
        nodes=2,
        cycles=1,
        faults=("kill",),
        victims="leader",
        queue_type="classic",
        # q1 and q3 on n1 (declared through node i % 2), q2 on n2; q3 gets transient messages.
        queues=3,
        transient_queues=1,
        fault_seconds=0.5,
        settle_seconds=0.5,
        warmup_seconds=1.5,
        lease_ttl=2,
        drain_quiet=1.0,
        drain_limit=30.0,
        recover_limit=60.0,
        time_limit=100.0,
        out=tmp_path / "out",
        workload=WorkloadSettings(
            publishers_per_queue=1, consumers_per_queue=1, rate=40, consumers_from="drain"
        ),
    )
    result = asyncio.run(run(config))
    report, verdict = result.report, result.verdict
    assert report["error"] is None, report["error"]
    q1, q2, q3 = sorted(verdict.per_queue)
    (fault,) = report["faults"]
    assert fault["kind"] == "kill"
    assert fault["role"] == "leader"
    assert sorted(fault["queues"]) == [q1, q3]
    assert fault["recovered"] is not None
    # Confirmed persistent messages survive kill -9 and the restart; transient ones do not.
    assert verdict.per_queue[q1]["lost"] == 0
    assert verdict.per_queue[q2]["lost"] == 0
    assert 0 < verdict.per_queue[q3]["lost"] <= verdict.per_queue[q3]["confirmed"]
    assert verdict.per_queue[q1]["confirmed"] > 0
    assert verdict.unexpected == []
    assert verdict.depths == {q1: 0, q2: 0, q3: 0}
    assert not report["ok"]
    # The leader's death and the first confirm of its queues after it.
    first = {f.queue: f.first_confirm for f in verdict.failovers}[q1]
    assert first is not None
    assert first > config.fault_seconds
    # The report, and every process, proxy and cgroup of the run gone.
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["verdict"]["counts"]["lost"] == verdict.counts["lost"]
    assert "**FAIL**" in (tmp_path / "out" / "summary.md").read_text()
    assert (tmp_path / "out" / "logs" / "node-1.log").exists()
    target = result.target
    assert isinstance(target, LeveretTarget)
    assert all(not node.running() for node in target.nodes)
    assert target.etcd is not None
    assert not target.etcd.running()
    assert not target.workdir.exists()
    assert all(node.disk is None or not node.disk.path.exists() for node in target.nodes)
