"""Users, permissions and limits in the AMQP/Fast front end, driven in memory by the
project's ``FastClient``: the login delay, CONNECTION OPEN's refusals and the connection
limit, the channel limit, and the ``Guard`` check of every handle operation (send to a
queue and to a topic, consume, temporary queues, subscriptions, cancel, query, browse),
with the connection and channel counts given back however the connection ends."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.auth.authn import FAILURE_DELAY
from leveret.auth.users import UserStore
from leveret.model.broker import Broker
from leveret.protocol.amqpfast.events import ServiceType
from leveret.server.amqpfast import FastConnection
from leveret.testing import FastClient
from leveret.testing.amqpfast_client import (
    ChannelClosed,
    Connected,
    ConnectionClosed,
    Created,
    Delivered,
    HandleClosed,
    Indexed,
    Replied,
)
from leveret.testing.client import feed, new_shell, run_turns

if TYPE_CHECKING:
    from leveret.testing.amqpfast_client import ClientEvent

V = "v"


def _users() -> UserStore:
    users = UserStore.with_default_user()
    users.add_vhost(V)
    # "app" may configure, write and read its own queues, write to the default exchange and
    # amq.topic, read amq.topic (subscriptions bind to it).
    users.add_user("app", "pw")
    users.set_permissions(
        "app", V, "^app-", r"^(app-.*|amq\.default|amq\.topic)$", r"^(app-.*|amq\.topic)$"
    )
    users.add_user("none", "pw")
    users.set_permissions("none", V, "", "", "")
    users.add_user("stranger", "pw")  # no permissions in V at all
    return users


class Pair:
    """A FastClient wired to a FastConnection of ``broker``, with a clock."""

    def __init__(
        self, broker: Broker, users: UserStore, *, loopback: bool = True, **client_args: object
    ) -> None:
        self.shell = new_shell(FastConnection, broker, users, peer="127.0.0.1:1", loopback=loopback)
        conn = self.shell.front
        assert isinstance(conn, FastConnection)
        self.conn = conn
        self.client = FastClient(**client_args)  # type: ignore[arg-type]
        self.now = 0.0

    def pump(self) -> list[ClientEvent]:
        events: list[ClientEvent] = []
        while True:
            out = self.client.data_to_send()
            if out:
                feed(self.shell, out, self.now)
            back = b"".join(self.shell.take_output(self.now))
            if not out and not back:
                return events
            events += self.client.receive_data(back)

    def advance(self, seconds: float) -> list[ClientEvent]:
        self.now += seconds
        self.shell.tick(self.now)
        run_turns(self.shell, self.now)
        return self.pump()

    def login(self) -> list[ClientEvent]:
        self.client.initiate()
        return self.pump()


@pytest.fixture
def users() -> UserStore:
    return _users()


@pytest.fixture
def broker() -> Broker:
    broker = Broker()
    vhost = broker.add_vhost(V)
    for name in ("app-q", "other"):
        vhost.declare_queue(name, owner=None)
    return broker


def _open(broker: Broker, users: UserStore, login: str = "app", **args: object) -> Pair:
    pair = Pair(broker, users, login=login, password="pw", virtual_path=V, **args)  # type: ignore[arg-type]
    events = pair.login()
    assert any(isinstance(e, Connected) for e in events), events
    pair.client.open_channel(1, confirm_tag=1)
    assert _replies(pair.pump()) == [("channel", 1, 200)]
    return pair


def _replies(events: list[ClientEvent]) -> list[tuple[str, int, int]]:
    return [(e.level, e.confirm_tag, e.reply_code) for e in events if isinstance(e, Replied)]


def _handle_closed(events: list[ClientEvent]) -> list[tuple[int, int, str]]:
    closed = [e for e in events if isinstance(e, HandleClosed)]
    return [(e.handle_id, e.reply_code, e.reply_text) for e in closed]


def test_a_refused_login_is_answered_after_the_delay(broker: Broker, users: UserStore) -> None:
    pair = Pair(broker, users, login="app", password="wrong", virtual_path=V)
    events = pair.login()
    assert not any(isinstance(e, ConnectionClosed) for e in events)
    assert not pair.advance(FAILURE_DELAY - 0.5)
    events = pair.advance(0.5)
    assert [(e.reply_code, e.reply_text) for e in events if isinstance(e, ConnectionClosed)] == [
        (403, "ACCESS_REFUSED - login refused")
    ]
    assert users.tracker.total == 0


def test_loopback_only_users_are_refused_from_elsewhere(broker: Broker, users: UserStore) -> None:
    pair = Pair(broker, users, loopback=False)  # guest/guest, a loopback-only user
    assert not any(isinstance(e, (Connected, ConnectionClosed)) for e in pair.login())
    events = pair.advance(FAILURE_DELAY)
    assert [e.reply_code for e in events if isinstance(e, ConnectionClosed)] == [403]


@pytest.mark.parametrize(
    ("login", "path", "code"),
    [("app", "/nowhere", 402), ("stranger", V, 403)],
)
def test_connection_open_refusals(
    broker: Broker, users: UserStore, login: str, path: str, code: int
) -> None:
    pair = Pair(broker, users, login=login, password="pw", virtual_path=path)
    events = pair.login()
    assert [e.reply_code for e in events if isinstance(e, ConnectionClosed)] == [code]
    assert pair.conn.client is None
    assert users.tracker.total == 0


def test_the_connection_limit_and_the_count_given_back(broker: Broker, users: UserStore) -> None:
    users.set_vhost_limits(V, {"max-connections": 1})
    first = _open(broker, users)
    assert users.tracker.by_vhost[V] == 1
    second = Pair(broker, users, login="app", password="pw", virtual_path=V)
    closed = [e for e in second.login() if isinstance(e, ConnectionClosed)]
    assert [e.reply_code for e in closed] == [530]
    assert "max_connections" in closed[0].reply_text or "limit" in closed[0].reply_text
    first.conn.connection_lost()
    assert users.tracker.total == 0
    assert users.tracker.channels_by_user["app"] == 0
    _open(broker, users)


def test_the_channel_limit(broker: Broker, users: UserStore) -> None:
    users.set_user_limits("app", {"max-channels": 1})
    pair = _open(broker, users)
    pair.client.open_channel(2, confirm_tag=2)
    events = pair.pump()
    closed = [(e.channel_id, e.reply_code) for e in events if isinstance(e, ChannelClosed)]
    assert closed == [(2, 530)]
    assert 2 not in pair.conn.channels
    assert users.tracker.channels_by_user["app"] == 1
    pair.client.close_channel(1)
    pair.pump()
    assert users.tracker.channels_by_user["app"] == 0
    pair.client.open_channel(3, confirm_tag=3)
    assert _replies(pair.pump()) == [("channel", 3, 200)]


def test_sending_to_a_queue_needs_write_on_the_default_exchange(
    broker: Broker, users: UserStore
) -> None:
    pair = _open(broker, users, login="none")
    pair.client.open_handle(1, 1, service=ServiceType.QUEUE, dest_name="other", producer=True)
    pair.client.send(1, b"refused", confirm_tag=5)
    events = pair.pump()
    assert _handle_closed(events) == [
        (
            1,
            403,
            "ACCESS_REFUSED - access to exchange 'amq.default' in vhost 'v' refused for "
            "user 'none'",
        )
    ]
    assert broker.vhosts[V].queues["other"].message_count == 0
    allowed = _open(broker, users)
    allowed.client.open_handle(1, 1, service=ServiceType.QUEUE, dest_name="other", producer=True)
    allowed.client.send(1, b"sent", confirm_tag=6)
    assert _replies(allowed.pump()) == [("handle", 6, 200)]
    assert broker.vhosts[V].queues["other"].message_count == 1


def test_sending_to_a_topic_checks_the_topic_permission(broker: Broker, users: UserStore) -> None:
    users.set_topic_permissions("app", V, "amq.topic", "^news\\.", ".*")
    vhost = broker.vhosts[V]
    vhost.bind_queue("app-q", "amq.topic", "#", {}, owner=None)
    pair = _open(broker, users)
    pair.client.open_handle(1, 1, service=ServiceType.TOPIC, dest_name="news.", producer=True)
    pair.client.send(1, b"ok", dest_name="sport", confirm_tag=2)
    assert _replies(pair.pump()) == [("handle", 2, 200)]
    pair.client.open_handle(1, 2, service=ServiceType.TOPIC, dest_name="gossip", producer=True)
    pair.client.send(2, b"no", confirm_tag=3)
    events = pair.pump()
    assert [(h, code) for h, code, _text in _handle_closed(events)] == [(2, 403)]
    assert "topic 'gossip' in exchange 'amq.topic'" in _handle_closed(events)[0][2]
    assert vhost.queues["app-q"].message_count == 1


def test_consuming_needs_read_on_the_queue(broker: Broker, users: UserStore) -> None:
    vhost = broker.vhosts[V]
    pair = _open(broker, users)
    pair.client.open_handle(1, 1, service=ServiceType.QUEUE, dest_name="other", consumer=True)
    pair.client.consume(1, prefetch=5)
    events = pair.pump()
    assert [(h, code) for h, code, _text in _handle_closed(events)] == [(1, 403)]
    assert not vhost.queues["other"].consumers
    pair.client.open_handle(1, 2, service=ServiceType.QUEUE, dest_name="app-q", consumer=True)
    pair.client.consume(2, prefetch=5)
    pair.pump()
    assert len(vhost.queues["app-q"].consumers) == 1


def test_a_temporary_queue_needs_configure(broker: Broker, users: UserStore) -> None:
    vhost = broker.vhosts[V]
    pair = _open(broker, users)
    pair.client.open_handle(
        1, 1, service=ServiceType.QUEUE, dest_name="tmp", consumer=True, temporary=True
    )
    events = pair.pump()
    assert [(h, code) for h, code, _text in _handle_closed(events)] == [(1, 403)]
    assert "tmp" not in vhost.queues
    pair.client.open_handle(
        1, 2, service=ServiceType.QUEUE, dest_name="app-tmp", consumer=True, temporary=True
    )
    events = pair.pump()
    assert not _handle_closed(events)
    assert "app-tmp" in vhost.queues


def test_topic_subscriptions_declare_bind_and_read(broker: Broker, users: UserStore) -> None:
    vhost = broker.vhosts[V]
    # "app" may not configure the server-named queue of a temporary subscription...
    pair = _open(broker, users, client_name="app-client")
    pair.client.open_handle(1, 1, service=ServiceType.TOPIC, dest_name="t", consumer=True)
    pair.client.consume(1, prefetch=5)
    assert [(h, c) for h, c, _t in _handle_closed(pair.pump())] == [(1, 403)]
    # ...but may make its durable one, named "<client-name>.<identifier>".
    pair.client.open_handle(1, 2, service=ServiceType.TOPIC, dest_name="t", consumer=True)
    pair.client.consume(2, prefetch=5, identifier="sub")
    assert not _handle_closed(pair.pump())
    assert "app-client.sub" in vhost.queues
    queues_before = set(vhost.queues)
    # "none" can do neither.
    other = _open(broker, users, login="none", client_name="app-none")
    other.client.open_handle(1, 1, service=ServiceType.TOPIC, dest_name="t", consumer=True)
    other.client.consume(1, prefetch=5, identifier="sub")
    assert [(h, c) for h, c, _t in _handle_closed(other.pump())] == [(1, 403)]
    assert set(vhost.queues) == queues_before


def test_cancelling_a_durable_subscription_needs_configure(
    broker: Broker, users: UserStore
) -> None:
    users.set_permissions("app", V, "^app-", r"^(app-.*|amq\.topic)$", r"^(app-.*|amq\.topic)$")
    vhost = broker.vhosts[V]
    pair = _open(broker, users, client_name="app-c")
    pair.client.open_handle(1, 1, service=ServiceType.TOPIC, dest_name="t", consumer=True)
    pair.client.consume(1, prefetch=5, identifier="s")
    assert not _handle_closed(pair.pump())
    assert "app-c.s" in vhost.queues
    users.set_permissions("app", V, "^nothing$", ".*", ".*")  # revoked on the open connection
    pair.client.cancel(1, identifier="s")
    assert [(h, c) for h, c, _t in _handle_closed(pair.pump())] == [(1, 403)]
    assert "app-c.s" in vhost.queues


def test_query_and_browse_need_read(broker: Broker, users: UserStore) -> None:
    broker.vhosts[V].queues["other"].purge()
    pair = _open(broker, users)
    pair.client.open_handle(1, 1, service=ServiceType.QUEUE, dest_name="other", browser=True)
    pair.client.query(1)
    events = pair.pump()
    assert not [e for e in events if isinstance(e, Indexed)]
    assert [(h, c) for h, c, _t in _handle_closed(events)] == [(1, 403)]
    pair.client.open_handle(1, 2, service=ServiceType.QUEUE, dest_name="other", browser=True)
    pair.client.browse(2, 1, confirm_tag=4)
    events = pair.pump()
    assert not [e for e in events if isinstance(e, Delivered)]
    assert [(h, c) for h, c, _t in _handle_closed(events)] == [(2, 403)]
    pair.client.open_handle(1, 3, service=ServiceType.QUEUE, dest_name="app-q", browser=True)
    pair.client.query(3)
    assert [e.message_list for e in pair.pump() if isinstance(e, Indexed)] == [b""]


def test_a_revoked_permission_applies_to_the_next_send(broker: Broker, users: UserStore) -> None:
    pair = _open(broker, users)
    pair.client.open_handle(1, 1, service=ServiceType.QUEUE, dest_name="app-q", producer=True)
    pair.client.send(1, b"one", confirm_tag=2)
    assert _replies(pair.pump()) == [("handle", 2, 200)]
    users.clear_permissions("app", V)
    pair.client.send(1, b"two", confirm_tag=3)
    assert [(h, c) for h, c, _t in _handle_closed(pair.pump())] == [(1, 403)]
    assert broker.vhosts[V].queues["app-q"].message_count == 1


def test_created_names_are_the_checked_ones(broker: Broker, users: UserStore) -> None:
    users.set_permissions("app", V, ".*", ".*", ".*")
    pair = _open(broker, users)
    pair.client.open_handle(1, 1, service=ServiceType.QUEUE, consumer=True, temporary=True)
    (created,) = [e for e in pair.pump() if isinstance(e, Created)]
    assert created.dest_name in broker.vhosts[V].queues
