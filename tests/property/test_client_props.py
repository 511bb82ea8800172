"""Property tests for the client-role machine: server output split anywhere gives the same
events and columns; any frame in any state is either handled or the spec's error."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.errors import AMQPError
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.client import ClientConnection, ConnectionState, Deliveries
from leveret.protocol.amqp091.client_events import Event

FRAME_MAX = 4096
PUBLISHED = 5


def method_frame(channel: int, method: m.Method) -> bytes:
    return framing.encode_method_frame(channel, method.encode())


def ready(columns: bool) -> ClientConnection:
    """A machine after a scripted handshake: channels 1 and 2 open, 1 in confirm mode."""
    client = ClientConnection(frame_max=FRAME_MAX, deliveries=Deliveries() if columns else None)
    client.receive_data(
        method_frame(0, m.ConnectionStart(0, 9, {"product": "script"}, b"PLAIN", b"en_US"))
        + method_frame(0, m.ConnectionTune(2047, 131072, 0))
        + method_frame(0, m.ConnectionOpenOk()),
        0,
    )
    client.open_channel(1)
    client.open_channel(2)
    client.receive_data(method_frame(1, m.ChannelOpenOk()) + method_frame(2, m.ChannelOpenOk()), 0)
    client.send_method(1, m.ConfirmSelect())
    client.receive_data(method_frame(1, m.ConfirmSelectOk()), 0)
    for _ in range(PUBLISHED):
        client.publish(1, "", "q", b"x")
    client.data_to_send()
    assert client.is_open
    return client


def content(channel: int, method: m.Method, body: bytes, props: BasicProperties) -> bytes:
    return framing.encode_message_frames(
        channel, method.encode(), 60, body, props.encode(), FRAME_MAX
    )


channels = st.sampled_from([1, 2])
small_bodies = st.binary(max_size=40)
bodies = st.one_of(small_bodies, st.binary(min_size=4000, max_size=9000))
props = st.builds(
    BasicProperties,
    content_type=st.none() | st.just("text/plain"),
    headers=st.none() | st.dictionaries(st.sampled_from("abc"), st.integers(0, 9), max_size=2),
    priority=st.none() | st.integers(0, 9),
)


def deliveries_of(sizes: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.builds(
        lambda ch, tag, red, body, p: content(
            ch, m.BasicDeliver("c", tag, red, "ex", "rk"), body, p
        ),
        channels,
        st.integers(1, 2**40),
        st.booleans(),
        sizes,
        props,
    )


deliveries = deliveries_of(bodies)
others = st.one_of(
    st.builds(
        lambda ch, body, p: content(ch, m.BasicGetOk(1, False, "", "q", 0), body, p),
        channels,
        bodies,
        props,
    ),
    st.builds(
        lambda ch, body: content(
            ch, m.BasicReturn(312, "NO_ROUTE", "", "q"), body, BasicProperties()
        ),
        channels,
        bodies,
    ),
    st.builds(
        lambda tag, multiple, ack: method_frame(
            1, m.BasicAck(tag, multiple) if ack else m.BasicNack(tag, multiple)
        ),
        st.integers(1, PUBLISHED),
        st.booleans(),
        st.booleans(),
    ),
    st.just(framing.HEARTBEAT_FRAME),
    st.builds(lambda ch: method_frame(ch, m.BasicCancel(consumer_tag="c")), channels),
    st.just(method_frame(0, m.ConnectionBlocked(reason="memory"))),
    st.just(method_frame(2, m.ChannelClose(404, "NOT_FOUND", 50, 10))),
)
transcripts = st.lists(st.one_of(deliveries, others), min_size=1, max_size=8)


Outcome = tuple[list[Event], list[list[object]], bytes, type[AMQPError] | None]


def feed(columns: bool, pieces: list[bytes]) -> Outcome:
    """Events, columns, output and error (if any) after feeding ``pieces`` in turn."""
    client = ready(columns)
    events: list[Event] = []
    error: type[AMQPError] | None = None
    for piece in pieces:
        try:
            events += client.receive_data(piece, 0)
        except AMQPError as exc:
            events += client.salvaged
            error = type(exc)
            break
    d = client.deliveries
    cols = [] if d is None else [getattr(d, name) for name in Deliveries.__slots__]
    return events, cols, client.data_to_send(), error


@settings(max_examples=80, deadline=None)
@given(transcripts, st.lists(st.integers(1, 3000), max_size=12), st.booleans())
def test_any_chunking_gives_the_same_events_and_columns(
    items: list[bytes], sizes: list[int], columns: bool
) -> None:
    data = b"".join(items)
    whole = feed(columns, [data])
    pieces = []
    off = 0
    for size in sizes:
        pieces.append(data[off : off + size])
        off += size
    pieces.append(data[off:])
    assert feed(columns, pieces) == whole


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.one_of(deliveries_of(small_bodies), others), min_size=1, max_size=3), st.booleans()
)
def test_every_split_point_gives_the_same_events_and_columns(
    items: list[bytes], columns: bool
) -> None:
    data = b"".join(items)
    whole = feed(columns, [data])
    for cut in range(1, len(data)):
        assert feed(columns, [data[:cut], data[cut:]]) == whole
    assert feed(columns, [data[i : i + 1] for i in range(len(data))]) == whole


def _every_method() -> list[m.Method]:
    return [cls() for cls in m.METHODS.values()]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["start", "tune", "open-ok", "open", "channel-opening", "closing"]),
    st.booleans(),
    st.lists(
        st.one_of(
            st.builds(method_frame, st.integers(0, 3), st.sampled_from(_every_method())),
            st.builds(
                framing.encode_frame,
                st.sampled_from([1, 2, 3, 8, 9]),
                st.integers(0, 3),
                st.binary(max_size=30),
            ),
            st.binary(max_size=20),
        ),
        max_size=4,
    ),
)
def test_any_input_in_any_state_is_handled_or_the_specs_error(
    where: str, columns: bool, frames: list[bytes]
) -> None:
    client = ClientConnection(deliveries=Deliveries() if columns else None)
    start = method_frame(0, m.ConnectionStart(0, 9, {}, b"PLAIN", b"en_US"))
    script = {
        "start": b"",
        "tune": start,
        "open-ok": start + method_frame(0, m.ConnectionTune(0, 0, 0)),
    }
    if where in script:
        client.receive_data(script[where], 0)
    else:
        client.receive_data(script["open-ok"] + method_frame(0, m.ConnectionOpenOk()), 0)
        client.open_channel(1)
        if where != "channel-opening":
            client.receive_data(method_frame(1, m.ChannelOpenOk()), 0)
        if where == "closing":
            client.close()
    client.data_to_send()
    for data in frames:
        before = client.state
        try:
            client.receive_data(data, 0)
        except AMQPError:
            assert client.state in (ConnectionState.CLOSING, ConnectionState.CLOSED)
            assert before < ConnectionState.CLOSED
            sent = framing.FrameDecoder(0).feed(client.data_to_send())
            if ConnectionState.AWAIT_TUNE <= before < ConnectionState.CLOSING:
                assert isinstance(m.decode_method(sent[-1][2]), m.ConnectionClose)
            else:
                assert sent == []
        client.data_to_send()
