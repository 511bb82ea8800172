"""Unit tests of the AMQP 0-10 connection and session machines, client and server in memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.protocol.amqp010._generated.commands import (
    ExecutionSync,
    MessageAccept,
    MessageTransfer,
    QueueDeclare,
    QueueQuery,
)
from leveret.protocol.amqp010._generated.constants import (
    ExecutionErrorCode,
    SessionDetachCode,
)
from leveret.protocol.amqp010._generated.controls import (
    ConnectionClose,
    ConnectionHeartbeat,
    ConnectionTuneOk,
    SessionAttach,
    SessionCommandPoint,
    SessionFlush,
)
from leveret.protocol.amqp010._generated.structs import (
    DeliveryProperties,
    MessageProperties,
    QueueQueryResult,
)
from leveret.protocol.amqp010.connection import (
    Connection,
    ConnectionConfig,
    ConnectionState,
    Role,
)
from leveret.protocol.amqp010.errors import LocalProtocolError
from leveret.protocol.amqp010.events import (
    CommandReceived,
    CommandsCompleted,
    ConnectionClosed,
    ConnectionFailed,
    ExceptionReceived,
    Redirected,
    ResultReceived,
    SecureOkReceived,
    SecureReceived,
    SessionAttached,
    SessionDetached,
    StartOkReceived,
    StartReceived,
    Tuned,
)
from leveret.protocol.amqp010.framing import (
    PROTOCOL_HEADER,
    FrameDecoder,
    encode_command,
    encode_control,
)
from leveret.protocol.amqp010.ops import decode_control
from leveret.protocol.amqp010.sequence import SequenceSet
from leveret.protocol.amqp010.session import Session, SessionTable

from .pair import Pair

if TYPE_CHECKING:
    from leveret.protocol.amqp010.types import Value

# Left out of the compiled pass (scripts/test): the 0-10 connection machine is not compiled.
pytestmark = pytest.mark.pure_only


def _controls(data: bytes) -> list[str]:
    """Names of the controls in a byte stream (the frames of one test's output)."""
    return [decode_control(f.payload).NAME for f in FrameDecoder(0xFFFF).feed(data) if f.track == 0]


def _attached_pair(sessions: SessionTable | None = None) -> Pair:
    pair = Pair(sessions)
    pair.open()
    pair.client.attach(1, b"s1")
    client_events, server_events = pair.pump()
    assert SessionAttached(1, b"s1", False) in server_events
    assert SessionAttached(1, b"s1", False) in client_events
    return pair


def test_handshake_negotiates_tuning() -> None:
    pair = Pair(
        client_config=ConnectionConfig(heartbeat=30, max_frame_size=8192, virtual_host="/v"),
        server_config=ConnectionConfig(channel_max=100, heartbeat_min=5, heartbeat_max=20),
    )
    pair.open()
    assert pair.client.state is ConnectionState.OPEN
    assert pair.server.state is ConnectionState.OPEN
    assert Tuned(100, 8192, 20) in pair.server_events
    assert Tuned(100, 8192, 20) in pair.client_events
    assert pair.server.principal == "guest"
    start_ok = next(e for e in pair.server_events if isinstance(e, StartOkReceived))
    assert start_ok.response == b"\0guest\0guest"
    assert "guest" not in repr(start_ok)  # credentials stay out of logs


def test_sasl_challenge_round() -> None:
    pair = Pair()
    pair.client.initiate()
    pair.pump()
    pair.client.start_ok("PLAIN", b"first")
    pair.pump()
    pair.server.challenge(b"nonce")
    client_events, _ = pair.pump()
    assert client_events == [SecureReceived(b"nonce")]
    pair.client.secure_ok(b"digest")
    _, server_events = pair.pump()
    assert server_events == [SecureOkReceived(b"digest")]
    pair.server.accept_auth("alice")
    pair.pump()
    assert pair.server.state is ConnectionState.OPENING


def test_unknown_mechanism_ends_the_connection_without_a_word() -> None:
    pair = Pair()
    pair.client.initiate()
    pair.pump()
    pair.client.start_ok("KERBEROS", b"")
    _, server_events = pair.pump()
    assert server_events == [ConnectionFailed("mechanism 'KERBEROS' not offered")]
    assert pair.server.state is ConnectionState.CLOSED


def test_wrong_protocol_header_gets_ours_back() -> None:
    server = Connection(Role.SERVER)
    events = server.receive_data(b"AMQP\x00\x00\x09\x01", 0.0)
    assert isinstance(events[0], ConnectionFailed)
    assert server.data_to_send() == PROTOCOL_HEADER
    assert server.state is ConnectionState.CLOSED


def _server_awaiting_tune_ok() -> Connection:
    server = Connection(Role.SERVER, ConnectionConfig(channel_max=10))
    server.receive_data(PROTOCOL_HEADER, 0.0)
    from leveret.protocol.amqp010._generated.controls import ConnectionStartOk

    server.receive_data(encode_control(0, ConnectionStartOk(mechanism="PLAIN", response=b"")), 0)
    server.accept_auth("guest")
    server.data_to_send()
    return server


@pytest.mark.parametrize(
    "tune_ok",
    [
        ConnectionTuneOk(channel_max=11),
        ConnectionTuneOk(max_frame_size=100),
        ConnectionTuneOk(heartbeat=601),
    ],
)
def test_bad_tune_ok_closes_with_framing_error(tune_ok: ConnectionTuneOk) -> None:
    server = _server_awaiting_tune_ok()
    server.receive_data(encode_control(0, tune_ok), 1.0)
    assert server.state is ConnectionState.CLOSING
    assert _controls(server.data_to_send()) == ["connection.close"]


def test_tune_ok_without_values_takes_the_servers() -> None:
    # qpid-python's low-level client sends tune-ok with the heartbeat only.
    server = _server_awaiting_tune_ok()
    events = server.receive_data(encode_control(0, ConnectionTuneOk(heartbeat=None)), 1.0)
    assert events == [Tuned(10, 0xFFFF, 0)]


def test_garbage_after_the_handshake_is_a_framing_error() -> None:
    pair = _attached_pair()
    events = pair.server.receive_data(b"\xff" * 12, 1.0)
    assert events == [ConnectionFailed("frame flags 0xff: not a 0-10 frame")]
    data = pair.server.data_to_send()
    assert _controls(data) == ["connection.close"]
    (closed,) = pair.client.receive_data(data, 1.0)
    assert isinstance(closed, ConnectionClosed)
    assert closed.reply_code == 501
    assert pair.server.state is ConnectionState.CLOSED


def test_a_bad_control_closes_with_a_handshake() -> None:
    pair = _attached_pair()
    pair.server.receive_data(encode_control(0, ConnectionTuneOk()), 1.0)
    _, server_events = pair.pump()
    assert server_events == [ConnectionClosed(200, "", False)]
    assert pair.client_events[-1] == ConnectionClosed(
        501, "unexpected connection.tune-ok in state OPEN", True
    )


def test_heartbeats_are_sent_when_idle_and_silence_is_fatal() -> None:
    pair = Pair(
        client_config=ConnectionConfig(heartbeat=10),
        server_config=ConnectionConfig(heartbeat_min=1, heartbeat_max=60),
    )
    pair.open()
    server = pair.server
    assert server.next_timer() == 10.0
    server.data_to_send()
    assert server.handle_timer(10.0) == []  # it sent open-ok since: no heartbeat needed
    assert server.data_to_send() == b""
    server.receive_data(encode_control(0, ConnectionHeartbeat()), 15.0)
    assert server.handle_timer(20.0) == []
    assert _controls(server.data_to_send()) == ["connection.heartbeat"]
    assert server.next_timer() == 30.0
    assert server.handle_timer(35.0) == [ConnectionFailed("heartbeat timeout")]
    assert server.next_timer() is None


def test_close_handshake() -> None:
    pair = _attached_pair()
    pair.client.close(200, "done")
    client_events, server_events = pair.pump()
    assert server_events == [ConnectionClosed(200, "done", True)]
    assert client_events == [ConnectionClosed(200, "", False)]


def test_redirect_is_reported() -> None:
    client = Connection(Role.CLIENT)
    client.initiate()
    server = Connection(Role.SERVER)
    server.receive_data(client.data_to_send(), 0)
    client.receive_data(server.data_to_send(), 0)
    client.start_ok("PLAIN", b"")
    server.receive_data(client.data_to_send(), 0)
    server.accept_auth("u")
    client.receive_data(server.data_to_send(), 0)
    server.receive_data(client.data_to_send(), 0)
    from leveret.protocol.amqp010._generated.controls import ConnectionRedirect

    events = client.receive_data(encode_control(0, ConnectionRedirect("b:5672", ["b"])), 0)
    assert events == [Redirected("b:5672", ["b"])]


def test_commands_are_numbered_delivered_and_completed() -> None:
    pair = _attached_pair()
    first = pair.client.send_command(1, QueueDeclare(queue="q"))
    second = pair.client.send_command(1, QueueDeclare(queue="r"), sync=True)
    _, server_events = pair.pump()
    received = [e for e in server_events if isinstance(e, CommandReceived)]
    assert [(e.command_id, e.command, e.sync) for e in received] == [
        (0, QueueDeclare(queue="q"), False),
        (1, QueueDeclare(queue="r"), True),
    ]
    assert (first, second) == (0, 1)
    pair.server.complete(1, 1)
    client_events, _ = pair.pump()
    assert client_events == [CommandsCompleted(1, SequenceSet.of(1))]
    server_session = pair.server.session(1)
    assert server_session is not None
    assert not server_session.completed  # the client's known-completed trimmed it
    pair.server.complete(1, 0)
    pair.server.send_completed(1)
    client_events, _ = pair.pump()
    assert client_events == [CommandsCompleted(1, SequenceSet.of(0))]
    client_session = pair.client.session(1)
    assert client_session is not None
    assert client_session.unacked == {}
    with pytest.raises(LocalProtocolError):
        pair.server.complete(1, 0)


def test_execution_sync_waits_for_earlier_commands() -> None:
    pair = _attached_pair()
    pair.client.send_command(1, QueueDeclare(queue="q"))
    sync_id = pair.client.send_command(1, ExecutionSync(), sync=True)
    client_events, _ = pair.pump()
    assert client_events == []  # the declare is not complete, so neither is the sync
    pair.server.complete(1, 0)
    client_events, _ = pair.pump()
    assert client_events == [CommandsCompleted(1, SequenceSet([(0, sync_id)]))]


def test_results_and_exceptions_reach_the_client() -> None:
    pair = _attached_pair()
    query = pair.client.send_command(1, QueueQuery(queue="q"), sync=True)
    pair.pump()
    result = QueueQueryResult(queue="q", message_count=3, subscriber_count=0)
    pair.server.send_result(1, query, result)
    pair.server.complete(1, query)
    missing = pair.client.send_command(1, QueueQuery(queue="nope"))
    client_events, _ = pair.pump()
    assert ResultReceived(1, query, result) in client_events
    pair.server.send_exception(
        1,
        int(ExecutionErrorCode.NOT_FOUND),
        "no queue",
        command_id=missing,
        command=QueueQuery(queue="nope"),
    )
    client_events, _ = pair.pump()
    (exc,) = [e for e in client_events if isinstance(e, ExceptionReceived)]
    assert exc.exception.error_code == 404
    assert (exc.exception.class_code, exc.exception.command_code) == (8, 4)
    # After an exception the server's session ignores further commands.
    pair.client.send_command(1, QueueDeclare(queue="ignored"))
    _, server_events = pair.pump()
    assert server_events == []


def test_undecodable_command_is_answered_with_command_invalid() -> None:
    pair = _attached_pair()
    pair.client.send_command(1, QueueDeclare(queue="q"))  # sends the command-point
    pair.pump()
    bad = encode_command(1, b"\x08\x01\x01\x00\xff\xff", max_frame_size=4096)
    pair.server.receive_data(bad, 0)
    client_events, _ = pair.pump()
    (exc,) = [e for e in client_events if isinstance(e, ExceptionReceived)]
    assert exc.exception.error_code == int(ExecutionErrorCode.COMMAND_INVALID)
    assert exc.exception.command_id == 1


def test_command_before_command_point_detaches_with_unknown_ids() -> None:
    pair = _attached_pair()
    raw = encode_command(1, QueueDeclare(queue="q"), max_frame_size=4096)
    events = pair.server.receive_data(raw, 0)
    code = int(SessionDetachCode.UNKNOWN_IDS)
    assert events == [SessionDetached(1, b"s1", code, False)]
    assert _controls(pair.server.data_to_send()) == ["session.detached"]


def test_controls_on_an_unattached_channel_get_not_attached() -> None:
    pair = _attached_pair()
    pair.server.receive_data(encode_control(5, SessionFlush(completed=True)), 0)
    pair.server.receive_data(encode_command(6, MessageAccept(SequenceSet.of(1))), 0)
    assert _controls(pair.server.data_to_send()) == ["session.detached", "session.detached"]


def test_flush_is_answered_with_the_sets_asked_for() -> None:
    pair = _attached_pair()
    pair.client.send_command(1, QueueDeclare(queue="q"))
    pair.pump()
    pair.server.complete(1, 0)
    pair.server.receive_data(
        encode_control(1, SessionFlush(expected=True, confirmed=True, completed=True)), 0
    )
    assert _controls(pair.server.data_to_send()) == [
        "session.expected",
        "session.confirmed",
        "session.completed",
    ]


def test_session_timeout_is_granted_up_to_the_limit() -> None:
    pair = _attached_pair()
    pair.client.request_timeout(1, 10**6)
    pair.pump()
    server_session = pair.server.session(1)
    client_session = pair.client.session(1)
    assert server_session is not None
    assert client_session is not None
    assert server_session.timeout == 3600
    assert client_session.timeout == 3600


def test_detach_by_client_and_reattach_of_busy_names() -> None:
    table = SessionTable()
    pair = _attached_pair(table)
    other = Pair(table)
    other.open()
    other.client.attach(2, b"s1")  # same principal, same name, no force: busy
    client_events, _ = other.pump()
    busy = int(SessionDetachCode.SESSION_BUSY)
    assert client_events == [SessionDetached(2, b"s1", busy, True)]
    other.client.attach(2, b"s1", force=True)
    client_events, server_events = other.pump()
    assert SessionAttached(2, b"s1", True) in server_events
    assert pair.server.pending_events() == [SessionDetached(1, b"s1", busy, False)]
    first_client_events, _ = pair.pump()
    assert first_client_events == [SessionDetached(1, b"s1", busy, True)]
    other.client.detach(2)
    client_events, server_events = other.pump()
    normal = int(SessionDetachCode.NORMAL)
    assert client_events == [SessionDetached(2, b"s1", normal, False)]
    assert server_events == [SessionDetached(2, b"s1", normal, True)]
    assert len(table) == 0  # no timeout: nothing kept


def test_the_broker_answers_the_peers_detach() -> None:
    """With ``broker_answers_detach`` session.detached waits for ``answer_detach``."""
    pair = Pair(server_config=ConnectionConfig(broker_answers_detach=True))
    pair.open()
    pair.client.attach(1, b"s1")
    pair.pump()
    pair.client.detach(1)
    client_events, server_events = pair.pump()
    normal = int(SessionDetachCode.NORMAL)
    assert server_events == [SessionDetached(1, b"s1", normal, True)]
    assert client_events == []
    pair.server.answer_detach(1)
    client_events, _ = pair.pump()
    assert client_events == [SessionDetached(1, b"s1", normal, False)]
    pair.server.answer_detach(1)  # answered: nothing more
    assert pair.server.data_to_send() == b""


def test_the_broker_answers_the_peers_close() -> None:
    """With ``broker_answers_close`` the peer's connection.close detaches every session
    first (one with a time-out kept for resume), then waits for ``answer_close``; what
    the peer sends meanwhile is not read."""
    table = SessionTable()
    pair = Pair(table, server_config=ConnectionConfig(broker_answers_close=True))
    pair.open()
    pair.client.attach(1, b"s1")
    pair.client.attach(2, b"s2")
    pair.client.request_timeout(2, 60)
    pair.pump()
    pair.client.close(200, "done")
    client_events, server_events = pair.pump()
    normal = int(SessionDetachCode.NORMAL)
    assert server_events == [
        SessionDetached(1, b"s1", normal, True),
        SessionDetached(2, b"s2", normal, True),
        ConnectionClosed(200, "done", True),
    ]
    assert client_events == []
    assert pair.server.state is ConnectionState.CLOSE_RECEIVED
    assert pair.server.session(1) is None
    assert table.get("guest", b"s1") is None
    assert table.get("guest", b"s2") is not None  # kept for resume
    late = encode_control(3, SessionAttach(name=b"s3")) + encode_control(0, ConnectionClose())
    assert pair.server.receive_data(late, 1.0) == []
    assert pair.server.data_to_send() == b""
    server = pair.server  # read afresh: answer_close changes its state
    server.answer_close()
    client_events, _ = pair.pump()
    assert client_events == [ConnectionClosed(200, "", False)]
    assert server.state is ConnectionState.CLOSED
    server.answer_close()  # answered: nothing more
    assert server.data_to_send() == b""


def test_the_owners_close_answers_an_unanswered_close() -> None:
    """A broker closing the connection (a shutdown) with the peer's close unanswered sends
    close-ok, not a close of its own."""
    pair = Pair(server_config=ConnectionConfig(broker_answers_close=True))
    pair.open()
    pair.client.close()
    pair.pump()
    pair.server.close(320, "shutdown")
    assert _controls(pair.server.data_to_send()) == ["connection.close-ok"]
    assert pair.server.state is ConnectionState.CLOSED


def test_the_broker_answers_a_close_before_open_at_once() -> None:
    """Before the connection is open there are no sessions: close-ok goes at once."""
    client = Connection(Role.CLIENT)
    client.initiate()
    server = Connection(Role.SERVER, ConnectionConfig(broker_answers_close=True))
    assert server.receive_data(client.data_to_send(), 0) == []
    client.receive_data(server.data_to_send(), 0)
    client.close()
    assert server.receive_data(client.data_to_send(), 0) == [ConnectionClosed(200, "", True)]
    assert _controls(server.data_to_send()) == ["connection.close-ok"]
    assert server.state is ConnectionState.CLOSED


def test_transfer_header_and_body_cross_small_frames() -> None:
    pair = Pair(client_config=ConnectionConfig(max_frame_size=4096))
    pair.open()
    pair.client.attach(0, b"t")
    pair.pump()
    body = bytes(range(256)) * 40
    headers = [DeliveryProperties(routing_key="k", delivery_mode=2), MessageProperties()]
    pair.client.send_command(0, MessageTransfer("amq.direct", 0, 0), header=headers, body=body)
    _, server_events = pair.pump()
    (transfer,) = [e for e in server_events if isinstance(e, CommandReceived)]
    assert transfer.body == body
    assert transfer.header_structs() == headers


def test_resume_replays_what_was_not_completed_and_drops_duplicates() -> None:
    table = SessionTable()
    pair = _attached_pair(table)
    pair.client.request_timeout(1, 60)
    pair.pump()
    for name in ("a", "b", "c"):
        pair.client.send_command(1, QueueDeclare(queue=name))
    pair.pump()
    pair.server.complete(1, 0)
    pair.server.send_completed(1)
    pair.pump()
    seen = pair.server.send_command(1, MessageTransfer("x", 0, 0), body=b"m")
    pair.pump()  # the client got this transfer but has not completed it
    lost = pair.server.send_command(1, MessageTransfer("x", 0, 0), body=b"n")
    pair.server.data_to_send()  # ... and never got this one
    pair.client.send_command(1, QueueDeclare(queue="d"))  # lost with the connection
    pair.client.data_to_send()
    client_session = pair.client.session(1)
    assert client_session is not None
    pair.client.connection_lost(5.0)
    assert pair.server.connection_lost(5.0) == [SessionDetached(1, b"s1", 0, True)]
    assert table.get("guest", b"s1") is not None

    again = Pair(table)
    again.now = 10.0
    again.open()
    again.client.attach(3, b"s1", session=client_session)
    client_events, server_events = again.pump()
    assert SessionAttached(3, b"s1", True) in server_events
    received = [e for e in server_events if isinstance(e, CommandReceived)]
    # b and c were received before and are not run twice; d was lost and arrives now.
    assert [(e.command_id, e.command) for e in received] == [(3, QueueDeclare(queue="d"))]
    replayed = [e for e in client_events if isinstance(e, CommandReceived)]
    assert [(e.command_id, e.body) for e in replayed] == [(lost, b"n")]
    assert seen in client_session.incomplete  # still the client's to complete, once
    assert table.expire(10.0 + 3600) == []  # attached sessions never expire


def test_detached_sessions_expire_after_their_timeout() -> None:
    table = SessionTable()
    pair = _attached_pair(table)
    pair.client.request_timeout(1, 30)
    pair.pump()
    pair.server.connection_lost(100.0)
    assert table.next_expiry() == 130.0
    assert table.expire(129.0) == []
    (gone,) = table.expire(130.0)
    assert isinstance(gone, Session)
    assert gone.name == b"s1"
    assert len(table) == 0


def test_misuse_is_a_local_error() -> None:
    client = Connection(Role.CLIENT)
    with pytest.raises(LocalProtocolError):
        client.accept_auth("x")
    with pytest.raises(LocalProtocolError):
        client.send_command(0, ExecutionSync())
    server = Connection(Role.SERVER)
    with pytest.raises(LocalProtocolError):
        server.initiate()
    with pytest.raises(LocalProtocolError):
        server.attach(0, b"x")


def test_command_point_with_offset_is_refused() -> None:
    pair = _attached_pair()
    pair.server.receive_data(
        encode_control(1, SessionCommandPoint(command_id=0, command_offset=5)), 0
    )
    assert _controls(pair.server.data_to_send()) == ["connection.close"]


def test_start_is_reported_to_the_client() -> None:
    pair = Pair()
    pair.client.initiate()
    client_events, _ = pair.pump()
    props: dict[str, Value] = {"product": "leveret", "platform": "Python"}
    assert client_events == [StartReceived(props, ["PLAIN", "ANONYMOUS"], ["en_US"])]


def test_resume_after_out_of_order_completion_renumbers_after_the_gap() -> None:
    # Found by the session model: with 1 completed and 0 not, the replay is [0] alone and
    # the next new command (2) needs its own command-point.
    table = SessionTable()
    pair = _attached_pair(table)
    pair.client.request_timeout(1, 60)
    pair.pump()
    client_session = pair.client.session(1)
    assert client_session is not None
    pair.client.send_command(1, QueueDeclare(queue="a"))
    pair.client.send_command(1, QueueDeclare(queue="b"))
    pair.pump()
    pair.server.complete(1, 1)
    pair.server.send_completed(1)
    pair.pump()
    pair.client.connection_lost(1.0)
    pair.server.connection_lost(1.0)
    again = Pair(table)
    again.open()
    again.client.attach(1, b"s1", session=client_session)
    again.pump()
    again.client.send_command(1, QueueDeclare(queue="c"))
    _, server_events = again.pump()
    received = [(e.command_id, e.command) for e in server_events if isinstance(e, CommandReceived)]
    assert received == [(2, QueueDeclare(queue="c"))]
