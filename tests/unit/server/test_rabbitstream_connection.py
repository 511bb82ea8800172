"""The stream-protocol front end without sockets: a client-role codec drives it, through its
shell (``server/shell/``), in memory over a broker whose streams live in memory (one
committed chunk per append)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveret.auth.users import UserStore
from leveret.convert.amqp091 import wire_message
from leveret.convert.amqp10_amqp091 import from_amqp10, to_amqp10
from leveret.convert.stream_records import RECORDS
from leveret.model.broker import Broker
from leveret.model.queues.stream import StreamQueue
from leveret.model.queues.stream_log import MemoryStreamBackend
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.chunk import entries_of
from leveret.protocol.rabbitstream.codec import Role, StreamCodec
from leveret.protocol.rabbitstream.constants import Code, Key, OffsetType
from leveret.protocol.rabbitstream.server import ServerState
from leveret.server.rabbitstream import StreamConnection, StreamServer
from leveret.testing.client import feed, new_shell, run_turns

if TYPE_CHECKING:
    from collections.abc import Sequence


def plain(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


class Client:
    """A client-role codec wired to one server machine; ``now`` is moved by the test."""

    def __init__(self, server: StreamServer, *, loopback: bool = True) -> None:
        self.codec = StreamCodec(Role.CLIENT)
        self.now = 100.0
        self.shell = new_shell(
            lambda shell: StreamConnection(server, shell),
            server.broker,
            server.users,
            peer="test:1",
            loopback=loopback,
            now=self.now,
        )
        conn = self.shell.front
        assert isinstance(conn, StreamConnection)
        self.conn = conn
        self.cid = 0
        self.got: list[c.Command] = []

    def send(self, *commands: c.Command) -> list[c.Command]:
        data = b"".join(self.codec.send(cmd) for cmd in commands)
        feed(self.shell, data, self.now)
        return self.pump()

    def tick(self) -> None:
        self.shell.tick(self.now)
        run_turns(self.shell, self.now)

    @property
    def closing(self) -> bool:
        return self.shell.should_close_transport

    def pump(self) -> list[c.Command]:
        out = self.shell.take_output(self.now)
        got = self.codec.receive(b"".join(out))
        self.got += got
        return got

    def next_cid(self) -> int:
        self.cid += 1
        return self.cid

    def open(self, user: str = "guest", password: str = "guest", vhost: str = "/") -> None:
        self.send(c.PeerProperties(self.next_cid(), {"product": "test"}))
        self.send(c.SaslHandshake(self.next_cid()))
        got = self.send(c.SaslAuthenticate(self.next_cid(), "PLAIN", plain(user, password)))
        assert got[0] == c.SaslAuthenticateResponse(self.cid, Code.OK)
        assert got[1] == c.Tune(1048576, 60)
        self.send(c.Tune(1048576, 60))
        got = self.send(c.Open(self.next_cid(), vhost))
        assert isinstance(got[0], c.OpenResponse)
        assert got[0].code == Code.OK

    def call(self, command: c.Command) -> c.Command:
        got = self.send(command)
        assert got, f"no answer to {command}"
        return got[0]


def code_of(response: c.Command) -> int:
    code = getattr(response, "code", None)
    assert isinstance(code, int)
    return code


def new_server() -> StreamServer:
    """A stream server on an in-memory broker: guest, and ``reader`` who may only read."""
    broker = Broker()
    broker.attach_streams(MemoryStreamBackend(RECORDS))
    users = UserStore.with_default_user()
    users.add_user("reader", "pw")
    users.set_permissions("reader", "/", "^$", "^$", ".*")
    return StreamServer(broker, users)


@pytest.fixture
def server() -> StreamServer:
    return new_server()


@pytest.fixture
def client(server: StreamServer) -> Client:
    cl = Client(server)
    cl.open()
    return cl


def publish(cl: Client, pid: int, bodies: Sequence[bytes], first_id: int = 1) -> None:
    messages = [
        c.PublishedMessage(first_id + i, to_amqp10(BasicProperties(), body))
        for i, body in enumerate(bodies)
    ]
    cl.send(c.Publish(pid, messages))


def delivered(commands: Sequence[c.Command]) -> list[tuple[int, bytes]]:
    out = []
    for cmd in commands:
        if isinstance(cmd, c.Deliver):
            out += [(r.offset, from_amqp10(r.data)[1]) for r in entries_of(cmd.chunk)]
    return out


def test_handshake_peer_properties_sasl_tune_open(server: StreamServer) -> None:
    cl = Client(server)
    got = cl.send(c.PeerProperties(1, {"product": "test"}))
    assert isinstance(got[0], c.PeerPropertiesResponse)
    assert got[0].properties["product"] == "Leveret"
    got = cl.send(c.SaslHandshake(2))
    assert got == [c.SaslHandshakeResponse(2, Code.OK, ["PLAIN", "AMQPLAIN"])]
    cl.send(c.SaslAuthenticate(3, "PLAIN", plain("guest", "guest")))
    cl.send(c.Tune(65536, 0))
    got = cl.send(c.Open(4, "/"))
    assert got == [
        c.OpenResponse(4, Code.OK, {"advertised_host": "localhost", "advertised_port": "5552"})
    ]
    machine = cl.conn.machine
    assert (machine.frame_max, machine.heartbeat, machine.codec.frame_max) == (65536, 60, 65536)
    assert cl.conn.client is not None


@pytest.mark.parametrize(
    ("mechanism", "response", "code"),
    [
        ("PLAIN", plain("guest", "wrong"), Code.AUTHENTICATION_FAILURE),
        ("PLAIN", plain("nobody", "x"), Code.AUTHENTICATION_FAILURE),
        ("CRAM-MD5", b"x", Code.SASL_MECHANISM_NOT_SUPPORTED),
        ("PLAIN", b"no-nul", Code.SASL_ERROR),
    ],
)
def test_a_refused_login_is_answered_after_the_delay_then_closed(
    server: StreamServer, mechanism: str, response: bytes, code: int
) -> None:
    cl = Client(server)
    cl.send(c.PeerProperties(1, {}), c.SaslHandshake(2))
    assert cl.send(c.SaslAuthenticate(3, mechanism, response)) == []
    cl.now += 3.5
    cl.tick()
    assert cl.pump() == [c.SaslAuthenticateResponse(3, code)]
    assert cl.closing


def test_guest_from_another_host_gets_the_loopback_code(server: StreamServer) -> None:
    cl = Client(server, loopback=False)
    cl.send(c.PeerProperties(1, {}), c.SaslHandshake(2))
    cl.send(c.SaslAuthenticate(3, "PLAIN", plain("guest", "guest")))
    cl.now += 3.5
    cl.tick()
    assert cl.pump() == [c.SaslAuthenticateResponse(3, Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK)]


def test_an_unknown_vhost_is_a_vhost_access_failure(server: StreamServer) -> None:
    cl = Client(server)
    cl.send(c.PeerProperties(1, {}), c.SaslHandshake(2))
    cl.send(c.SaslAuthenticate(3, "PLAIN", plain("guest", "guest")), c.Tune(0, 0))
    assert cl.send(c.Open(4, "nope")) == [c.OpenResponse(4, Code.VIRTUAL_HOST_ACCESS_FAILURE)]
    assert cl.closing


def test_a_command_out_of_order_closes_with_unknown_frame(server: StreamServer) -> None:
    cl = Client(server)
    cl.send(c.Metadata(1, ["s"]))
    assert cl.closing
    assert cl.conn.machine.state is ServerState.CLOSED


def test_create_delete_and_their_codes(client: Client) -> None:
    assert code_of(client.call(c.Create(client.next_cid(), "s", {"max-age": "1h"}))) == Code.OK
    queue = client.conn.broker.vhosts["/"].queues["s"]
    assert isinstance(queue, StreamQueue)
    assert queue.arguments["x-max-age"] == "1h"
    again = client.call(c.Create(client.next_cid(), "s", {"max-age": "1h"}))
    assert code_of(again) == Code.STREAM_ALREADY_EXISTS
    other = client.call(c.Create(client.next_cid(), "s", {"max-age": "2h"}))
    assert code_of(other) == Code.PRECONDITION_FAILED
    bad = client.call(c.Create(client.next_cid(), "t", {"max-age": "forever"}))
    assert code_of(bad) == Code.PRECONDITION_FAILED
    reserved = client.call(c.Create(client.next_cid(), "amq.s", {}))
    assert code_of(reserved) == Code.ACCESS_REFUSED
    assert code_of(client.call(c.Delete(client.next_cid(), "s"))) == Code.OK
    assert code_of(client.call(c.Delete(client.next_cid(), "s"))) == Code.STREAM_DOES_NOT_EXIST


def test_publish_confirm_and_de_duplication(client: Client) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    ok = client.call(c.DeclarePublisher(client.next_cid(), 1, "ref", "s"))
    assert code_of(ok) == Code.OK
    publish(client, 1, [b"a", b"b", b"c"])
    assert c.PublishConfirm(1, [1, 2, 3]) in client.got
    seq = client.call(c.QueryPublisherSequence(client.next_cid(), "ref", "s"))
    assert seq == c.QueryPublisherSequenceResponse(client.cid, Code.OK, 3)
    # Ids 2 and 3 again, then 4: only 4 is stored; all three are confirmed.
    publish(client, 1, [b"b", b"c", b"d"], first_id=2)
    assert client.got[-1] == c.PublishConfirm(1, [2, 3, 4])
    queue = client.conn.broker.vhosts["/"].queues["s"]
    assert isinstance(queue, StreamQueue)
    assert queue.log.next_offset == 4
    # The reference is the x-stream-producer de-duplication key of 0-9-1 publishers too.
    assert queue.log.producers["ref"] == 4


def test_publisher_errors(client: Client) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    missing = client.call(c.DeclarePublisher(client.next_cid(), 1, None, "nope"))
    assert code_of(missing) == Code.STREAM_DOES_NOT_EXIST
    client.call(c.DeclarePublisher(client.next_cid(), 1, "r", "s"))
    twice = client.call(c.DeclarePublisher(client.next_cid(), 1, None, "s"))
    assert code_of(twice) == Code.PRECONDITION_FAILED
    same_ref = client.call(c.DeclarePublisher(client.next_cid(), 2, "r", "s"))
    assert code_of(same_ref) == Code.PRECONDITION_FAILED
    publish(client, 9, [b"x"])
    assert client.got[-1] == c.PublishError(9, [(1, Code.PUBLISHER_DOES_NOT_EXIST)])
    gone = client.call(c.DeletePublisher(client.next_cid(), 9))
    assert code_of(gone) == Code.PUBLISHER_DOES_NOT_EXIST


def test_permissions_write_read_configure(server: StreamServer, client: Client) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    reader = Client(server)
    reader.open("reader", "pw")
    assert code_of(reader.call(c.Create(reader.next_cid(), "r", {}))) == Code.ACCESS_REFUSED
    assert code_of(reader.call(c.Delete(reader.next_cid(), "s"))) == Code.ACCESS_REFUSED
    declared = reader.call(c.DeclarePublisher(reader.next_cid(), 1, None, "s"))
    assert code_of(declared) == Code.ACCESS_REFUSED
    subscribed = reader.call(c.Subscribe(reader.next_cid(), 1, "s", OffsetType.FIRST, 0, 10))
    assert code_of(subscribed) == Code.OK


@pytest.mark.parametrize(
    ("offset_type", "offset", "expected"),
    [
        (OffsetType.FIRST, 0, [0, 1, 2, 3, 4]),
        (OffsetType.LAST, 0, [4]),  # the last chunk (one message per chunk here)
        (OffsetType.NEXT, 0, []),
        (OffsetType.OFFSET, 3, [3, 4]),
        (OffsetType.OFFSET, 99, []),
    ],
)
def test_subscribe_from_each_offset_spec(
    client: Client, offset_type: int, offset: int, expected: list[int]
) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    client.call(c.DeclarePublisher(client.next_cid(), 1, None, "s"))
    for i in range(5):
        publish(client, 1, [b"m%d" % i], first_id=i)
    got = client.send(c.Subscribe(client.next_cid(), 7, "s", offset_type, offset, 10))
    assert got[0] == c.Response(Key.SUBSCRIBE, client.cid, Code.OK)
    assert [o for o, _ in delivered(got)] == expected
    publish(client, 1, [b"new"], first_id=10)
    if offset < 99:  # else it waits for offset 99
        assert delivered(client.got)[-1] == (5, b"new")


def test_credit_counts_chunks(client: Client) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    client.call(c.DeclarePublisher(client.next_cid(), 1, None, "s"))
    for i in range(5):
        publish(client, 1, [b"m%d" % i], first_id=i)
    got = client.send(c.Subscribe(client.next_cid(), 1, "s", OffsetType.FIRST, 0, 2))
    assert [o for o, _ in delivered(got)] == [0, 1]
    got = client.send(c.Credit(1, 2))
    assert [o for o, _ in delivered(got)] == [2, 3]
    assert client.send(c.Credit(9, 1)) == [c.CreditResponse(Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, 9)]


def test_a_0_9_1_publish_is_delivered_to_a_stream_reader(client: Client) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    queue = client.conn.broker.vhosts["/"].queues["s"]
    raw = BasicProperties(content_type="text/plain", delivery_mode=2).encode()
    queue.enqueue(wire_message("", "s", raw, b"from 0-9-1"))
    got = client.send(c.Subscribe(client.next_cid(), 1, "s", OffsetType.FIRST, 0, 5))
    (deliver,) = [d for d in got if isinstance(d, c.Deliver)]
    (record,) = entries_of(deliver.chunk)
    props, body = from_amqp10(record.data)
    assert body == b"from 0-9-1"
    assert (props.content_type, props.delivery_mode) == ("text/plain", 2)


def test_offsets_are_stored_and_queried(client: Client) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    none = client.call(c.QueryOffset(client.next_cid(), "app", "s"))
    assert none == c.QueryOffsetResponse(client.cid, Code.NO_OFFSET, 0)
    client.send(c.StoreOffset("app", "s", 42))
    stored = client.call(c.QueryOffset(client.next_cid(), "app", "s"))
    assert stored == c.QueryOffsetResponse(client.cid, Code.OK, 42)
    missing = client.call(c.QueryOffset(client.next_cid(), "app", "nope"))
    assert code_of(missing) == Code.STREAM_DOES_NOT_EXIST


def test_metadata_and_stats(client: Client) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    got = client.call(c.Metadata(client.next_cid(), ["s", "nope"]))
    assert isinstance(got, c.MetadataResponse)
    assert got.brokers == [c.Broker(0, "localhost", 5552)]
    assert [(s.stream, s.code) for s in got.streams] == [
        ("s", Code.OK),
        ("nope", Code.STREAM_DOES_NOT_EXIST),
    ]
    stats = client.call(c.StreamStats(client.next_cid(), "s"))
    assert stats == c.StreamStatsResponse(
        client.cid, Code.OK, {"first_chunk_id": -1, "committed_chunk_id": -1}
    )
    client.call(c.DeclarePublisher(client.next_cid(), 1, None, "s"))
    publish(client, 1, [b"a", b"b"])
    stats = client.call(c.StreamStats(client.next_cid(), "s"))
    assert isinstance(stats, c.StreamStatsResponse)
    # One publish frame is one batch: one chunk from offset 0.
    assert stats.stats == {"first_chunk_id": 0, "committed_chunk_id": 0}


def test_deleting_a_stream_tells_publishers_and_subscribers(
    server: StreamServer, client: Client
) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    other = Client(server)
    other.open()
    other.call(c.DeclarePublisher(other.next_cid(), 1, None, "s"))
    other.call(c.Subscribe(other.next_cid(), 1, "s", OffsetType.NEXT, 0, 5))
    client.call(c.Delete(client.next_cid(), "s"))
    assert other.pump() == [c.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, "s")]
    publish(other, 1, [b"x"])
    assert other.got[-1] == c.PublishError(1, [(1, Code.PUBLISHER_DOES_NOT_EXIST)])


def test_single_active_consumer_fails_over_in_order(server: StreamServer, client: Client) -> None:
    client.call(c.Create(client.next_cid(), "s", {}))
    client.call(c.DeclarePublisher(client.next_cid(), 1, None, "s"))
    # Two frames, two chunks: a subscription from offset 1 gets the second alone.
    publish(client, 1, [b"a"])
    publish(client, 1, [b"b"], first_id=2)
    props = {"single-active-consumer": "true", "name": "group"}
    second = Client(server)
    second.open()
    got = client.send(c.Subscribe(client.next_cid(), 1, "s", OffsetType.FIRST, 0, 5, props))
    assert got[0] == c.Response(Key.SUBSCRIBE, client.cid, Code.OK)
    assert isinstance(got[1], c.ConsumerUpdate)
    assert got[1].active
    # Nothing is delivered until the client says where to start.
    got = client.send(
        c.ConsumerUpdateResponse(got[1].correlation_id, Code.OK, OffsetType.OFFSET, 1)
    )
    assert [o for o, _ in delivered(got)] == [1]
    got = second.send(c.Subscribe(second.next_cid(), 3, "s", OffsetType.FIRST, 0, 5, props))
    assert got == [c.Response(Key.SUBSCRIBE, second.cid, Code.OK)]
    client.call(c.Unsubscribe(client.next_cid(), 1))
    (update,) = second.pump()
    assert isinstance(update, c.ConsumerUpdate)
    assert (update.subscription_id, update.active) == (3, True)
    got = second.send(c.ConsumerUpdateResponse(update.correlation_id, Code.OK, OffsetType.NONE, 0))
    assert [o for o, _ in delivered(got)] == [0, 1]
    no_name = client.call(
        c.Subscribe(
            client.next_cid(), 2, "s", OffsetType.FIRST, 0, 5, {"single-active-consumer": "true"}
        )
    )
    assert code_of(no_name) == Code.PRECONDITION_FAILED


def test_heartbeats_and_the_silent_peer(client: Client) -> None:
    client.now += 31
    client.tick()
    assert client.pump() == [c.Heartbeat()]
    client.now += 100
    client.tick()
    assert client.closing


def test_next_tick_is_each_timer_s_deadline_and_ticking_there_does_what_is_due(
    server: StreamServer, client: Client
) -> None:
    fresh = Client(server)
    handshake = fresh.shell.next_deadline(fresh.now)
    assert handshake is not None
    assert handshake > fresh.now + 10
    fresh.now = handshake
    fresh.tick()
    assert fresh.closing
    # Open, heartbeat 60: the heartbeat is due half an interval after the last write.
    due = client.shell.next_deadline(client.now)
    assert due is not None
    assert due == pytest.approx(client.now + 30)
    client.now = due - 0.01
    client.tick()
    assert client.pump() == []
    client.now = due
    client.tick()
    assert client.pump() == [c.Heartbeat()]
    # The client stays silent: it is dropped just after two intervals since it last spoke.
    while not client.closing:
        nxt = client.shell.next_deadline(client.now)
        assert nxt is not None
        assert nxt > client.now
        client.now = nxt
        client.tick()
        client.pump()
    assert client.now == pytest.approx(100 + 120, abs=0.01)


def test_close_from_the_client_and_from_the_broker(server: StreamServer, client: Client) -> None:
    got = client.send(c.Close(client.next_cid(), Code.OK, "bye"))
    assert got == [c.Response(Key.CLOSE, client.cid, Code.OK)]
    assert client.closing
    other = Client(server)
    other.open()
    other.shell.close(320, "shutdown", other.now)
    (close,) = other.pump()
    assert isinstance(close, c.Close)
    other.send(c.Response(Key.CLOSE, close.correlation_id, Code.OK))
    assert other.closing


_RUNNING_COMMANDS = st.sampled_from(
    [
        c.Create(1, "s", {}),
        c.Create(1, "t", {"max-length-bytes": "100"}),
        c.Delete(1, "s"),
        c.DeclarePublisher(1, 1, "r", "s"),
        c.DeclarePublisher(1, 2, None, "t"),
        c.DeletePublisher(1, 1),
        c.Publish(1, [c.PublishedMessage(1, to_amqp10(BasicProperties(), b"x"))]),
        c.Publish(2, [c.PublishedMessage(5, b"not amqp")]),
        c.QueryPublisherSequence(1, "r", "s"),
        c.Subscribe(1, 1, "s", OffsetType.FIRST, 0, 1),
        c.Subscribe(
            1, 2, "t", OffsetType.LAST, 0, 3, {"single-active-consumer": "true", "name": "g"}
        ),
        c.Credit(1, 2),
        c.Credit(2, 1),
        c.Unsubscribe(1, 1),
        c.StoreOffset("r", "s", 3),
        c.QueryOffset(1, "r", "s"),
        c.Metadata(1, ["s", "t"]),
        c.StreamStats(1, "s"),
        c.Route(1, "k", "super"),
        c.Partitions(1, "super"),
        c.ExchangeCommandVersions(1, [c.CommandVersion(Key.DELIVER, 1, 2)]),
        c.ConsumerUpdateResponse(1, Code.OK, OffsetType.FIRST, 0),
        c.Heartbeat(),
        c.Tune(0, 0),
        c.Open(1, "/"),
        c.PeerProperties(1, {}),
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commands=st.lists(_RUNNING_COMMANDS, max_size=25), open_first=st.booleans())
def test_any_command_sequence_is_answered_or_closes_cleanly(
    commands: list[c.Command], open_first: bool
) -> None:
    broker = Broker()
    broker.attach_streams(MemoryStreamBackend(RECORDS))
    server = StreamServer(broker, UserStore.with_default_user())
    cl = Client(server)
    if open_first:
        cl.open()
    for command in commands:
        cl.send(command)
        if cl.closing:
            assert cl.conn.machine.state in (ServerState.CLOSED, ServerState.AUTHENTICATING)
            break
        # Every open subscription's consumer is attached to a live stream, or waiting.
        for sub in cl.conn._subscriptions.values():
            assert sub.consumer is None or sub.consumer in sub.queue.consumers
    cl.shell.connection_lost()
    assert not server.groups
    for queue in broker.vhosts["/"].queues.values():
        assert not queue.consumers
