"""The stream protocol's client-role machine against a scripted server (a server-role codec)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.client import RECEIVE_MAX, ClientConnection, ClientState
from leveret.protocol.rabbitstream.codec import Role, StreamCodec
from leveret.protocol.rabbitstream.constants import Code, Key
from leveret.protocol.rabbitstream.errors import StreamProtocolError

# Left out of the compiled pass (scripts/test): the stream protocol's client is not compiled.
pytestmark = pytest.mark.pure_only


class Server:
    """A scripted server: decodes what the client sends and answers by hand."""

    def __init__(self) -> None:
        self.codec = StreamCodec(Role.SERVER)

    def read(self, client: ClientConnection) -> list[c.Command]:
        return self.codec.receive(client.data_to_send())


def _answers(server: Server, client: ClientConnection, *, tune: tuple[int, int]) -> bytes:
    """Every server frame of a successful handshake, answering the client's requests."""
    out = b""
    (props,) = server.read(client)
    assert isinstance(props, c.PeerProperties)
    out += c.PeerPropertiesResponse(props.correlation_id, Code.OK, {"product": "X"}).encode()
    client.receive_data(out, 0.0)
    (hs,) = server.read(client)
    assert isinstance(hs, c.SaslHandshake)
    step = c.SaslHandshakeResponse(hs.correlation_id, Code.OK, ["PLAIN", "AMQPLAIN"]).encode()
    client.receive_data(step, 0.0)
    out += step
    (auth,) = server.read(client)
    assert isinstance(auth, c.SaslAuthenticate)
    assert auth.mechanism == "PLAIN"
    assert auth.data == b"\x00guest\x00secret"
    step = c.SaslAuthenticateResponse(auth.correlation_id, Code.OK).encode()
    step += c.Tune(*tune).encode()
    client.receive_data(step, 0.0)
    out += step
    tuned, opened = server.read(client)
    assert isinstance(tuned, c.Tune)
    assert isinstance(opened, c.Open)
    assert opened.virtual_host == "vh"
    step = c.OpenResponse(opened.correlation_id, Code.OK, {"advertised_port": "5552"}).encode()
    client.receive_data(step, 0.0)
    return out + step


def _client(**kw: int) -> ClientConnection:
    return ClientConnection("guest", "secret", "vh", **kw)  # type: ignore[arg-type]


def test_handshake_negotiates_tune_and_opens() -> None:
    client = _client(frame_max=1 << 20, heartbeat=0)
    server = Server()
    _answers(server, client, tune=(65536, 60))
    assert client.state is ClientState.OPEN
    assert client.frame_max == 65536  # the lower of both
    assert client.heartbeat == 60  # ours was 0: theirs
    assert client.codec.frame_max == RECEIVE_MAX  # a deliver is a whole chunk: any size
    assert client.server_properties == {"product": "X"}
    assert client.open_properties == {"advertised_port": "5552"}


def test_tune_answer_carries_the_negotiated_values() -> None:
    client = _client(frame_max=4096, heartbeat=10)
    server = Server()
    server.read(client)  # peer properties
    client.receive_data(c.PeerPropertiesResponse(1, Code.OK, {}).encode(), 0.0)
    server.read(client)
    client.receive_data(c.SaslHandshakeResponse(2, Code.OK, ["PLAIN"]).encode(), 0.0)
    server.read(client)
    client.receive_data(
        c.SaslAuthenticateResponse(3, Code.OK).encode() + c.Tune(1 << 20, 60).encode(), 0.0
    )
    tuned, _open = server.read(client)
    assert tuned == c.Tune(4096, 10)


@pytest.mark.parametrize(
    ("step", "code", "what"),
    [
        (3, Code.AUTHENTICATION_FAILURE, "authentication"),
        (3, Code.SASL_AUTHENTICATION_FAILURE_LOOPBACK, "authentication"),
        (4, Code.VIRTUAL_HOST_ACCESS_FAILURE, "open"),
    ],
)
def test_refusals_end_closed_with_the_code(step: int, code: int, what: str) -> None:
    client = _client()
    server = Server()
    server.read(client)
    client.receive_data(c.PeerPropertiesResponse(1, Code.OK, {}).encode(), 0.0)
    server.read(client)
    client.receive_data(c.SaslHandshakeResponse(2, Code.OK, ["PLAIN"]).encode(), 0.0)
    server.read(client)
    if step == 3:
        client.receive_data(c.SaslAuthenticateResponse(3, code).encode(), 0.0)
    else:
        client.receive_data(
            c.SaslAuthenticateResponse(3, Code.OK).encode() + c.Tune(0, 0).encode(), 0.0
        )
        server.read(client)
        client.receive_data(c.OpenResponse(4, code).encode(), 0.0)
    assert client.state is ClientState.CLOSED
    assert client.refused == (what, code)


def test_no_plain_mechanism_is_a_refusal() -> None:
    client = _client()
    Server().read(client)
    client.receive_data(c.PeerPropertiesResponse(1, Code.OK, {}).encode(), 0.0)
    client.data_to_send()
    client.receive_data(c.SaslHandshakeResponse(2, Code.OK, ["EXTERNAL"]).encode(), 0.0)
    assert client.state is ClientState.CLOSED
    assert client.refused == ("sasl handshake", Code.SASL_MECHANISM_NOT_SUPPORTED)


def _open_client() -> tuple[ClientConnection, Server]:
    client = _client()
    server = Server()
    _answers(server, client, tune=(1 << 20, 0))
    return client, server


def test_requests_get_correlation_ids_and_responses_come_back() -> None:
    client, server = _open_client()
    cid = client.request(lambda i: c.Metadata(i, ["s"]))
    (sent,) = server.read(client)
    assert sent == c.Metadata(cid, ["s"])
    answer = c.MetadataResponse(cid, [c.Broker(0, "h", 5552)], [c.StreamMetadata("s", 1, 0, [])])
    deliver = c.Deliver(1, b"chunk")
    assert client.receive_data(answer.encode() + deliver.encode(), 0.0) == [answer, deliver]
    client.send(c.Credit(1, 3))
    assert server.read(client) == [c.Credit(1, 3)]


def test_the_servers_close_is_answered_and_returned() -> None:
    client, server = _open_client()
    got = client.receive_data(c.Close(9, Code.INTERNAL_ERROR, "bye").encode(), 0.0)
    assert got == [c.Close(9, Code.INTERNAL_ERROR, "bye")]
    assert client.state is ClientState.CLOSED
    assert (client.close_code, client.close_reason) == (Code.INTERNAL_ERROR, "bye")
    assert server.read(client) == [c.Response(Key.CLOSE, 9, Code.OK)]
    with pytest.raises(RuntimeError):
        client.request(lambda i: c.Metadata(i, []))


def test_our_close_waits_for_its_response_and_drops_the_rest() -> None:
    client, server = _open_client()
    client.close("done")
    (close,) = server.read(client)
    assert isinstance(close, c.Close)
    assert client.state is ClientState.CLOSING
    late = c.Deliver(1, b"late").encode()
    response = c.Response(Key.CLOSE, close.correlation_id, Code.OK).encode()
    assert client.receive_data(late + response, 0.0) == []
    assert client.closed


def test_heartbeats() -> None:
    client = _client(heartbeat=10)
    server = Server()
    _answers(server, client, tune=(0, 10))
    client.sent(0.0)
    assert client.tick(4.0)
    assert client.data_to_send() == b""
    assert client.tick(5.0)
    assert server.read(client) == [c.Heartbeat()]
    client.receive_data(c.Heartbeat().encode(), 15.0)  # not returned
    assert client.tick(34.0)
    assert not client.tick(36.0)  # two silent intervals


def test_a_bad_frame_closes_with_the_codecs_code() -> None:
    client, server = _open_client()
    with pytest.raises(StreamProtocolError) as info:
        client.receive_data(b"\x00\x00\x00\x04\x7f\x00\x00\x01", 0.0)  # unknown key
    assert client.state is ClientState.CLOSED
    (close,) = server.read(client)
    assert isinstance(close, c.Close)
    assert close.code == info.value.code == Code.UNKNOWN_FRAME


def test_a_deliver_over_frame_max_is_taken_up_to_receive_max() -> None:
    # A deliver is one whole chunk, as big as the writer batched it (RabbitMQ 3.10 and
    # Leveret send it whatever frame_max says); only receive_max bounds what is buffered.
    client = _client(frame_max=4096, receive_max=1 << 16)
    server = Server()
    _answers(server, client, tune=(1 << 20, 0))
    assert client.frame_max == 4096
    big = c.Deliver(1, b"x" * 10_000)
    assert client.receive_data(big.encode(), 0.0) == [big]
    with pytest.raises(StreamProtocolError) as info:
        client.receive_data(c.Deliver(1, b"x" * (1 << 16)).encode()[:100], 0.0)
    assert info.value.code == Code.FRAME_TOO_LARGE
    assert client.state is ClientState.CLOSED
    (close,) = server.read(client)
    assert isinstance(close, c.Close)
    assert close.code == Code.FRAME_TOO_LARGE


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_the_handshake_split_anywhere_gives_the_same_result(data: st.DataObject) -> None:
    """The server's bytes of a whole handshake, fed to a fresh client in random pieces."""
    reference = _client()
    frames = _answers(Server(), reference, tune=(65536, 30))
    client = _client()
    client.data_to_send()
    at = 0
    while at < len(frames):
        size = data.draw(st.integers(1, len(frames) - at))
        assert client.receive_data(frames[at : at + size], 0.0) == []
        at += size
    assert client.state is ClientState.OPEN
    assert (client.frame_max, client.heartbeat) == (65536, 30)
    assert client.server_properties == reference.server_properties
