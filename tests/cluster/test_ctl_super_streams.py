"""``leveret ctl add_super_stream`` / ``delete_super_stream`` on a cluster go to etcd before
they answer, as the stream protocol's create_super_stream / delete_super_stream do: asked
through both nodes at once, one is done and the other gets the error one node gives for a
super stream that exists (exit 70) or is missing (exit 65), and etcd holds what the winner
wrote (before, each node's model made or deleted it at once, both answered OK and the
journal wrote it behind, a mix in etcd).

Made deterministic as ``test_shared_deletions.py`` is: etcd is stopped (SIGSTOP) while the
verbs are asked, so an answer that does not wait for etcd comes meanwhile. The verbs are
asked as ``leveret ctl`` asks them (its parser, its request on the control socket, its
error with the exit code it returns), from threads of the test: a ``leveret ctl`` process
might not have started within the pause."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import TYPE_CHECKING

import pytest

from leveret.cli.ctl import CtlError, _request_args, control_socket, parser, request
from tests.cluster import nodes
from tests.cluster.test_shared_deletions import PAUSE, _stopped, _super_stream_command
from tests.integration.test_stream_protocol import stream_port_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


@pytest.fixture(scope="module")
def two(etcd_server: EtcdServer) -> Iterator[tuple[Node, Node]]:
    yield from nodes.two_nodes(etcd_server, f"/leveret-test/ctlsuper-{uuid.uuid4().hex[:8]}/")


def _ctl(node: Node, *argv: str) -> object:
    """``leveret ctl ARGV`` against ``node``: its result, or the CtlError it exits with."""
    parsed = parser().parse_args(list(argv))
    try:
        return request(
            control_socket(node.data_dir), parsed.verb, _request_args(parsed.verb, parsed), 30
        )
    except CtlError as exc:
        return exc


def _at_once(
    etcd: EtcdServer, asks: list[tuple[Node, tuple[str, ...]]]
) -> tuple[bool, list[object]]:
    """Each ``(node, argv)`` asked at once while etcd is stopped for ``PAUSE`` seconds:
    whether any was answered while it was stopped, and what each answered."""
    answers: list[object] = [None] * len(asks)
    answered = [threading.Event() for _ in asks]

    def ask(index: int, node: Node, argv: tuple[str, ...]) -> None:
        answers[index] = _ctl(node, *argv)
        answered[index].set()

    threads = [
        threading.Thread(target=ask, args=(i, node, argv)) for i, (node, argv) in enumerate(asks)
    ]
    with _stopped(etcd.process):
        for thread in threads:
            thread.start()
        time.sleep(PAUSE)
        early = any(event.is_set() for event in answered)
    for thread in threads:
        thread.join(30)
    assert all(event.is_set() for event in answered)
    return early, answers


def _partitions(node: Node, name: str) -> list[str]:
    port = stream_port_of(node.broker)
    found = asyncio.run(_super_stream_command(port, lambda c: c.partitions(name)))
    return list(found)


def _in_etcd(etcd: EtcdServer, node: Node, name: str) -> tuple[int, int]:
    """How many exchanges ``name`` and partition records ``name-*`` etcd holds."""
    exchanges = nodes.etcd_values(etcd, f"{node.prefix}entities/exchanges/%2F/{name}")
    records = nodes.etcd_values(etcd, f"{node.prefix}entities/queues/%2F/{name}-", prefix=True)
    return len(exchanges), len(records)


def test_add_super_stream_through_both_nodes_at_once_makes_it_once(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    name = f"ctladd-{uuid.uuid4().hex[:6]}"
    early, answers = _at_once(
        etcd_server,
        [
            (a, ("add_super_stream", name, "--partitions", "2")),
            (b, ("add_super_stream", name, "--partitions", "3")),
        ],
    )
    assert early is False  # not answered before etcd had it
    assert answers.count(None) == 1, answers  # one made it
    refused = next(x for x in answers if x is not None)
    assert isinstance(refused, CtlError)
    # What one node answers for a super stream that exists (``Error: ...``, exit 70).
    assert (str(refused), refused.code) == (f"there is already an exchange named {name}", 70)
    count = 2 if answers[0] is None else 3
    streams = [f"{name}-{i}" for i in range(count)]
    # The winner's exchange and partitions only, and each node lists them; the winner's
    # own node had them when it answered.
    assert _in_etcd(etcd_server, a, name) == (1, count)
    winner = a if answers[0] is None else b
    assert _partitions(winner, name) == streams
    other = b if winner is a else a
    nodes.eventually(lambda: _partitions(other, name) == streams)
    assert _ctl(a, "delete_super_stream", name) is None


def test_delete_super_stream_through_both_nodes_at_once_deletes_it_once(
    two: tuple[Node, Node], etcd_server: EtcdServer
) -> None:
    a, b = two
    name = f"ctldel-{uuid.uuid4().hex[:6]}"
    streams = [f"{name}-0", f"{name}-1"]
    assert _ctl(a, "add_super_stream", name, "--partitions", "2") is None
    assert _in_etcd(etcd_server, a, name) == (1, 2)  # in etcd once answered
    nodes.eventually(lambda: _partitions(b, name) == streams)
    early, answers = _at_once(
        etcd_server, [(a, ("delete_super_stream", name)), (b, ("delete_super_stream", name))]
    )
    assert early is False
    assert answers.count(None) == 1, answers
    refused = next(x for x in answers if x is not None)
    assert isinstance(refused, CtlError)
    # What one node answers for a super stream that is not there (exit 65).
    assert (str(refused), refused.code) == (f"Super stream '{name}' does not exist", 65)
    assert _in_etcd(etcd_server, a, name) == (0, 0)
    nodes.eventually(lambda: _partitions(a, name) == [] and _partitions(b, name) == [])
