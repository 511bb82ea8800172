"""Permissions over AMQP 1.0, through real 1.0 clients (Qpid Proton's blocking API and
RabbitMQ's own 1.0 client for the management node): what the permission matrix denies over
0-9-1 (``test_permission_matrix.py``) a user cannot do through 1.0 either — attach as
receiver (read) or sender (write, and a topic exchange's key per message), the anonymous
terminus (each message's ``to``), dynamic and v1 exchange sources (a server-named queue:
configure), the management node's declare / delete / bind / purge, ``user-id``, the vhost
and the connection limit — and what it allows still works. Each refusal is also checked
to have changed nothing an administrator can see.

Set-up, in vhost ``authz10``: user ``p10`` may configure ``^(ok|c)-``, write ``^(ok|w)-``
and read ``^(ok|r)-``, with topic permissions on ``ok-t`` (write ``^{username}\\.``);
``a10`` has ``.*`` and the ``impersonator`` tag; ``n10`` has no permissions there. Leveret
only: RabbitMQ 3.10's 1.0 plugin has neither the v2 addresses nor the management node.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pika
import pytest
from proton import ConnectionException, Message
from proton.utils import BlockingConnection, LinkDetached

from tests.integration.access_support import Definitions, LeveretTarget
from tests.integration.ctl_support import login

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(90)]

V = "authz10"
USERS = {"p10": "pw-p", "a10": "pw-a", "n10": "pw-n"}


@pytest.fixture(scope="module")
def target() -> Iterator[LeveretTarget]:
    made = LeveretTarget()
    made.apply(
        Definitions(
            vhosts=[V],
            users={"p10": ("pw-p", ()), "a10": ("pw-a", ("impersonator",)), "n10": ("pw-n", ())},
            permissions=[
                ("guest", V, ".*", ".*", ".*"),
                ("p10", V, "^(ok|c)-", "^(ok|w)-", "^(ok|r)-"),
                ("a10", V, ".*", ".*", ".*"),
            ],
            topic_permissions=[("p10", V, "ok-t", "^{username}\\.", ".*")],
        )
    )
    conn = login(made.broker, "guest", "guest", V)
    try:
        ch = conn.channel()
        for queue in ("ok-q", "c-q", "w-q", "r-q", "sink-q", "sink-t"):
            ch.queue_declare(queue)
        for exchange in ("ok-x", "c-x", "w-x", "r-x"):
            ch.exchange_declare(exchange, "direct")
        ch.exchange_declare("ok-t", "topic")
        ch.queue_bind("sink-q", "w-x", "k")
        ch.queue_bind("sink-q", "r-x", "k")
        ch.queue_bind("sink-t", "ok-t", "#")
        for queue in ("r-q", "w-q", "c-q"):
            ch.basic_publish("", queue, b"held")
    finally:
        conn.close()
    try:
        yield made
    finally:
        made.close()


def _url(target: LeveretTarget, user: str) -> str:
    b = target.broker
    return f"amqp://{user}:{USERS.get(user, 'guest')}@{b.host}:{b.port}"


def _open(target: LeveretTarget, user: str) -> Any:
    return BlockingConnection(_url(target, user), timeout=10, virtual_host=f"vhost:{V}")


def _admin(target: LeveretTarget) -> Any:
    return login(target.broker, "guest", "guest", V)


def _count(target: LeveretTarget, queue: str) -> int:
    with _admin(target) as conn:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)


def _queue_exists(target: LeveretTarget, queue: str) -> bool:
    with _admin(target) as conn:
        ch = conn.channel()
        try:
            ch.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker:
            return False
        return True


def _rmq_url(target: LeveretTarget, user: str) -> str:
    b = target.broker
    return f"amqp://{user}:{USERS.get(user, 'guest')}@{b.host}:{b.port}/{V}"


def _refused(call: Any) -> str:
    with pytest.raises((LinkDetached, ConnectionException)) as info:
        call()
    return str(info.value)


# -- links ---------------------------------------------------------------------------------


def test_receive_needs_read_on_the_queue(target: LeveretTarget) -> None:
    c = _open(target, "p10")
    try:
        got = c.create_receiver("/queues/r-q").receive(timeout=5)
        assert got.body == b"held"
        text = _refused(lambda: c.create_receiver("/queues/w-q"))
        assert "unauthorized-access" in text
        assert "access to queue 'w-q' in vhost 'authz10' refused for user 'p10'" in text
    finally:
        c.close()
    assert _count(target, "w-q") == 1  # nothing taken from the refused queue
    assert _count(target, "r-q") == 1  # released when the connection closed


def test_send_needs_write_on_the_exchange(target: LeveretTarget) -> None:
    before = _count(target, "sink-q")
    c = _open(target, "p10")
    try:
        c.create_sender("/exchanges/w-x/k").send(Message(body="allowed"))
        text = _refused(lambda: c.create_sender("/exchanges/r-x/k"))
        assert "access to exchange 'r-x' in vhost 'authz10' refused for user 'p10'" in text
        # A queue target publishes through the default exchange: write on amq.default.
        text = _refused(lambda: c.create_sender("/queues/ok-q"))
        assert "access to exchange 'amq.default'" in text
    finally:
        c.close()
    assert _count(target, "sink-q") == before + 1


def test_anonymous_terminus_checks_each_message(target: LeveretTarget) -> None:
    before = _count(target, "sink-q")
    c = _open(target, "p10")
    try:
        sender = c.create_sender(None)
        ok = sender.send(Message(body="to w-x", address="/exchanges/w-x/k"))
        assert ok.remote_state == ok.ACCEPTED
        bad = sender.send(Message(body="to r-x", address="/exchanges/r-x/k"), error_states=[])
        assert bad.remote_state == bad.REJECTED
        assert bad.remote.condition.name == "amqp:unauthorized-access"
        assert "access to exchange 'r-x'" in bad.remote.condition.description
    finally:
        c.close()
    assert _count(target, "sink-q") == before + 1


def test_topic_permission_on_each_message(target: LeveretTarget) -> None:
    before = _count(target, "sink-t")
    c = _open(target, "p10")
    try:
        sender = c.create_sender("/exchanges/ok-t")  # attach: write on ok-t is allowed
        anonymous = c.create_sender(None)
        ok = anonymous.send(Message(body="mine", address="/exchanges/ok-t/p10.a"))
        assert ok.remote_state == ok.ACCEPTED
        bad = sender.send(Message(body="empty key"), error_states=[])
        assert bad.remote_state == bad.REJECTED
        assert "access to topic '' in exchange 'ok-t'" in bad.remote.condition.description
        bad = anonymous.send(Message(body="x", address="/exchanges/ok-t/other.a"), error_states=[])
        assert bad.remote_state == bad.REJECTED
    finally:
        c.close()
    assert _count(target, "sink-t") == before + 1


def test_server_named_queues_need_configure(target: LeveretTarget) -> None:
    c = _open(target, "p10")
    try:
        text = _refused(lambda: c.create_receiver(None, dynamic=True))
        assert "access to queue 'amq.gen-" in text
    finally:
        c.close()
    c = _open(target, "p10")
    try:
        # v1's exchange source: a server-named queue bound to the exchange.
        text = _refused(lambda: c.create_receiver("/exchange/r-x/k"))
        assert "access to queue 'amq.gen-" in text
    finally:
        c.close()
    c = _open(target, "a10")
    try:
        receiver = c.create_receiver(None, dynamic=True)
        assert receiver.link.remote_source.address.startswith("/queues/amq.gen-")
    finally:
        c.close()


def test_user_id_must_be_the_users_own_unless_impersonator(target: LeveretTarget) -> None:
    for user, expected in (("p10", "REJECTED"), ("a10", "ACCEPTED")):
        c = _open(target, user)
        try:
            sender = c.create_sender("/exchanges/w-x/k")
            d = sender.send(Message(body="as someone", user_id=b"someone"), error_states=[])
            assert d.remote_state == getattr(d, expected)
            mine = sender.send(Message(body="as me", user_id=user.encode()))
            assert mine.remote_state == mine.ACCEPTED
        finally:
            c.close()


def test_vhost_without_permissions_is_refused(target: LeveretTarget) -> None:
    with pytest.raises(ConnectionException, match="unauthorized-access"):
        _open(target, "n10")


def test_connection_limit_is_resource_limit_exceeded(target: LeveretTarget) -> None:
    target.set_user_limits("a10", {"max-connections": 1})
    try:
        first = _open(target, "a10")
        try:
            with pytest.raises(ConnectionException, match="resource-limit-exceeded"):
                _open(target, "a10")
        finally:
            first.close()
        _open(target, "a10").close()  # the closed one no longer counts
    finally:
        target.set_user_limits("a10", {})


# -- the management node ---------------------------------------------------------------------


def _management(target: LeveretTarget, user: str) -> tuple[Any, Any, Any]:
    rmq = pytest.importorskip("rabbitmq_amqp_python_client")
    env = rmq.Environment(_rmq_url(target, user))
    conn = env.connection()
    conn.dial()
    return rmq, conn, conn.management()


def test_management_node_declare_and_delete_need_configure(target: LeveretTarget) -> None:
    rmq, conn, management = _management(target, "p10")
    name = f"c-{uuid.uuid4().hex[:6]}"
    try:
        management.declare_queue(rmq.ClassicQueueSpecification(name=name, is_auto_delete=False))
        with pytest.raises(rmq.ValidationCodeException, match="403"):
            management.declare_queue(rmq.ClassicQueueSpecification(name="w-new"))
        management.declare_exchange(rmq.ExchangeSpecification(name="c-newx"))
        with pytest.raises(rmq.ValidationCodeException, match="403"):
            management.declare_exchange(rmq.ExchangeSpecification(name="w-newx"))
        with pytest.raises(rmq.ValidationCodeException, match="403"):
            management.delete_queue("r-q")
        with pytest.raises(rmq.ValidationCodeException, match="403"):
            management.delete_exchange("w-x")
        management.delete_queue(name)
        management.delete_exchange("c-newx")
    finally:
        management.close()
        conn.close()
    assert not _queue_exists(target, "w-new")
    assert _queue_exists(target, "r-q")
    assert not _queue_exists(target, name)
    with _admin(target) as admin:
        ch = admin.channel()
        ch.exchange_declare("w-x", passive=True)  # still there
        ch = admin.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch.exchange_declare("w-newx", passive=True)


def test_management_node_bind_and_purge(target: LeveretTarget) -> None:
    rmq, conn, management = _management(target, "p10")
    try:
        # bind: write on the queue, read on the exchange.
        binding = management.bind(
            rmq.ExchangeToQueueBindingSpecification(
                source_exchange="r-x", destination_queue="w-q", binding_key="b"
            )
        )
        with pytest.raises(rmq.ValidationCodeException, match="403"):
            management.bind(
                rmq.ExchangeToQueueBindingSpecification(
                    source_exchange="w-x", destination_queue="w-q", binding_key="b"
                )
            )
        management.unbind(binding)
        with pytest.raises(rmq.ValidationCodeException, match="403"):
            management.purge_queue("w-q")  # purge: read on the queue
        management.purge_queue("ok-q")
    finally:
        management.close()
        conn.close()
    assert _count(target, "w-q") == 1
    with _admin(target) as admin:
        ch = admin.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("w-x", "b", b"probe", mandatory=True)
