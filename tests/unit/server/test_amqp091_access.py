"""Users, permissions and limits in the sans-IO 0-9-1 front end, driven through
``leveret.testing.CodecClient``: the mechanisms offered, EXTERNAL, the failed-login delay
as a ``tick`` deadline, the frame limit before tune-ok, connection.open's 530s, the
connection and channel counts on every way a channel or a connection ends, and the
checks on the per-message path (the fast publish path, topic permissions, user-id,
a permission revoked on an open channel). The whole matrix runs through pika in
``tests/integration/test_permission_matrix.py``.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.auth.authn import FAILURE_DELAY
from leveret.auth.users import IMPERSONATOR, UserStore
from leveret.errors import AccessRefused
from leveret.model.broker import Broker
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091 import handlers
from leveret.server.amqp091.channel import Channel
from leveret.testing import DEFAULT_CAPABILITIES, CodecClient

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable

V = "v"
REFUSAL = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism {}. "
    "For details see the broker logfile."
)


def _store() -> UserStore:
    users = UserStore.with_default_user()
    users.add_vhost(V)
    users.add_user("app", "pw")
    users.set_permissions("app", V, "^app-", "^app-", "^app-")
    users.add_user("cert-user", None)  # certificate login only
    users.set_permissions("cert-user", V, ".*", ".*", ".*")
    return users


def _client(
    users: UserStore | None = None, *, certificate_identity: str | None = None
) -> CodecClient:
    broker = Broker()
    broker.add_vhost(V)
    return CodecClient.connect(
        broker,
        users if users is not None else _store(),
        certificate_identity=certificate_identity,
    )


def _dropping(client: CodecClient) -> bool:
    """The server wants the socket closed (a function: the flag changes under mypy)."""
    return client.shell.should_close_transport


def _start(client: CodecClient) -> m.ConnectionStart:
    client.send_header()
    return client.expect(0, m.ConnectionStart)


def _open(client: CodecClient, vhost: str = V) -> None:
    client.expect(0, m.ConnectionTune)
    client.send(0, m.ConnectionTuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    client.send(0, m.ConnectionOpen(virtual_host=vhost))


def _app(users: UserStore | None = None, channel: int = 1) -> CodecClient:
    client = _client(users)
    client.handshake("app", "pw", V)
    client.open_channel(channel)
    return client


# -- mechanisms and EXTERNAL -------------------------------------------------------------


def test_plain_connections_are_not_offered_external() -> None:
    start = _start(_client())
    assert start.mechanisms == b"PLAIN AMQPLAIN"


def test_a_verified_certificate_adds_external_and_anonymous_needs_its_user() -> None:
    users = _store()
    users.anonymous_user = "app"
    start = _start(_client(users, certificate_identity="cert-user"))
    assert start.mechanisms == b"PLAIN AMQPLAIN EXTERNAL ANONYMOUS"


def test_external_logs_in_as_the_certificate_user() -> None:
    client = _client(certificate_identity="cert-user")
    _start(client)
    client.start_ok(mechanism="EXTERNAL", response=b"")
    _open(client)
    client.expect(0, m.ConnectionOpenOk)
    assert client.shell.user is not None
    assert client.shell.user.name == "cert-user"
    assert client.conn.user_name == "cert-user"


def test_external_for_a_certificate_without_a_user_is_refused_after_the_delay() -> None:
    client = _client(certificate_identity="CN=nobody")
    _start(client)
    client.start_ok(mechanism="EXTERNAL", response=b"")
    client.tick(FAILURE_DELAY)
    close = client.expect(0, m.ConnectionClose)
    assert (close.reply_code, close.reply_text) == (403, REFUSAL.format("EXTERNAL"))


def test_external_without_a_certificate_is_dropped_after_the_delay() -> None:
    client = _client()
    _start(client)
    client.start_ok(mechanism="EXTERNAL", response=b"")
    client.tick(FAILURE_DELAY)
    client.expect_nothing()
    assert _dropping(client)


def test_a_certificate_user_has_no_password() -> None:
    client = _client(certificate_identity="cert-user")
    _start(client)
    client.start_ok(user="cert-user", password="")
    client.tick(FAILURE_DELAY)
    assert client.expect(0, m.ConnectionClose).reply_code == 403


# -- the failed-login delay --------------------------------------------------------------


@pytest.mark.parametrize("capability", [True, False])
def test_a_refused_login_is_answered_only_when_its_delay_ends(capability: bool) -> None:
    client = _client()
    _start(client)
    caps: FieldTable = dict(DEFAULT_CAPABILITIES, authentication_failure_close=capability)
    # The client pipelines the rest of its handshake: none of it is handled.
    client.send(
        0,
        m.ConnectionStartOk(
            client_properties={"capabilities": caps},
            mechanism="PLAIN",
            response=b"\x00app\x00wrong",
            locale="en_US",
        ),
    )
    client.send(0, m.ConnectionTuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    client.send(0, m.ConnectionOpen(virtual_host=V))
    client.send(1, m.ChannelOpen())
    client.tick(FAILURE_DELAY - 0.01)
    client.expect_nothing()
    assert not _dropping(client)
    assert client.shell.access is None
    client.tick(0.01)
    if not capability:
        client.expect_nothing()
        assert _dropping(client)
        return
    close = client.expect(0, m.ConnectionClose)
    assert (close.reply_code, close.reply_text) == (403, REFUSAL.format("PLAIN"))
    assert (close.class_id, close.method_id) == (0, 0)  # RabbitMQ 3.10.8 names no method
    client.expect_nothing()
    assert not _dropping(client)
    client.send(0, m.ConnectionCloseOk())
    assert _dropping(client)


def test_a_refused_client_that_never_answers_the_close_is_dropped() -> None:
    client = _client()
    _start(client)
    client.start_ok(password="wrong")
    client.tick(FAILURE_DELAY)
    client.expect(0, m.ConnectionClose)
    client.tick(5.0)
    assert _dropping(client)


def test_a_refused_client_may_go_away_during_the_delay() -> None:
    client = _client()
    _start(client)
    client.start_ok(password="wrong")
    client.conn.connection_lost()
    client.tick(FAILURE_DELAY)
    client.expect_nothing()


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=200), st.floats(min_value=0, max_value=FAILURE_DELAY - 0.001))
def test_nothing_a_refused_client_sends_is_read(data: bytes, when: float) -> None:
    client = _client()
    _start(client)
    client.start_ok(password="wrong")
    client.clock.advance(when)
    client.send_raw(data)
    client.tick()
    client.expect_nothing()
    client.tick(FAILURE_DELAY)
    assert client.expect(0, m.ConnectionClose).reply_code == 403


# -- frames before tune-ok -----------------------------------------------------------------


def _start_ok(size: int) -> m.ConnectionStartOk:
    """A PLAIN start-ok whose frame is exactly ``size`` octets (padded in client-properties)."""

    def start_ok(pad: str) -> m.ConnectionStartOk:
        return m.ConnectionStartOk(
            client_properties={"capabilities": dict(DEFAULT_CAPABILITIES), "pad": pad},
            mechanism="PLAIN",
            response=b"\x00guest\x00guest",
            locale="en_US",
        )

    unpadded = len(framing.encode_method_frame(0, start_ok("").encode()))
    method = start_ok("x" * (size - unpadded))
    assert len(framing.encode_method_frame(0, method.encode())) == size
    return method


def _start_ok_frame(size: int) -> bytes:
    """The same start-ok as raw bytes (for frames the client machine would not send)."""
    return framing.encode_method_frame(0, _start_ok(size).encode())


def test_a_start_ok_of_4096_octets_is_read() -> None:
    client = CodecClient.connect()
    _start(client)
    client.send(0, _start_ok(4096))
    client.expect(0, m.ConnectionTune)


def test_a_frame_over_4096_octets_before_tune_ok_is_refused_at_its_header() -> None:
    client = CodecClient.connect()
    _start(client)
    # The header and one octet: the payload announced is never waited for.
    # A payload of 4097 octets: over the 4096 allowed before tune-ok (as a frame_max, the
    # payload may fill it: RabbitMQ's leniency).
    client.send_raw(_start_ok_frame(4096 + 8 + 1)[:8])
    client.expect_nothing()  # before tune-ok RabbitMQ drops the socket without a close
    assert _dropping(client)
    assert client.conn.decoder.buffered == 0


def test_tune_ok_raises_the_frame_limit_to_frame_max() -> None:
    client = CodecClient.connect()
    client.handshake(frame_max=8192)
    assert client.conn.decoder.frame_max == 8192
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="big"))
    client.expect(1, m.QueueDeclareOk)
    client.publish(1, "", "big", b"b" * 6000)  # one body frame of 6008 octets
    client.send(1, m.BasicGet(queue="big", no_ack=True))
    assert client.expect_content(1, m.BasicGetOk).body == b"b" * 6000
    client.send_raw(struct.pack(">BHI", 1, 1, 8193) + b"\x00")
    close = client.expect(0, m.ConnectionClose)
    assert close.reply_code == 501


# -- connection.open -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vhost", "text"),
    [
        ("nope", "NOT_ALLOWED - vhost nope not found"),
        ("/", "NOT_ALLOWED - access to vhost '/' refused for user 'app'"),
    ],
)
def test_connection_open_is_refused_with_530(vhost: str, text: str) -> None:
    client = _client()
    _start(client)
    client.start_ok(user="app", password="pw")
    _open(client, vhost)
    close = client.expect(0, m.ConnectionClose)
    assert (close.reply_code, close.reply_text) == (530, text)
    assert (close.class_id, close.method_id) == (10, 40)
    assert client.conn.users.tracker.total == 0


def test_a_vhost_of_the_registry_the_model_lacks_is_530_and_not_counted() -> None:
    users = _store()
    users.add_vhost("registry-only")
    users.set_permissions("app", "registry-only", ".*", ".*", ".*")
    client = _client(users)
    _start(client)
    client.start_ok(user="app", password="pw")
    _open(client, "registry-only")
    assert client.expect(0, m.ConnectionClose).reply_code == 530
    assert users.tracker.total == 0


def test_the_user_connection_limit() -> None:
    users = _store()
    users.set_user_limits("app", {"max-connections": 1})
    first = _app(users)
    client = _client(users)
    _start(client)
    client.start_ok(user="app", password="pw")
    _open(client)
    close = client.expect(0, m.ConnectionClose)
    assert close.reply_text == (
        "NOT_ALLOWED - connection refused for user 'app': user connection limit (1) is reached"
    )
    first.send(0, m.ConnectionClose(reply_code=200, reply_text="bye"))
    _app(users)  # the place was given back


# -- what a connection and its channels count ------------------------------------------------


def test_connections_and_channels_are_counted_until_they_end() -> None:
    users = _store()
    tracker = users.tracker
    client = _app(users)
    client.open_channel(2)
    client.open_channel(3)
    assert (tracker.total, tracker.channels_by_user["app"]) == (1, 3)
    client.send(2, m.ChannelClose(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(2, m.ChannelCloseOk)
    assert tracker.channels_by_user["app"] == 2
    # A channel the server closes (404 here) stops counting at once, once only.
    client.send(3, m.QueueDeclare(queue="app-missing", passive=True))
    client.expect(3, m.ChannelClose)
    assert tracker.channels_by_user["app"] == 1
    client.send(3, m.ChannelCloseOk())
    assert tracker.channels_by_user["app"] == 1
    client.conn.connection_lost()
    assert (tracker.total, tracker.channels_by_user["app"]) == (0, 0)


@pytest.mark.parametrize("how", ["client close", "server close", "connection lost"])
def test_every_end_of_a_connection_gives_its_places_back(how: str) -> None:
    users = _store()
    client = _app(users)
    if how == "client close":
        client.send(0, m.ConnectionClose(reply_code=200, reply_text="", class_id=0, method_id=0))
    elif how == "server close":
        client.conn.close(320, "shutdown", client.clock.now)
    else:
        client.conn.connection_lost()
    assert users.tracker.total == 0
    assert users.tracker.channels_by_user["app"] == 0


def test_the_user_channel_limit_closes_the_connection_with_530() -> None:
    users = _store()
    users.set_user_limits("app", {"max-channels": 1})
    client = _app(users)
    client.send(2, m.ChannelOpen())
    close = client.expect(0, m.ConnectionClose)
    assert (close.reply_code, close.class_id, close.method_id) == (530, 20, 10)
    assert close.reply_text == (
        "NOT_ALLOWED - number of channels opened for user 'app' has reached the maximum "
        "allowed user limit of (1)"
    )
    assert users.tracker.channels_by_user["app"] == 0


# -- checks on the per-message path --------------------------------------------------------


def _declare(client: CodecClient, queue: str) -> None:
    client.send(1, m.QueueDeclare(queue=queue))
    client.expect(1, m.QueueDeclareOk)


def test_a_refused_publish_on_the_fast_path_routes_nothing() -> None:
    client = _app()
    _declare(client, "app-q")
    # Both the method (fast path) and its content frames arrive in one read.
    client.publish(1, "", "app-q", b"not for you")
    close = client.expect(1, m.ChannelClose)
    assert (close.reply_code, close.class_id, close.method_id) == (403, 60, 40)
    assert close.reply_text == (
        "ACCESS_REFUSED - access to exchange 'amq.default' in vhost 'v' refused for user 'app'"
    )
    assert client.conn.broker.vhosts[V].queues["app-q"].message_count == 0


def test_a_permission_revoked_on_an_open_channel_applies_to_the_next_publish() -> None:
    users = _store()
    client = _app(users)
    client.send(1, m.ExchangeDeclare(exchange="app-x", type="fanout"))
    client.expect(1, m.ExchangeDeclareOk)
    _declare(client, "app-q")
    client.send(1, m.QueueBind(queue="app-q", exchange="app-x"))
    client.expect(1, m.QueueBindOk)
    client.publish(1, "app-x", "", b"one")
    client.expect_nothing()
    users.set_permissions("app", V, "^app-", "^nothing$", "^app-")
    client.publish(1, "app-x", "", b"two")
    assert client.expect(1, m.ChannelClose).reply_code == 403
    assert client.conn.broker.vhosts[V].queues["app-q"].message_count == 1


def test_topic_permissions_expand_username_and_vhost() -> None:
    users = _store()
    users.set_topic_permissions("app", V, "app-t", r"^{username}\.", r"^{vhost}\.")
    client = _app(users)
    client.send(1, m.ExchangeDeclare(exchange="app-t", type="topic"))
    client.expect(1, m.ExchangeDeclareOk)
    _declare(client, "app-q")
    client.send(1, m.QueueBind(queue="app-q", exchange="app-t", routing_key="v.#"))
    client.expect(1, m.QueueBindOk)
    client.publish(1, "app-t", "app.k", b"mine")
    client.expect_nothing()
    client.publish(1, "app-t", "v.k", b"not mine")
    close = client.expect(1, m.ChannelClose)
    assert close.reply_text == (
        "ACCESS_REFUSED - access to topic 'v.k' in exchange 'app-t' in vhost 'v' refused for "
        "user 'app'"
    )


@pytest.mark.parametrize("impersonator", [False, True])
def test_user_id_must_be_the_users_own_unless_an_impersonator(impersonator: bool) -> None:
    users = _store()
    if impersonator:
        users.set_user_tags("app", [IMPERSONATOR])
    client = _app(users)
    _declare(client, "app-q")
    client.send(1, m.ExchangeDeclare(exchange="app-x", type="fanout"))
    client.expect(1, m.ExchangeDeclareOk)
    client.publish(1, "app-x", "", b"x", BasicProperties(user_id="app"))
    client.publish(1, "app-x", "", b"x", BasicProperties(user_id="other"))
    if impersonator:
        client.expect_nothing()
        return
    close = client.expect(1, m.ChannelClose)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 60, 40)


def test_a_server_named_queue_is_checked_under_the_name_it_gets() -> None:
    users = _store()
    users.set_permissions("app", V, r"^amq\.gen-", ".*", ".*")
    client = _app(users)
    client.send(1, m.QueueDeclare(queue="", exclusive=True))
    name = client.expect(1, m.QueueDeclareOk).queue
    assert name.startswith("amq.gen-")
    assert name in client.conn.broker.vhosts[V].queues
    users.set_permissions("app", V, "^app-", ".*", ".*")
    client.send(1, m.QueueDeclare(queue="", exclusive=True))
    close = client.expect(1, m.ChannelClose)
    assert close.reply_text.startswith("ACCESS_REFUSED - access to queue 'amq.gen-")
    assert list(client.conn.broker.vhosts[V].queues) == [name]


def test_anonymous_logs_in_as_its_configured_user_only_when_offered() -> None:
    users = _store()
    client = _client(users)
    _start(client)
    client.start_ok(mechanism="ANONYMOUS", response=b"")
    client.tick(FAILURE_DELAY)
    client.expect_nothing()  # not offered: dropped without a close method
    assert _dropping(client)
    users.anonymous_user = "app"
    client = _client(users)
    _start(client)
    client.start_ok(mechanism="ANONYMOUS", response=b"")
    _open(client)
    client.expect(0, m.ConnectionOpenOk)
    assert client.conn.user_name == "app"


def test_the_generic_publish_path_makes_the_same_checks() -> None:
    """basic.publish goes through handlers.basic_publish when the fast path declines it."""
    client = _app()
    channel = client.conn.channels[1]
    assert isinstance(channel, Channel)
    handler = handlers.HANDLERS[m.BasicPublish.INDEX]
    with pytest.raises(AccessRefused, match=r"access to exchange 'amq\.default'"):
        handler(channel, m.BasicPublish(exchange="", routing_key="app-q"))
    assert channel.publish is None  # no content is expected after a refusal
