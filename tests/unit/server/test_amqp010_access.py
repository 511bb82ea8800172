"""Users, permissions and limits in the AMQP 0-10 front end (in memory, no sockets): the
login through ``auth.authn`` (mechanisms, the failed-login delay), connection.open's
refusals and limits, sessions counted as channels, and the permission matrix of
``tests/integration/test_permission_matrix.py`` (0-9-1 through pika) in 0-10's commands:
what 0-9-1 refuses a user, 0-10 refuses too, with RabbitMQ's texts, the 0-10 code
unauthorized-access (403), and nothing changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from leveret.auth.authn import FAILURE_DELAY
from leveret.auth.users import UserStore
from leveret.model.broker import Broker
from leveret.protocol.amqp010._generated import commands as c
from leveret.protocol.amqp010._generated.constants import (
    ConnectionCloseCode,
    ExecutionErrorCode,
)
from leveret.protocol.amqp010.events import ConnectionClosed, StartReceived
from tests.unit.server.amqp010_support import Client010

if TYPE_CHECKING:
    from collections.abc import Callable

V = "authz-m"
MX, AX = "authz-mx", "authz-ax"
PASSWORDS = {MX: "pw-mx", AX: "pw-ax", "guest": "guest"}
UNAUTHORIZED = int(ExecutionErrorCode.UNAUTHORIZED_ACCESS)


def _users() -> UserStore:
    users = UserStore.with_default_user()
    users.add_vhost(V)
    users.set_permissions("guest", V, ".*", ".*", ".*")
    users.add_user(MX, PASSWORDS[MX])
    users.set_permissions(MX, V, "^(ok|c)-", "^(ok|w)-", "^(ok|r)-")
    users.set_topic_permissions(MX, V, "ok-t", "^{username}\\.", "^{vhost}\\.")
    users.add_user(AX, PASSWORDS[AX])
    users.set_user_tags(AX, ["impersonator"])
    users.set_permissions(AX, V, ".*", ".*", ".*")
    return users


QUEUES = ("ok-q", "c-q", "w-q", "r-q", "no-q", "c-qm", "c-qdel", "r-qdel", "sink-q", "sink-t")
DIRECT = ("ok-x", "c-x", "w-x", "r-x", "no-x", "c-xdel", "w-xdel")
TOPIC = ("ok-t", "ok-t2")


class World:
    """A broker with the matrix's resources, made by guest over 0-10."""

    def __init__(self) -> None:
        self.broker = Broker()
        self.broker.add_vhost(V)
        self.users = _users()
        admin = Client010(self.broker, self.users).open("guest", "guest", V)
        for queue in QUEUES:
            admin.send(c.QueueDeclare(queue=queue))
        for exchange in DIRECT:
            admin.send(c.ExchangeDeclare(exchange=exchange, type="direct"))
        for exchange in TOPIC:
            admin.send(c.ExchangeDeclare(exchange=exchange, type="topic"))
        admin.send(c.ExchangeBind(queue="sink-q", exchange="r-x", binding_key="sink"))
        admin.send(c.ExchangeBind(queue="sink-t", exchange="ok-t", binding_key="#"))
        admin.transfer("", "c-qm", b"must stay")
        assert admin.exception() is None
        self.vhost = self.broker.vhosts[V]

    def client(self, user: str) -> Client010:
        return Client010(self.broker, self.users).open(user, PASSWORDS[user], V)

    def count(self, queue: str) -> int:
        return self.vhost.queues[queue].message_count

    def routes(self, exchange: str, routing_key: str) -> bool:
        x = self.vhost.exchanges[exchange]
        return any(k == routing_key or k == "#" for _d, k, _a in x.kind.bindings())


# -- the operations (0-10 commands) -------------------------------------------------------

Op = "Callable[[Client010], object]"


def declare_x(name: str, *, ae: str | None = None, passive: bool = False) -> Any:
    return lambda cl: cl.send(
        c.ExchangeDeclare(exchange=name, type="direct", alternate_exchange=ae, passive=passive)
    )


def declare_q(name: str, *, ae: str | None = None, passive: bool = False) -> Any:
    return lambda cl: cl.send(c.QueueDeclare(queue=name, alternate_exchange=ae, passive=passive))


def delete_x(name: str) -> Any:
    return lambda cl: cl.send(c.ExchangeDelete(exchange=name))


def bind(queue: str, exchange: str, key: str) -> Any:
    return lambda cl: cl.send(c.ExchangeBind(queue=queue, exchange=exchange, binding_key=key))


def unbind(queue: str, exchange: str, key: str) -> Any:
    return lambda cl: cl.send(c.ExchangeUnbind(queue=queue, exchange=exchange, binding_key=key))


def publish(exchange: str, key: str, *, user_id: bytes | None = None) -> Any:
    return lambda cl: cl.transfer(exchange, key, user_id=user_id)


def tx_publish(exchange: str, key: str) -> Any:
    def op(cl: Client010) -> None:
        cl.send(c.TxSelect())
        cl.transfer(exchange, key)
        cl.send(c.TxCommit())

    return op


def subscribe(queue: str, *, browse: bool = False) -> Any:
    def op(cl: Client010) -> None:
        cl.send(
            c.MessageSubscribe(
                queue=queue, destination="d", accept_mode=0, acquire_mode=1 if browse else 0
            )
        )
        cl.send(c.MessageFlow(destination="d", unit=1, value=0xFFFFFFFF))
        cl.send(c.MessageFlow(destination="d", unit=0, value=0xFFFFFFFF))

    return op


def refused(user: str, what: str) -> str:
    return f"access to {what} in vhost '{V}' refused for user '{user}'"


def topic_refused(user: str, key: str, exchange: str = "ok-t") -> str:
    return (
        f"access to topic '{key}' in exchange '{exchange}' in vhost '{V}' refused for user '{user}'"
    )


DEFAULT = "operation not permitted on the default exchange"


@dataclass(frozen=True)
class Case:
    operation: str
    rule: str
    user: str
    op: Any
    refusal: str = ""  # the reply text ("" = allowed)
    code: int = UNAUTHORIZED
    # What a refused operation must not have changed: a value read before and after.
    observe: Callable[[World], object] | None = None

    @property
    def id(self) -> str:
        outcome = f"refused-{self.code}" if self.refusal else "allowed"
        who = "" if self.user == MX else f"-{self.user}"
        return f"{self.operation}: {self.rule}{who} -> {outcome}"


def exists_x(name: str) -> Callable[[World], object]:
    return lambda w: name in w.vhost.exchanges


def exists_q(name: str) -> Callable[[World], object]:
    return lambda w: name in w.vhost.queues


def count(queue: str) -> Callable[[World], object]:
    return lambda w: w.count(queue)


def routes(exchange: str, key: str) -> Callable[[World], object]:
    return lambda w: w.routes(exchange, key)


MATRIX: list[Case] = [
    Case("exchange.declare", "configure, new", MX, declare_x("c-new-x")),
    Case("exchange.declare", "configure, new", MX, declare_x("w-new-x"),
         refused(MX, "exchange 'w-new-x'"), observe=exists_x("w-new-x")),
    Case("exchange.declare", "configure, existing", MX, declare_x("c-x")),
    Case("exchange.declare", "configure, existing", MX, declare_x("r-x"),
         refused(MX, "exchange 'r-x'")),
    Case("exchange.declare", "passive, no permission", MX, declare_x("no-x", passive=True)),
    Case("exchange.declare", "alternate-exchange: read new + write AE", MX,
         declare_x("ok-ae", ae="w-x")),
    Case("exchange.declare", "alternate-exchange: write on the AE", MX,
         declare_x("ok-ae2", ae="r-x"), refused(MX, "exchange 'r-x'"),
         observe=exists_x("ok-ae2")),
    Case("exchange.declare", "alternate-exchange: read on the new exchange", MX,
         declare_x("c-ae", ae="w-x"), refused(MX, "exchange 'c-ae'"), observe=exists_x("c-ae")),
    Case("exchange.declare", "amq. exchange that exists", AX, declare_x("amq.direct")),
    Case("exchange.declare", "amq. exchange that exists", MX, declare_x("amq.direct"),
         refused(MX, "exchange 'amq.direct'")),
    Case("exchange.delete", "configure", MX, delete_x("c-xdel")),
    Case("exchange.delete", "configure", MX, delete_x("w-xdel"),
         refused(MX, "exchange 'w-xdel'"), observe=exists_x("w-xdel")),
    Case("exchange.delete", "configure, missing", MX,
         lambda cl: cl.send(c.ExchangeDelete(exchange="w-gone")), refused(MX, "exchange 'w-gone'")),
    Case("exchange.delete", "amq. exchange", AX,
         lambda cl: cl.send(c.ExchangeDelete(exchange="amq.direct")),
         f"deletion of system exchange 'amq.direct' in vhost '{V}' not allowed",
         observe=exists_x("amq.direct")),
    # 0-10's exchange.bind binds a queue: queue.bind's checks.
    Case("exchange.bind", "write queue + read exchange", MX, bind("w-q", "r-x", "qb")),
    Case("exchange.bind", "write on the queue", MX, bind("r-q", "r-x", "qb-r"),
         refused(MX, "queue 'r-q'"), observe=routes("r-x", "qb-r")),
    Case("exchange.bind", "read on the exchange", MX, bind("w-q", "c-x", "qb-c"),
         refused(MX, "exchange 'c-x'"), observe=routes("c-x", "qb-c")),
    Case("exchange.bind", "read on an amq. exchange", MX, bind("w-q", "amq.topic", "qb"),
         refused(MX, "exchange 'amq.topic'")),
    Case("exchange.bind", "topic read on the key", MX, bind("w-q", "ok-t", f"{V}.#")),
    Case("exchange.bind", "topic read on the key", MX, bind("w-q", "ok-t", "bad.#"),
         topic_refused(MX, "bad.#"), observe=routes("ok-t", "bad.#")),
    Case("exchange.unbind", "write queue + read exchange", MX,
         lambda cl: (bind("w-q", "r-x", "qu")(cl), unbind("w-q", "r-x", "qu")(cl))),
    Case("exchange.unbind", "write on the queue", MX, unbind("sink-q", "r-x", "sink"),
         refused(MX, "queue 'sink-q'"), observe=routes("r-x", "sink")),
    Case("exchange.unbind", "read on the exchange", MX, unbind("w-q", "c-x", "qb"),
         refused(MX, "exchange 'c-x'")),
    Case("exchange.unbind", "topic read on the key", MX, unbind("w-q", "ok-t", "bad.#"),
         topic_refused(MX, "bad.#")),
    Case("queue.declare", "configure, new", MX, declare_q("c-new-q")),
    Case("queue.declare", "configure, new", MX, declare_q("w-new-q"),
         refused(MX, "queue 'w-new-q'"), observe=exists_q("w-new-q")),
    Case("queue.declare", "configure, existing", MX, declare_q("c-q")),
    Case("queue.declare", "configure, existing", MX, declare_q("r-q"), refused(MX, "queue 'r-q'")),
    Case("queue.declare", "passive, no permission", MX, declare_q("no-q", passive=True)),
    Case("queue.declare", "amq. prefix", AX, declare_q("amq.q"),
         "queue name 'amq.q' contains reserved prefix 'amq.*'", observe=exists_q("amq.q")),
    Case("queue.declare", "alternate exchange: read queue + write AE", MX,
         declare_q("ok-dlq1", ae="w-x")),
    Case("queue.declare", "alternate exchange: write on the AE", MX,
         declare_q("ok-dlq2", ae="r-x"), refused(MX, "exchange 'r-x'"),
         observe=exists_q("ok-dlq2")),
    Case("queue.declare", "alternate exchange: read on the queue", MX,
         declare_q("c-dlq", ae="w-x"), refused(MX, "queue 'c-dlq'"), observe=exists_q("c-dlq")),
    Case("queue.delete", "configure", MX, lambda cl: cl.send(c.QueueDelete(queue="c-qdel"))),
    Case("queue.delete", "configure", MX, lambda cl: cl.send(c.QueueDelete(queue="r-qdel")),
         refused(MX, "queue 'r-qdel'"), observe=exists_q("r-qdel")),
    Case("queue.delete", "configure, missing", MX,
         lambda cl: cl.send(c.QueueDelete(queue="w-gone-q")), refused(MX, "queue 'w-gone-q'")),
    Case("queue.purge", "read", MX, lambda cl: cl.send(c.QueuePurge(queue="r-q"))),
    Case("queue.purge", "read", MX, lambda cl: cl.send(c.QueuePurge(queue="c-qm")),
         refused(MX, "queue 'c-qm'"), observe=count("c-qm")),
    Case("message.transfer", "write", MX, publish("w-x", "k")),
    Case("message.transfer", "write", MX, publish("r-x", "sink"), refused(MX, "exchange 'r-x'"),
         observe=count("sink-q")),
    Case("message.transfer", "write on the default exchange", MX, publish("", "sink-q"),
         refused(MX, "exchange 'amq.default'"), observe=count("sink-q")),
    Case("message.transfer", "write on the default exchange", AX, publish("", "no-such-queue")),
    Case("message.transfer", "write on an amq. exchange", MX, publish("amq.direct", "k"),
         refused(MX, "exchange 'amq.direct'")),
    Case("message.transfer", "write, before the exchange is looked up", MX,
         publish("r-gone", "k"), refused(MX, "exchange 'r-gone'")),
    Case("message.transfer", "write, then the exchange must exist", MX, publish("w-gone", "k"),
         f"no exchange 'w-gone' in vhost '{V}'", code=404),
    Case("message.transfer", "write, in a transaction", MX, tx_publish("r-x", "sink"),
         refused(MX, "exchange 'r-x'"), observe=count("sink-q")),
    Case("message.transfer", "topic write on the key", MX, publish("ok-t", f"{MX}.k")),
    Case("message.transfer", "topic write on the key", MX, publish("ok-t", "bad.k"),
         topic_refused(MX, "bad.k"), observe=count("sink-t")),
    Case("message.transfer", "topic exchange without topic permissions", MX,
         publish("ok-t2", "any.k")),
    Case("message.transfer", "user-id of the user", MX, publish("w-x", "k", user_id=MX.encode())),
    Case("message.transfer", "user-id of another user", MX,
         publish("w-x", "k", user_id=b"someone"),
         f"user_id property set to 'someone' but authenticated user was '{MX}'"),
    Case("message.transfer", "user-id of another user, impersonator", AX,
         publish("w-x", "k", user_id=b"someone")),
    Case("message.subscribe", "read", MX, subscribe("r-q")),
    Case("message.subscribe", "read", MX, subscribe("c-qm"), refused(MX, "queue 'c-qm'"),
         observe=count("c-qm")),
    Case("message.subscribe", "read, browsing", MX, subscribe("c-qm", browse=True),
         refused(MX, "queue 'c-qm'"), observe=lambda w: len(w.vhost.queues["c-qm"].browsers)),
]  # fmt: skip


def test_case_ids_are_unique() -> None:
    ids = [case.id for case in MATRIX]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", MATRIX, ids=[case.id for case in MATRIX])
def test_matrix(case: Case) -> None:
    world = World()
    before = case.observe(world) if case.observe is not None else None
    client = world.client(case.user)
    case.op(client)
    exc = client.exception()
    if not case.refusal:
        assert exc is None, exc
        return
    assert exc is not None, f"not refused: {case.id}"
    assert (exc.error_code, exc.description) == (case.code, case.refusal)
    if case.observe is not None:
        assert case.observe(world) == before


def test_a_refused_subscription_takes_nothing() -> None:
    world = World()
    client = world.client(MX)
    subscribe("c-qm")(client)
    assert client.transfers() == []
    assert world.count("c-qm") == 1


# -- login, connection.open, sessions ------------------------------------------------------


def test_mechanisms_come_from_authn() -> None:
    users = _users()
    assert Client010(users=users).start().mechanisms == ["PLAIN", "AMQPLAIN"]
    users.anonymous_user = MX
    start = Client010(users=users, certificate_identity="CN=x").start()
    assert start.mechanisms == ["PLAIN", "AMQPLAIN", "EXTERNAL", "ANONYMOUS"]


def test_external_logs_in_as_the_certificate_user() -> None:
    users = _users()
    client = Client010(Broker(), users, certificate_identity=MX)
    client.broker.add_vhost(V)
    client.conn.config.virtual_host = V
    client.start()
    client.conn.start_ok("EXTERNAL", b"")
    client.pump()
    assert client.opened
    assert client.shell.user is not None
    assert client.shell.user.name == MX


def test_a_refused_login_is_answered_after_the_delay() -> None:
    client = Client010(users=_users())
    client.login(MX, "wrong", V)
    assert client.close_event() is None  # nothing yet
    client.tick(FAILURE_DELAY / 2)
    assert not client.opened
    client.tick(FAILURE_DELAY)
    closed = client.close_event()
    assert closed is not None
    assert closed.reply_code == int(ConnectionCloseCode.CONNECTION_FORCED)
    assert closed.reply_text == (
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
        "For details see the broker logfile."
    )


def test_guest_is_refused_from_another_address() -> None:
    client = Client010(users=_users(), loopback=False)
    client.login("guest", "guest", "/")
    client.tick(FAILURE_DELAY)
    assert client.close_event() is not None
    assert not client.opened


def test_an_unknown_mechanism_is_dropped_after_the_delay() -> None:
    client = Client010(users=_users())
    client.start()
    client.conn.start_ok("CRAM-MD5", b"x")
    client.pump()
    client.tick(FAILURE_DELAY)
    assert client.server.should_close_transport
    assert client.close_event() is None


def test_a_vhost_the_user_may_not_use_is_invalid_path() -> None:
    users = _users()
    users.add_vhost("other")
    broker = Broker()
    broker.add_vhost("other")
    client = Client010(broker, users)
    client.login(MX, PASSWORDS[MX], "other")
    closed = client.close_event()
    assert closed is not None
    assert closed.reply_code == int(ConnectionCloseCode.INVALID_PATH)
    assert closed.reply_text == f"access to vhost 'other' refused for user '{MX}'"


def test_the_connection_limit_and_counting() -> None:
    world = World()
    world.users.set_user_limits(MX, {"max-connections": 1})
    first = world.client(MX)
    second = Client010(world.broker, world.users)
    second.login(MX, PASSWORDS[MX], V)
    closed = second.close_event()
    assert closed is not None
    assert closed.reply_code == int(ConnectionCloseCode.CONNECTION_FORCED)
    first.server.connection_lost()
    third = Client010(world.broker, world.users)
    third.login(MX, PASSWORDS[MX], V)
    assert third.opened


def test_sessions_count_as_channels() -> None:
    world = World()
    world.users.set_user_limits(MX, {"max-channels": 2})
    client = world.client(MX)  # session 1
    assert client.attach(2)
    assert not client.attach(3)
    exc = client.exception(3)
    assert exc is not None
    assert exc.error_code == int(ExecutionErrorCode.RESOURCE_LIMIT_EXCEEDED)
    client.conn.detach(2)
    client.pump()
    assert client.attach(3, b"again")
    tracker = world.users.tracker
    assert tracker.channels_by_user[MX] == 2
    client.server.connection_lost()
    assert tracker.channels_by_user[MX] == 0


def test_a_session_is_resumed_only_in_its_vhost_by_its_user() -> None:
    world = World()
    world.users.set_permissions(MX, "/", ".*", ".*", ".*")
    client = world.client(MX)
    client.conn.request_timeout(1, 60)
    client.pump()
    session = client.conn.session(1)
    assert session is not None
    client.server.connection_lost()
    # Another user naming the same session gets a new one (sessions are per user).
    other = Client010(world.broker, world.users).open(AX, PASSWORDS[AX], V, channel=5)
    assert other.attach(1, session.name)
    assert other.server.sessions[1] is not client.server.sessions.get(1)
    # The same user from another vhost may not resume it.
    elsewhere = Client010(world.broker, world.users)
    elsewhere.login(MX, PASSWORDS[MX], "/")
    assert not elsewhere.attach(1, session.name)
    assert any(isinstance(e, StartReceived) for e in elsewhere.events)
    assert not any(isinstance(e, ConnectionClosed) for e in elsewhere.events)
