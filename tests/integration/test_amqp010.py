"""The AMQP 0-10 front end against a real broker process: the Apache Qpid Python client (Python
2.7, in a subprocess: ``qpid010_client.py2``), Leveret's own 0-10 machine in the client role
over a socket, and pika on the other side of cross-protocol tests.

Needs Python 2.7 (pyenv's is found) and PyPI for the first install of the Qpid packages into
``.cache/qpid-py2`` (``tools.qpid``); without them the Qpid-client tests skip.
"""

from __future__ import annotations

import shutil
import signal
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pytest

from leveret.protocol.amqp010._generated.commands import (
    MessageAccept,
    MessageFlow,
    MessageSubscribe,
    MessageTransfer,
    QueueDeclare,
    QueueQuery,
)
from leveret.protocol.amqp010._generated.structs import DeliveryProperties, QueueQueryResult
from leveret.protocol.amqp010.connection import Connection, ConnectionConfig, Role
from leveret.protocol.amqp010.events import (
    CommandReceived,
    ConnectionOpened,
    Event,
    ResultReceived,
    SessionAttached,
    StartReceived,
)
from leveret.protocol.amqp010.sequence import SequenceSet
from tests.integration.conftest import start_broker
from tests.integration.pika_support import connect_to

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tools.qpid import Py2

    from leveret.protocol.amqp010.session import Session as ProtocolSession
    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only]

CLIENT = Path(__file__).with_name("qpid010_client.py2")


@pytest.fixture(scope="module")
def broker010() -> Iterator[Broker]:
    b = start_broker()
    try:
        yield b
    finally:
        b.stop()


def qpid(py2: Py2, broker: Broker, scenario: str, *args: str) -> dict[str, Any]:
    return py2.run_json(CLIENT, broker.host, str(broker.port), scenario, *args)


def test_send_and_receive(py2: Py2, broker010: Broker, name: str) -> None:
    result = qpid(py2, broker010, "send_receive", name, "20")
    assert result["bodies"] == [f"m{i}" for i in range(20)]
    assert result["left"] == 0


def test_browse_does_not_acquire(py2: Py2, broker010: Broker, name: str) -> None:
    result = qpid(py2, broker010, "browse", name)
    assert result["browsed_a"] == ["b0", "b1", "b2"]
    assert result["browsed_b"] == ["b0", "b1", "b2"]
    assert result["late_a"] == ["b3"]  # a browser sees what arrives later
    assert result["count"] == 4
    assert result["acquired"] == 1
    assert result["count_after_acquire"] == 3


def test_credit_and_window_flow(py2: Py2, broker010: Broker, name: str) -> None:
    result = qpid(py2, broker010, "flow", name)
    assert result == {
        "credit_3": 3,
        "credit_2_more": 2,
        "window_first": 2,
        "window_after_complete": 2,
    }


def test_tx_commit_and_rollback(py2: Py2, broker010: Broker, name: str) -> None:
    result = qpid(py2, broker010, "tx", name)
    assert result == {"after_rollback": 0, "before_commit": 0, "after_commit": 1}


def test_session_exception_codes(py2: Py2, broker010: Broker, name: str) -> None:
    assert qpid(py2, broker010, "error", name)["code"] == 404


def _basic_get(broker: Broker, queue: str) -> Any:
    conn = connect_to(broker.host, broker.port)
    try:
        channel = conn.channel()
        return channel.basic_get(queue, auto_ack=True)
    finally:
        conn.close()


# pure_only (left out of the compiled pass): the store's dtx log across kill -9 (the store
# is not compiled); the 0-10 front end's compiled session is in the tests around them.
@pytest.mark.pure_only
def test_prepared_dtx_branch_survives_kill_9(py2: Py2, name: str) -> None:
    data_dir = tempfile.mkdtemp(prefix="leveret-dtx-")
    broker = start_broker("--data-dir", data_dir)
    try:
        gtrid = "g-" + uuid.uuid4().hex[:8]
        prepared = qpid(py2, broker, "dtx_prepare", name, gtrid)
        assert prepared == {"end": 0, "prepare": 0, "visible": 0, "src_left": 0}
        broker.stop(signal.SIGKILL)
        broker = start_broker("--data-dir", data_dir)
        # In doubt after the crash: neither the publish nor the consumed message is visible
        # to another protocol.
        assert _basic_get(broker, name) == (None, None, None)
        assert _basic_get(broker, name + ".src") == (None, None, None)
        result = qpid(py2, broker, "dtx_recover_commit", name, gtrid)
        assert result["in_doubt"] == [gtrid]
        assert result["visible_before"] == 0
        assert result["src_before"] == 0
        assert result["commit"] == 0
        assert result["visible_after"] == 1
        assert result["src_after"] == 0
        assert result["in_doubt_after"] == 0
        _method, _props, body = _basic_get(broker, name)
        assert body == b"prepared-publish"
    finally:
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.pure_only
@pytest.mark.parametrize(
    "step", ["before-commit-record", "commit-record", "effects-stored", "after-commit"]
)
def test_a_dtx_commit_killed_at_each_step_applies_once(py2: Py2, name: str, step: str) -> None:
    """kill -9 at each step of a two-phase commit (store/dtx_log.py): after the restart the
    publish is there exactly once and the consumed message is gone, with the branch in doubt
    only when the decision was not yet on disk."""
    data_dir = tempfile.mkdtemp(prefix="leveret-dtx-")
    hook = {} if step == "after-commit" else {"LEVERET_TEST_DTX_CRASH": step}
    broker = start_broker("--data-dir", data_dir, env=hook)
    try:
        gtrid = "g-" + uuid.uuid4().hex[:8]
        assert qpid(py2, broker, "dtx_prepare", name, gtrid)["prepare"] == 0
        committed = qpid(py2, broker, "dtx_commit", gtrid)
        if step == "after-commit":
            assert committed == {"commit": 0}
            broker.stop(signal.SIGKILL)
        else:
            assert "died" in committed
            assert broker.process is not None
            assert broker.process.wait(15) == -signal.SIGKILL
            broker.stop()
        broker = start_broker("--data-dir", data_dir)
        result = qpid(py2, broker, "dtx_recover_commit", name, gtrid)
        in_doubt = step == "before-commit-record"
        assert result["in_doubt"] == ([gtrid] if in_doubt else [])
        assert result["visible_before"] == (0 if in_doubt else 1)
        assert result["src_before"] == 0
        assert result["in_doubt_after"] == 0
        assert result["visible_after"] == 1
        # Exactly once, seen from 0-9-1; the consumed message stays consumed.
        assert _basic_get(broker, name)[2] == b"prepared-publish"
        assert _basic_get(broker, name) == (None, None, None)
        assert _basic_get(broker, name + ".src") == (None, None, None)
        # And once more across a clean restart (the log and the markers were tidied).
        broker.stop()
        broker = start_broker("--data-dir", data_dir)
        assert _basic_get(broker, name) == (None, None, None)
        assert qpid(py2, broker, "dtx_recover_commit", name, gtrid)["in_doubt"] == []
    finally:
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def test_qpid_sender_to_pika_receiver(py2: Py2, broker010: Broker, name: str) -> None:
    conn = connect_to(broker010.host, broker010.port)
    try:
        channel = conn.channel()
        channel.queue_declare(name, exclusive=True)
        channel.queue_bind(name, "amq.direct", routing_key=name)
        sent = qpid(py2, broker010, "send_props", "amq.direct", name)
        method, props, body = _poll_get(channel, name)
    finally:
        conn.close()
    assert body == b"cross-protocol"
    assert method.exchange == "amq.direct"
    assert method.routing_key == name
    assert props.content_type == "text/plain"
    assert props.content_encoding == "utf-8"
    assert props.priority == 7
    assert props.delivery_mode == 2
    assert props.expiration == "60000"
    assert props.message_id == sent["message_id"]
    assert props.correlation_id == "corr-1"
    assert props.reply_to == "amq.direct/replies"
    assert props.user_id == "guest"
    assert props.app_id == "qpid-app"
    assert props.headers == {"s": "text", "i": 42, "b": True}


def _poll_get(channel: Any, queue: str) -> tuple[Any, Any, bytes]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return method, props, body
        time.sleep(0.05)
    raise AssertionError(f"nothing arrived in {queue}")


def test_pika_sender_to_qpid_receiver(py2: Py2, broker010: Broker, name: str) -> None:
    message_id = str(uuid.uuid4())
    conn = connect_to(broker010.host, broker010.port)
    try:
        channel = conn.channel()
        channel.queue_declare(name, auto_delete=False)
        channel.basic_publish(
            "",
            name,
            b"from-pika",
            pika.BasicProperties(
                content_type="application/json",
                content_encoding="gzip",
                headers={"k": "v", "n": 7},
                delivery_mode=2,
                priority=3,
                correlation_id="c-9",
                reply_to="reply-queue",
                expiration="30000",
                message_id=message_id,
                timestamp=1700000000,
                type="order.created",
                user_id="guest",
                app_id="pika-app",
            ),
        )
        result = qpid(py2, broker010, "receive_props", name)
        channel.queue_delete(name)
    finally:
        conn.close()
    assert result["body"] == "from-pika"
    props = result["props"]
    assert props["content_type"] == "application/json"
    assert props["content_encoding"] == "gzip"
    assert props["delivery_mode"] == 2
    assert props["priority"] == 3
    assert props["correlation_id"] == "c-9"
    assert props["reply_to"] == {"exchange": "", "routing_key": "reply-queue"}
    assert props["ttl"] == 30000
    assert props["message_id"] == message_id
    assert props["timestamp"] == 1700000000
    assert props["user_id"] == "guest"
    assert props["app_id"] == "pika-app"
    assert props["routing_key"] == name
    assert props["exchange"] == ""
    assert props["application_headers"] == {
        "k": "v",
        "n": 7,
        "x-amqp-0-9-1-type": "order.created",
    }


# -- Leveret's own 0-10 machine in the client role ---------------------------------------------


class Client010:
    """A blocking 0-10 client on ``protocol/amqp010``'s machine (client role)."""

    def __init__(self, broker: Broker, session: ProtocolSession | None = None) -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=10)
        self.conn = Connection(Role.CLIENT, ConnectionConfig(virtual_host="/"))
        self.events: list[Event] = []
        self.conn.initiate()
        self.wait(lambda: any(isinstance(e, StartReceived) for e in self.events))
        self.conn.start_ok("PLAIN", b"\0guest\0guest")
        self.wait(lambda: any(isinstance(e, ConnectionOpened) for e in self.events))
        name = session.name if session is not None else b"client-" + uuid.uuid4().hex.encode()
        self.session = self.conn.attach(1, name, session=session)
        self.conn.request_timeout(1, 30)
        self.wait(lambda: any(isinstance(e, SessionAttached) for e in self.events))

    def wait(self, until: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            out = self.conn.data_to_send()
            if out:
                self.sock.sendall(out)
            if until():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; events: {self.events}")
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError("connection closed")
            self.events += self.conn.receive_data(data, time.monotonic())

    def result(self, command: Any) -> Any:
        command_id = self.conn.send_command(1, command, sync=True)
        self.wait(
            lambda: any(
                isinstance(e, ResultReceived) and e.command_id == command_id for e in self.events
            )
        )
        return next(
            e.value
            for e in self.events
            if isinstance(e, ResultReceived) and e.command_id == command_id
        )

    def transfers(self) -> list[CommandReceived]:
        return [
            e
            for e in self.events
            if isinstance(e, CommandReceived) and isinstance(e.command, MessageTransfer)
        ]

    def close(self) -> None:
        self.sock.close()


def test_own_client_role_and_session_resume(broker010: Broker, name: str) -> None:
    client = Client010(broker010)
    client.conn.send_command(1, QueueDeclare(queue=name))
    for i in range(3):
        client.conn.send_command(
            1,
            MessageTransfer(destination="", accept_mode=1, acquire_mode=0),
            header=[DeliveryProperties(routing_key=name)],
            body=f"r{i}".encode(),
        )
    client.conn.send_command(
        1, MessageSubscribe(queue=name, destination="d", accept_mode=0, acquire_mode=0)
    )
    client.conn.send_command(1, MessageFlow(destination="d", unit=1, value=0xFFFFFFFF))
    client.conn.send_command(1, MessageFlow(destination="d", unit=0, value=2))
    client.wait(lambda: len(client.transfers()) == 2)
    assert [t.body for t in client.transfers()] == [b"r0", b"r1"]
    # Drop the connection without a word, then resume the session on a new one: the
    # subscription and its unaccepted transfers are still the session's.
    session = client.session
    client.close()
    resumed = Client010(broker010, session=session)
    resumed.conn.send_command(1, MessageFlow(destination="d", unit=0, value=1))
    resumed.wait(lambda: any(t.body == b"r2" for t in resumed.transfers()))
    ids = SequenceSet()
    for t in resumed.transfers():
        ids.add(t.command_id)
    first_ids = [t.command_id for t in client.transfers()]
    for command_id in first_ids:
        ids.add(command_id)
    resumed.conn.send_command(1, MessageAccept(transfers=ids))
    query = resumed.result(QueueQuery(queue=name))
    assert isinstance(query, QueueQueryResult)
    assert query.message_count == 0
    resumed.close()
