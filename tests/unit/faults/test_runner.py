"""The fault harness's plan of cycles (``tools/faults/runner.py``'s ``schedule``) and its
command line (``python -m tools.faults``)."""

from __future__ import annotations

import pytest
from tools.faults.__main__ import config_from, parser
from tools.faults.runner import schedule

# Left out of the compiled pass (scripts/test): the harness is not compiled.
pytestmark = pytest.mark.pure_only


def test_alternate_victims_take_every_leader_then_other_nodes() -> None:
    plan = schedule(8, ["kill", "pause"], 2, "alternate", 3)
    assert plan == [
        ("kill", 0, True),
        ("pause", 0, True),
        ("kill", 1, True),
        ("pause", 1, True),
        ("kill", 0, False),
        ("pause", 0, False),
        ("kill", 1, False),
        ("pause", 1, False),
    ]


def test_victims_can_be_leaders_or_followers_only() -> None:
    assert {on for _, _, on in schedule(6, ["kill"], 1, "leader", 3)} == {True}
    assert {on for _, _, on in schedule(6, ["kill"], 1, "follower", 3)} == {False}
    # One node has no follower: every fault is its.
    assert {on for _, _, on in schedule(4, ["pause"], 1, "follower", 1)} == {True}


def test_the_command_line_makes_a_run_config() -> None:
    args = parser().parse_args(
        ["--target", "rabbitmq", "--fault", "kill,partition", "--cycles", "4",
         "--publishers", "3", "--consumers-from", "drain"]
    )  # fmt: skip
    config = config_from(args)
    assert config.target == "rabbitmq"
    assert config.faults == ("kill", "partition")
    assert config.workload.publishers_per_queue == 3
    assert config.workload.consumers_from == "drain"
    assert config.pause_length() == max(config.fault_seconds, 1.5 * config.lease_ttl + 1)
    with pytest.raises(SystemExit):
        parser().parse_args(["--fault", "kill,flood"])


def test_a_streams_clients_are_chosen_by_protocol() -> None:
    config = config_from(parser().parse_args([]))
    assert config.workload.stream_readers is None  # both where the target serves them
    assert config.workload.stream_publishers == ("amqp",)
    args = parser().parse_args(
        ["--queue-type", "stream", "--stream-readers", "amqp,rstream",
         "--stream-publishers", "rstream", "--store-every", "20"]
    )  # fmt: skip
    workload = config_from(args).workload
    assert workload.stream_readers == ("amqp", "rstream")
    assert workload.stream_publishers == ("rstream",)
    assert workload.store_every == 20
    with pytest.raises(SystemExit):
        parser().parse_args(["--stream-readers", "amqp,mqtt"])
