"""``rabbitmq-queues``' verbs for quorum queues through the real ``leveret ctl`` against three
real nodes on one etcd: ``add_member`` (the new member catches up from the leader and joins
the in-sync set), ``delete_member`` (its copy's file goes; removing the leader hands the
queue to an in-sync member with every confirmed message), ``quorum_status``, ``grow``,
``shrink``, and the bad input each refuses with a message and a nonzero exit."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import time
from typing import TYPE_CHECKING, Any

import pytest
from rstream import AMQPMessage, Producer

from leveret.cluster.keys import encode
from tests.cluster import nodes
from tests.cluster.test_replicated_queues import (  # noqa: F401 (the fixture)
    NAMES,
    connect,
    publish,
    queue_info,
    three_nodes,
)
from tests.cluster.test_replicated_streams import consume_all
from tests.integration.ctl_support import ctl, new_data_dir, ok, start
from tests.integration.test_stream_protocol import stream_port_of

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from pathlib import Path

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


def status(node: Node, queue: str) -> dict[str, dict[str, Any]]:
    """``quorum_status`` as JSON, by member."""
    out = ok(node.data_dir, "quorum_status", queue, "--formatter", "json")
    return {row["node"]: row for row in json.loads(out)}


def members(node: Node, queue: str) -> list[str]:
    return list(queue_info(node, queue).get("members") or [])


def refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def copy_file(node: Node, queue: str, vhost: str = "/") -> Path:
    """Where ``node`` keeps its copy of a queue it follows (``cluster/replication.py``)."""
    digest = hashlib.sha256(encode([vhost, queue])).hexdigest()[:32]
    return node.data_dir / "replicas" / f"{digest}.log"


def logs(*among: Node) -> str:
    """The nodes' cluster log lines (a failure's message)."""
    return "\n".join(
        f"--- {n.name}\n"
        + "\n".join(x for x in n.broker.log_text().splitlines() if "leveret.cluster" in x)
        for n in among
    )


def rows(out: str) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in json.loads(out)}


def drain(node: Node, queue: str, expected: set[bytes]) -> set[bytes]:
    conn = connect(node)
    ch = conn.channel()
    got: set[bytes] = set()
    deadline = time.monotonic() + 15
    while not expected <= got and time.monotonic() < deadline:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.05)
            continue
        got.add(body)
    conn.close()
    return got


def test_members_change_and_confirmed_messages_follow(
    etcd_server: EtcdServer,
    three_nodes: tuple[str, list[Node]],  # noqa: F811
) -> None:
    prefix, (a, b, c) = three_nodes
    conn = connect(a)
    setup = conn.channel()
    setup.queue_declare(
        "q1",
        durable=True,
        arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": 2},
    )
    setup.queue_declare("q3", durable=True, arguments={"x-queue-type": "quorum"})
    setup.queue_declare("classic", durable=True)
    ch = conn.channel()
    ch.confirm_delivery()
    first = [f"one-{i}".encode() for i in range(30)]
    third = [f"three-{i}".encode() for i in range(10)]
    for body in first:
        assert publish(ch, "q1", body)
    for body in third:
        assert publish(ch, "q3", body)
    conn.close()
    nodes.eventually(lambda: members(c, "q1") == ["a@test", "b@test"], timeout=10)
    nodes.eventually(lambda: all(r["in_sync"] for r in status(a, "q3").values()), timeout=10)

    # Bad input: a clear message and a nonzero exit, never a traceback.
    refused(ctl(a.data_dir, "add_member", "nope", "c@test"), "does not exist")
    refused(ctl(a.data_dir, "add_member", "classic", "c@test"), "classic", "quorum")
    refused(ctl(a.data_dir, "add_member", "q1", "z@test"), "z@test", "not a member")
    refused(ctl(a.data_dir, "add_member", "q1", "b@test"), "already a member")
    refused(ctl(a.data_dir, "delete_member", "q1", "c@test"), "not a member of queue")
    refused(ctl(a.data_dir, "delete_member", "-p", "nope", "q1", "c@test"), "does not exist")
    refused(ctl(a.data_dir, "quorum_status", "classic"), "classic")
    refused(ctl(a.data_dir, "grow", "z@test", "all"), "z@test")
    refused(ctl(a.data_dir, "grow", "c@test", "all", "--queue-pattern", "("), "regex")
    assert ctl(a.data_dir, "grow", "c@test", "some").returncode == 64

    # add_member: c gets the log from the leader and joins the in-sync set.
    out = ok(a.data_dir, "add_member", "q1", "c@test")
    assert "Adding a replica for queue q1 on node c@test" in out
    nodes.eventually(lambda: all(r["in_sync"] for r in status(a, "q1").values()), timeout=10)
    shown = status(a, "q1")
    assert list(shown) == list(NAMES)
    assert shown["a@test"]["role"] == "leader"
    assert {r["log_offset"] for r in shown.values()} == {shown["a@test"]["committed_offset"]}
    assert shown["a@test"]["log_offset"] >= len(first)
    table = ok(a.data_dir, "quorum_status", "q1", "-q")
    assert table.splitlines()[0].split("\t")[:4] == ["node", "role", "running", "in_sync"]
    assert len(table.splitlines()) == 4
    # A follower's node knows its own copy's offset.
    assert status(c, "q1")["c@test"]["log_offset"] == shown["a@test"]["log_offset"]

    # delete_member of the original follower: its copy's file goes from its disk.
    copy = copy_file(b, "q1")
    assert copy.exists()
    ok(b.data_dir, "delete_member", "q1", "b@test")
    nodes.eventually(lambda: members(b, "q1") == ["a@test", "c@test"], timeout=10)
    nodes.eventually(lambda: not copy.exists(), timeout=10)
    assert copy_file(b, "q3").exists()

    # delete_member of the leader of q3 (three members): b, in sync, takes over with every
    # confirmed message; a's copy is no longer the queue.
    ok(c.data_dir, "delete_member", "q3", "a@test")
    nodes.eventually(lambda: queue_info(c, "q3").get("leader") == "b@test", timeout=10)
    assert members(a, "q3") == ["b@test", "c@test"]
    assert drain(c, "q3", set(third)) == set(third), logs(a, b, c)

    # The leader's node killed: the added member c takes over q1 with every confirmed one.
    a.broker.stop(signal.SIGKILL)
    nodes.eventually(lambda: status(b, "q1")["c@test"]["role"] == "leader", timeout=20)
    assert drain(b, "q1", set(first)) == set(first), logs(b, c)
    nodes.eventually(lambda: not status(b, "q1")["a@test"]["running"], timeout=10)
    refused(ctl(b.data_dir, "add_member", "q3", "a@test"), "not running")
    refused(ctl(b.data_dir, "grow", "a@test", "all"), "not running")

    # shrink: a (down) leaves q1 (c alone: a queue of one node again) and leaves nothing
    # else; grow b even skips q1 (one member), grow b all adds it back.
    out = ok(b.data_dir, "shrink", "a@test", "--formatter", "json")
    assert rows(out) == {"q1": {"vhost": "/", "name": "q1", "size": 1, "result": "ok"}}
    assert ok(b.data_dir, "shrink", "a@test", "--formatter", "json").strip() == "[]"
    assert json.loads(ok(b.data_dir, "grow", "b@test", "even", "--formatter", "json")) == []
    out = ok(b.data_dir, "grow", "b@test", "all", "--queue-pattern", "^q1$", "--formatter", "json")
    assert rows(out)["q1"]["size"] == 2
    assert rows(out)["q1"]["result"] == "ok"
    nodes.eventually(lambda: all(r["in_sync"] for r in status(c, "q1").values()), timeout=10)
    conn = connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    assert publish(ch, "q1", b"after")
    conn.close()
    # The leader of a queue of two removed: the other member takes it over alone.
    ok(b.data_dir, "delete_member", "q1", "c@test")
    nodes.eventually(lambda: list(status(b, "q1")) == ["b@test"], timeout=10)
    assert status(b, "q1")["b@test"]["role"] == "leader"
    assert drain(c, "q1", {b"after"}) == {b"after"}, logs(b, c)
    # The last member is not removed: shrink reports it, --errors-only lists only errors.
    ok(b.data_dir, "delete_member", "q3", "c@test")
    refused(ctl(b.data_dir, "delete_member", "q3", "b@test"), "last member")
    out = ok(b.data_dir, "shrink", "b@test", "--errors-only", "--formatter", "json")
    assert list(rows(out)) == ["q1", "q3"]
    assert all("last member" in row["result"] for row in rows(out).values())
    assert ok(b.data_dir, "shrink", "c@test", "--formatter", "json").strip() == "[]"

    # a comes back: a copy of a queue it was removed from while down goes from its disk
    # (one planted here), and its own old messages of q1 (it led it) are not the queue.
    stale = copy_file(a, "q1")
    stale.parent.mkdir(exist_ok=True)
    stale.write_bytes(b"stale")
    a2 = nodes.start_node(etcd_server, prefix, "a@test", a.data_dir)
    three_nodes[1][0] = a2
    assert not stale.exists()
    conn = connect(a2)
    ch = conn.channel()
    ch.confirm_delivery()
    assert publish(ch, "q1", b"back")
    conn.close()
    assert drain(a2, "q1", {b"back"}) == {b"back"}


def test_a_single_node_says_it_is_not_in_a_cluster() -> None:
    data_dir = new_data_dir()
    broker = start(data_dir)
    try:
        for args in (
            ("add_member", "q", "b@test"),
            ("shrink", "b@test"),
            ("quorum_status", "q"),
            ("add_replica", "s", "b@test"),
            ("stream_status", "s"),
        ):
            refused(ctl(data_dir, *args), "not part of a cluster")
    finally:
        broker.stop()


def stream_status(node: Node, stream: str) -> dict[str, dict[str, Any]]:
    out = ok(node.data_dir, "stream_status", stream, "--formatter", "json")
    return {row["node"]: row for row in json.loads(out)}


def stream_copies(node: Node, stream: str, vhost: str = "/") -> list[Path]:
    """``node``'s copies of a stream it follows (``<digest>.<generation>`` directories)."""
    digest = hashlib.sha256(encode([vhost, stream])).hexdigest()[:32]
    return sorted((node.data_dir / "replicas" / "streams").glob(f"{digest}.*"))


async def _publish_across_a_handover(port: int, hand_over: Callable[[], None]) -> list[bytes]:
    """Confirmed stream-protocol publishes before and after ``hand_over`` (the stream's
    leader changes), through one rstream producer connected to the old leader's node."""
    confirmed: list[bytes] = []
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as p:
        for i in range(5):
            await p.send_wait("st", AMQPMessage(body=b"before-%d" % i), timeout=10)
            confirmed.append(b"before-%d" % i)
        await asyncio.get_running_loop().run_in_executor(None, hand_over)
        deadline = time.monotonic() + 20
        attempt = 0
        while len(confirmed) < 10 and time.monotonic() < deadline:
            attempt += 1
            body = b"after-%d" % attempt
            try:
                await p.send_wait("st", AMQPMessage(body=body), timeout=3)
                confirmed.append(body)
            except Exception:
                await asyncio.sleep(0.2)
    return confirmed


def test_stream_replicas_are_added_and_removed_with_rabbitmq_streams_verbs(
    three_nodes: tuple[str, list[Node]],  # noqa: F811
) -> None:
    _prefix, (a, b, c) = three_nodes
    conn = connect(a)
    setup = conn.channel()
    setup.queue_declare(
        "st", durable=True, arguments={"x-queue-type": "stream", "x-initial-cluster-size": 2}
    )
    setup.queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum"})
    ch = conn.channel()
    ch.confirm_delivery()
    bodies = [f"s-{i}".encode() for i in range(50)]
    for body in bodies:
        assert publish(ch, "st", body)
    conn.close()
    nodes.eventually(lambda: len(members(c, "st")) == 2, timeout=10)
    other = next(n for n in (b, c) if n.name not in members(c, "st"))
    follower = b if other is c else c

    refused(ctl(a.data_dir, "add_replica", "qq", other.name), "quorum", "only streams")
    refused(ctl(a.data_dir, "add_member", "st", other.name), "stream", "only quorum")
    refused(ctl(a.data_dir, "add_replica", "st", follower.name), "already a member")
    refused(ctl(a.data_dir, "stream_status", "qq"), "only streams")

    # add_replica: the new member is sent the stream (a reset, then the leader's files) and
    # joins the in-sync set; its node knows its copy's offset.
    out = ok(a.data_dir, "add_replica", "st", other.name)
    assert f"Adding a replica for stream st on node {other.name}" in out
    nodes.eventually(lambda: len(stream_status(a, "st")) == 3, timeout=10)
    nodes.eventually(lambda: all(r["in_sync"] for r in stream_status(a, "st").values()), 15)
    shown = stream_status(a, "st")
    assert shown["a@test"]["role"] == "writer"
    assert {shown[n.name]["role"] for n in (b, c)} == {"replica"}
    assert {r["log_offset"] for r in shown.values()} == {len(bodies)}
    assert stream_status(other, "st")[other.name]["log_offset"] == len(bodies)
    assert stream_copies(other, "st")

    # delete_replica of the writer, while an rstream producer publishes on its node: an
    # in-sync replica takes the stream over with every confirmed message at its offset;
    # the producer is told (metadata_update, as RabbitMQ tells it) and publishes on at the
    # new writer; a's own log is no longer the stream.
    def hand_over() -> None:
        ok(other.data_dir, "delete_replica", "st", "a@test")
        nodes.eventually(lambda: queue_info(c, "st").get("leader") in (b.name, c.name), 10)

    confirmed = asyncio.run(_publish_across_a_handover(stream_port_of(a.broker), hand_over))
    assert len(confirmed) == 10, logs(a, b, c)
    assert sorted(members(a, "st")) == sorted((b.name, c.name))
    got = consume_all(a, "st", confirmed[-1])
    assert got[: len(bodies) + 5] == list(enumerate(bodies + confirmed[:5])), logs(a, b, c)
    kept = iter(body for _offset, body in got)
    assert all(any(body == seen for seen in kept) for body in confirmed[5:]), got
    bodies = [body for _offset, body in got]

    # delete_replica of a replica: its copy goes from its disk; the last member stays.
    replica = b if queue_info(c, "st")["leader"] == c.name else c
    writer = c if replica is b else b
    ok(a.data_dir, "delete_replica", "st", replica.name)
    nodes.eventually(lambda: members(a, "st") in ([], [writer.name]), timeout=10)
    nodes.eventually(lambda: not stream_copies(replica, "st"), timeout=10)
    refused(ctl(a.data_dir, "delete_replica", "st", writer.name), "last member")
    assert consume_all(replica, "st", bodies[-1]) == list(enumerate(bodies)), logs(a, b, c)
