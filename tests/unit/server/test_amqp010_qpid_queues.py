"""The 0-10 front end with Qpid's queue arguments and session habits, in memory: a session
attached and detached in one read, an exclusive queue with ``qpid.auto_delete_timeout``,
and limits Qpid refuses."""

from __future__ import annotations

from leveret.protocol.amqp010._generated import commands as c
from leveret.protocol.amqp010.events import SessionDetached
from tests.unit.server.amqp010_support import Client010


def test_a_session_attached_and_detached_in_one_read_is_no_error() -> None:
    client = Client010().open()
    client.conn.attach(2, b"brief")
    client.conn.detach(2)  # sent before the server has answered the attach
    client.pump()
    assert any(isinstance(e, SessionDetached) and e.channel == 2 for e in client.events)
    assert client.close_event() is None
    client.send(c.QueueDeclare(queue="still-fine"))  # the connection goes on
    assert "still-fine" in client.broker.vhosts["/"].queues


def test_an_exclusive_queue_with_a_timeout_outlives_its_session_that_long() -> None:
    owner = Client010().open()
    owner.send(
        c.QueueDeclare(
            queue="timed",
            exclusive=True,
            auto_delete=True,
            arguments={"qpid.auto_delete_timeout": 3},
        )
    )
    vhost = owner.broker.vhosts["/"]
    vhost.timers.now = 100.0
    owner.server.connection_lost()
    assert "timed" in vhost.queues
    vhost.timers.expire(102.0)
    assert "timed" in vhost.queues
    vhost.timers.expire(103.0)
    assert "timed" not in vhost.queues


def test_limits_qpid_refuses_fail_the_declare() -> None:
    client = Client010().open()
    client.send(c.QueueDeclare(queue="bad", arguments={"qpid.max_count": "2.5"}))
    exception = client.exception()
    assert exception is not None
    assert exception.error_code == 406
    assert "bad" not in client.broker.vhosts["/"].queues
