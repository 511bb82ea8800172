"""A 0-10 exclusive queue on a cluster node is in the cluster's records, as a 0-9-1 one is
(``test_shared_declarations.py``): qpid.messaging's receiver on node a whose address
declares it exclusive (x-declare) finds its record in etcd, naming a's session as its
owner, once it is linked; nodes b and c list it; every other session and channel, on b
and c as on a itself (what one node answers), is refused alike (qpid-python's
declare, subscribe, bind, purge and delete: resource-locked; qpid.messaging's receiver;
pika's: 405); a message published on c to the binding its address made reaches it; and
it leaves etcd and every node when its session ends (closed, or detached past its
timeout: the owner is the session, which keeps the queue while it is detached and resumed),
or when its node is killed (once its lease expired); one that outlives its session for
Qpid's ``qpid.auto_delete_timeout`` is anyone's on every node meanwhile. Before, its
record was nowhere: b and c answered 404, and a queue of that name declared on b was
another queue."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest
import requests
from tools.qpid import Py2, ensure

from leveret.protocol.amqp010._generated.commands import QueueDeclare, QueueQuery
from leveret.protocol.amqp010._generated.structs import QueueQueryResult
from tests.cluster import nodes
from tests.integration.ctl_support import ok
from tests.integration.test_amqp010 import Client010

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

SCRIPTS = Path(__file__).parents[1] / "integration"
MESSAGING = SCRIPTS / "qpid_messaging_client.py2"
LOW_LEVEL = SCRIPTS / "qpid010_client.py2"


@pytest.fixture(scope="module")
def py2() -> Py2:
    found = ensure()
    if found is None:
        pytest.skip("Python 2.7 with qpid-python is not available")
    return found


@pytest.fixture(scope="module")
def three(etcd_server: EtcdServer) -> Iterator[list[Node]]:
    yield from nodes.three_nodes(etcd_server, "excl010")


class Holder:
    """qpid.messaging's receiver that declared the exclusive queue, in its own process."""

    def __init__(self, py2: Py2, node: Node, queue: str) -> None:
        self.process = subprocess.Popen(
            [py2.python, str(MESSAGING), "127.0.0.1", str(node.broker.port), "hold", queue],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=py2.env(),
        )
        assert self.line() == {"held": True}, self.process.stderr

    def line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        text = self.process.stdout.readline()
        if not text:
            assert self.process.stderr is not None
            raise AssertionError(f"the holder ended: {self.process.stderr.read()}")
        found: dict[str, Any] = json.loads(text)
        return found

    def fetch(self) -> bytes:
        assert self.process.stdin is not None
        self.process.stdin.write("fetch\n")
        self.process.stdin.flush()
        return base64.b64decode(self.line()["body"])

    def end(self) -> None:
        """Its connection closed, which ends its session."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.line() == {"closed": True}
        self.process.wait(10)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _record(etcd: EtcdServer, node: Node, queue: str) -> list[dict[str, Any]]:
    return nodes.etcd_values(etcd, f"{node.prefix}entities/queues/%2F/{queue}")


def _listed(node: Node, queue: str) -> dict[str, Any] | None:
    return next((q for q in node.get("queues/%2F") if q["name"] == queue), None)


def _unlisted(node: Node, queue: str) -> bool:
    return _listed(node, queue) is None


def _pika_uses(node: Node, queue: str) -> dict[str, int | None]:
    """What each use of ``queue`` gets through a 0-9-1 channel on ``node``: the channel's
    reply code, or None when it was answered."""
    uses: dict[str, Callable[[Any], object]] = {
        "passive": lambda ch: ch.queue_declare(queue, passive=True),
        "declare": lambda ch: ch.queue_declare(queue, auto_delete=True),
        "declare_exclusive": lambda ch: ch.queue_declare(queue, exclusive=True),
        "consume": lambda ch: ch.basic_consume(queue, lambda *_: None),
        "bind": lambda ch: ch.queue_bind(queue, "amq.fanout"),
        "purge": lambda ch: ch.queue_purge(queue),
        "delete": lambda ch: ch.queue_delete(queue),
    }
    got: dict[str, int | None] = {}
    conn = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", node.broker.port, heartbeat=0)
    )
    try:
        for use, run in uses.items():
            try:
                run(conn.channel())
                got[use] = None
            except pika.exceptions.ChannelClosedByBroker as exc:
                got[use] = int(exc.reply_code)
    finally:
        if conn.is_open:
            conn.close()
    return got


def test_a_0_10_exclusive_queue_is_every_nodes_and_its_sessions_alone(
    three: list[Node], etcd_server: EtcdServer, py2: Py2
) -> None:
    a, b, c = three
    queue = f"excl010-{uuid.uuid4().hex[:8]}"
    holder = Holder(py2, a, queue)
    try:
        # In etcd once the receiver is linked (its declare completed after the write),
        # led by a and owned by a's session.
        [record] = _record(etcd_server, a, queue)
        assert (record["exclusive"], record["leader"]) == (True, a.name)
        assert str(record["owner"]).startswith(f"{a.name}/")
        for node in (b, c):
            listed = nodes.eventually(functools.partial(_listed, node, queue))
            assert (listed["exclusive"], listed["node"]) == (True, a.name)
        rows = json.loads(ok(c.data_dir, "list_queues", "--formatter", "json"))
        assert [r["name"] for r in rows if r["name"] == queue] == [queue]

        # Another session on a gets what one node answers; sessions on b and c the same.
        port = {n.name: str(n.broker.port) for n in three}
        alone = py2.run_json(LOW_LEVEL, "127.0.0.1", port[a.name], "locked", queue)
        assert alone.pop("passive") is None  # Qpid: any session may find it (request/reply)
        assert all(v is not None and v[0] == 405 for v in alone.values()), alone
        claimed = py2.run_json(MESSAGING, "127.0.0.1", port[a.name], "claim", queue)
        assert claimed["error"][0] == "ReceiverError"  # its mapping of resource-locked
        assert str(claimed["error"][1]).endswith("(405)")
        by_pika = _pika_uses(a, queue)
        assert set(by_pika.values()) == {405}, by_pika
        for node in (b, c):
            there = py2.run_json(LOW_LEVEL, "127.0.0.1", port[node.name], "locked", queue)
            assert there.pop("passive") is None
            assert there == alone
            assert py2.run_json(MESSAGING, "127.0.0.1", port[node.name], "claim", queue) == claimed
            assert _pika_uses(node, queue) == by_pika

        # Its binding (the address's x-bindings) is in etcd too: published on c, it arrives.
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", c.broker.port))
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("amq.direct", queue, b"from c", mandatory=True)
        finally:
            conn.close()
        assert holder.fetch() == b"from c"

        holder.end()
        nodes.eventually(lambda: _record(etcd_server, a, queue) == [], timeout=5)
        for node in three:
            nodes.eventually(functools.partial(_unlisted, node, queue), timeout=5)
    finally:
        holder.kill()


def test_a_0_10_exclusive_queue_goes_with_its_killed_node(
    three: list[Node], etcd_server: EtcdServer, py2: Py2
) -> None:
    a, b, _c = three
    d = nodes.start_node(etcd_server, a.prefix, "d@test")
    queue = f"excl010-dead-{uuid.uuid4().hex[:8]}"
    holder = Holder(py2, d, queue)
    try:
        assert _record(etcd_server, d, queue)[0]["leader"] == d.name
        nodes.eventually(lambda: _listed(a, queue))
        d.broker.stop(signal.SIGKILL)
        # Its sessions died with it: the others remove the record once its lease (2 s
        # here) has expired, as they remove a dead node's 0-9-1 exclusive queues.
        nodes.eventually(
            lambda: _record(etcd_server, a, queue) == [], timeout=nodes.LEASE_TTL * 3 + 5
        )
        for node in (a, b):
            nodes.eventually(functools.partial(_unlisted, node, queue), timeout=5)
    finally:
        holder.kill()
        if d.broker.process is not None and d.broker.process.poll() is None:
            d.broker.stop()


def test_a_0_10_exclusive_queue_is_its_sessions_while_the_session_outlives_its_connection(
    three: list[Node], etcd_server: EtcdServer
) -> None:
    """The owner is the session, not its connection: a session detached with a timeout
    (its connection dropped) keeps its exclusive queue, in etcd and refused to b's
    clients, and has it back when resumed on a new connection; once it is detached past
    its timeout it ends, and the queue leaves etcd. (Raw frames: qpid.messaging neither
    asks a session timeout nor resumes a session.)"""
    a, b, _c = three
    queue = f"excl010-detached-{uuid.uuid4().hex[:8]}"
    client = Client010(a.broker)
    client.conn.request_timeout(1, 2)
    client.conn.send_command(1, QueueDeclare(queue=queue, exclusive=True))
    query = client.result(QueueQuery(queue=queue))
    assert isinstance(query, QueueQueryResult)
    assert query.exclusive
    [record] = _record(etcd_server, a, queue)
    session = client.session
    client.close()  # dropped without a word: the session is detached, not ended
    resumed = Client010(a.broker, session=session)
    try:
        resumed.conn.request_timeout(1, 2)
        # Still its own: an exclusive redeclaration is no claim on another's queue.
        resumed.conn.send_command(1, QueueDeclare(queue=queue, exclusive=True))
        assert resumed.result(QueueQuery(queue=queue)).exclusive
        assert _record(etcd_server, a, queue) == [record]
    finally:
        resumed.close()
    assert _record(etcd_server, a, queue) == [record]
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.broker.port))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            conn.channel().queue_declare(queue, passive=True)
        assert refused.value.reply_code == 405
    finally:
        if conn.is_open:
            conn.close()
    # Detached past its 2 s: the session ends, and its exclusive queue goes.
    nodes.eventually(lambda: _record(etcd_server, a, queue) == [], timeout=10)
    nodes.eventually(functools.partial(_unlisted, b, queue), timeout=5)


def _passive_on(node: Node, queue: str) -> int:
    """What a 0-9-1 passive ``queue.declare`` of ``queue`` gets on ``node``: 200 or the
    channel's reply code."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.broker.port))
    try:
        conn.channel().queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return int(exc.reply_code)
    finally:
        if conn.is_open:
            conn.close()
    return 200


def test_a_0_10_exclusive_queue_outliving_its_session_is_anyones_on_every_node(
    three: list[Node], etcd_server: EtcdServer
) -> None:
    """Qpid's ``qpid.auto_delete_timeout``: an exclusive auto-delete queue outlives its
    ended session that long, and any session or channel may use it meanwhile, as its node
    lets them: its record drops the owner, so b serves it too; then it goes. (Raw frames:
    qpid.messaging cannot end a session without closing its connection first, which is
    the same end; the raw client's timeout 0 ends it at once when its socket drops.)"""
    a, b, _c = three
    queue = f"excl010-grace-{uuid.uuid4().hex[:8]}"
    client = Client010(a.broker)
    client.conn.request_timeout(1, 0)
    client.conn.send_command(
        1,
        QueueDeclare(
            queue=queue,
            exclusive=True,
            auto_delete=True,
            arguments={"qpid.auto_delete_timeout": 5},
        ),
    )
    client.result(QueueQuery(queue=queue))
    assert _record(etcd_server, a, queue)[0]["exclusive"] is True
    assert _passive_on(b, queue) == 405
    client.close()  # the session ends with its connection (timeout 0)
    nodes.eventually(lambda: _record(etcd_server, a, queue)[0]["exclusive"] is False, timeout=5)
    assert "owner" not in _record(etcd_server, a, queue)[0]
    assert _passive_on(a, queue) == 200
    nodes.eventually(lambda: _passive_on(b, queue) == 200, timeout=5)
    # Unused for its 5 s, it goes, with its record.
    nodes.eventually(lambda: _record(etcd_server, a, queue) == [], timeout=15)
    nodes.eventually(lambda: _passive_on(b, queue) == 404, timeout=5)


def _revision(etcd: EtcdServer) -> int:
    answer = requests.post(f"{etcd.url}/v3/kv/range", json={"key": "AA=="}, timeout=5).json()
    return int(answer["header"]["revision"])


def _held_since(etcd: EtcdServer, key: str, revision: int) -> bool:
    """Whether etcd held ``key`` at a revision after ``revision`` (it may be gone now)."""
    encoded = base64.b64encode(key.encode()).decode()
    for at in range(revision + 1, _revision(etcd) + 1):
        body = {"key": encoded, "revision": str(at)}
        answer = requests.post(f"{etcd.url}/v3/kv/range", json=body, timeout=5).json()
        if answer.get("kvs"):
            return True
    return False


# A 0-9-1 client that declares an exclusive queue once told to (a line on stdin), in its
# own process so that it can be killed while the declaration waits.
PIKA_DECLARER = """
import sys, pika
conn = pika.BlockingConnection(
    pika.ConnectionParameters("127.0.0.1", int(sys.argv[1]), heartbeat=0))
channel = conn.channel()
print('{"open": true}', flush=True)
sys.stdin.readline()
channel.queue_declare(sys.argv[2], exclusive=True)
"""


@pytest.mark.parametrize("client", ["qpid.messaging", "pika"])
def test_an_exclusive_queue_whose_owner_ends_while_it_is_written_leaves_no_record(
    three: list[Node], etcd_server: EtcdServer, py2: Py2, client: str
) -> None:
    """The owner (qpid.messaging's session, pika's connection) ends while its exclusive
    queue's record is being written (etcd stopped): the front end never makes the queue,
    so the record, written once etcd runs again, goes too. Before, it stayed in etcd and
    on every node (listed, and refusing everyone) until its node restarted."""
    a, b, _c = three
    queue = f"excl-lost-{client}-{uuid.uuid4().hex[:8]}"
    port = str(a.broker.port)
    if client == "pika":
        argv = [sys.executable, "-c", PIKA_DECLARER, port, queue]
        env = None
    else:
        argv = [py2.python, str(MESSAGING), "127.0.0.1", port, "hold", queue, "go"]
        env = py2.env()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        assert process.stdin is not None
        assert json.loads(process.stdout.readline()) == {"open": True}
        assert etcd_server.process is not None
        key = f"{a.prefix}entities/queues/%2F/{queue}"
        before = _revision(etcd_server)
        etcd_server.process.send_signal(signal.SIGSTOP)
        try:
            process.stdin.write("go\n")
            process.stdin.flush()
            time.sleep(0.3)  # its declaration reached a, whose write waits for etcd
            process.kill()
            process.wait(5)
            time.sleep(0.1)  # a saw its connection go: the owner ended
        finally:
            etcd_server.process.send_signal(signal.SIGCONT)
        # The record was written once etcd ran again (a revision since holds it) ...
        nodes.eventually(lambda: _held_since(etcd_server, key, before), timeout=5)
        # ... and goes.
        nodes.eventually(lambda: _record(etcd_server, a, queue) == [], timeout=5)
        assert _unlisted(b, queue)
        assert _unlisted(a, queue)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(5)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
