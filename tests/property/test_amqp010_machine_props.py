"""Property tests of the AMQP 0-10 machines: every state x every input, and the session layer
against a simple model (commands arrive once, in order, across dropped connections)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from leveret.protocol.amqp010._generated.commands import COMMANDS, QueueDeclare
from leveret.protocol.amqp010._generated.controls import CONTROLS, ConnectionStartOk
from leveret.protocol.amqp010.connection import Connection, ConnectionState, Role
from leveret.protocol.amqp010.events import CommandReceived, CommandsCompleted, Event
from leveret.protocol.amqp010.framing import PROTOCOL_HEADER, encode_command, encode_control
from leveret.protocol.amqp010.sequence import SequenceSet
from leveret.protocol.amqp010.session import Session, SessionTable
from leveret.protocol.amqp010.types import Command, Control
from tests.property.test_amqp010_codec_props import instances
from tests.unit.protocol.amqp010.pair import Pair

# Left out of the compiled pass (scripts/test): the 0-10 connection machine is not compiled.
pytestmark = pytest.mark.pure_only

# -- every state x every input ---------------------------------------------------------------


def _server_in(state: str) -> Connection:
    """A server connection driven to one of its reachable states."""
    if state == "OPEN":
        pair = Pair()
        pair.open()
        pair.client.attach(1, b"s")
        pair.client.send_command(1, QueueDeclare(queue="q"))
        pair.pump()
        return pair.server
    server = Connection(Role.SERVER)
    if state == "AWAIT_HEADER":
        return server
    server.receive_data(PROTOCOL_HEADER, 0.0)
    if state == "AWAIT_START_OK":
        return server
    server.receive_data(encode_control(0, ConnectionStartOk(mechanism="PLAIN")), 0.0)
    if state == "AUTHENTICATING":
        return server
    if state == "AWAIT_SECURE_OK":
        server.challenge(b"c")
        return server
    server.accept_auth("u")
    if state == "AWAIT_TUNE_OK":
        return server
    server.close()
    assert state == "CLOSING"
    return server


SERVER_STATES = [
    "AWAIT_HEADER",
    "AWAIT_START_OK",
    "AUTHENTICATING",
    "AWAIT_SECURE_OK",
    "AWAIT_TUNE_OK",
    "OPEN",
    "CLOSING",
]

_ops = st.sampled_from([*CONTROLS.values(), *COMMANDS.values()]).flatmap(instances)


@settings(max_examples=300, deadline=None)
@given(state=st.sampled_from(SERVER_STATES), op=_ops, channel=st.integers(0, 3), sync=st.booleans())
def test_server_takes_any_control_or_command_in_any_state(
    state: str, op: Control | Command, channel: int, sync: bool
) -> None:
    server = _server_in(state)
    if isinstance(op, Command):
        data = encode_command(channel, op, sync=sync, max_frame_size=0xFFFF)
    else:
        data = encode_control(channel, op, 0xFFFF)
    events = server.receive_data(data, 1.0)
    # It never raises; every event is an Event; the state is one of the machine's.
    assert all(isinstance(e, Event) for e in events)
    assert isinstance(server.state, ConnectionState)
    server.data_to_send()


@settings(max_examples=200, deadline=None)
@given(state=st.sampled_from(SERVER_STATES), data=st.binary(max_size=64))
def test_server_survives_arbitrary_bytes(state: str, data: bytes) -> None:
    server = _server_in(state)
    for chunk in (data[: len(data) // 2], data[len(data) // 2 :]):
        assert all(isinstance(e, Event) for e in server.receive_data(chunk, 1.0))


# -- the session layer against a model -------------------------------------------------------


class SessionModel(RuleBasedStateMachine):
    """A client sends commands; the server completes them in any order; connections drop
    and the session resumes.  The model: the list of queue names sent, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.table = SessionTable()
        self.pair = Pair(self.table)
        self.pair.open()
        self.client_session: Session = self.pair.client.attach(1, b"model")
        self.pair.client.request_timeout(1, 60)
        self.pump()
        self.sent: list[str] = []
        self.received: list[tuple[int, Any]] = []
        self.pending: list[int] = []  # received by the server, not yet completed
        self.server_completed = SequenceSet()
        self.client_told = SequenceSet()

    def pump(self) -> None:
        client_events, server_events = self.pair.pump()
        for e in server_events:
            if isinstance(e, CommandReceived):
                self.received.append((e.command_id, e.command))
                self.pending.append(e.command_id)
        for e in client_events:
            if isinstance(e, CommandsCompleted):
                self.client_told.add_set(e.commands)

    @rule(sync=st.booleans())
    def send(self, sync: bool) -> None:
        name = f"q{len(self.sent)}"
        command_id = self.pair.client.send_command(1, QueueDeclare(queue=name), sync=sync)
        assert command_id == len(self.sent)
        self.sent.append(name)

    @rule()
    def deliver(self) -> None:
        self.pump()

    @precondition(lambda self: bool(self.pending))
    @rule(data=st.data())
    def complete_one(self, data: st.DataObject) -> None:
        command_id = data.draw(st.sampled_from(self.pending))
        self.pending.remove(command_id)
        self.pair.server.complete(1, command_id)
        self.server_completed.add(command_id)

    @rule()
    def flush(self) -> None:
        self.pair.client.flush(1, completed=True)
        self.pump()

    @rule(deliver_first=st.booleans())
    def drop_and_resume(self, deliver_first: bool) -> None:
        if deliver_first:
            # The client's bytes reach the server, the server's answers are lost.
            events = self.pair.server.receive_data(self.pair.client.data_to_send(), 0.0)
            for e in events:
                if isinstance(e, CommandReceived):
                    self.received.append((e.command_id, e.command))
                    self.pending.append(e.command_id)
        self.pair.client.data_to_send()
        self.pair.server.data_to_send()
        self.pair.client.connection_lost(self.pair.now)
        self.pair.server.connection_lost(self.pair.now)
        self.pair = Pair(self.table)
        self.pair.open()
        self.pair.client.attach(1, b"model", session=self.client_session)
        self.pump()

    @invariant()
    def received_once_in_order(self) -> None:
        ids = [command_id for command_id, _ in self.received]
        assert ids == list(range(len(ids)))
        assert [c.queue for _, c in self.received] == self.sent[: len(ids)]

    @invariant()
    def completions_are_true(self) -> None:
        for lo, hi in self.client_told:
            assert self.server_completed.covers(lo, hi)

    def teardown(self) -> None:
        self.pump()
        # Everything sent has arrived exactly once by now.
        assert len(self.received) == len(self.sent)


SessionModel.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_session_layer_against_model = SessionModel.TestCase
