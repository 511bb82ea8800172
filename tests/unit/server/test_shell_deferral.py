"""The shell's deferral (``Shell.defer``) through the 0-9-1 front end, with a completion the
test resolves by hand, as the cluster's metadata store or a peer node will: the deferred
method's channel waits (its later frames are held, in order), the connection's other
channels go on, input past ``HOLD_BOUND`` stays in the transport, and the reply goes out
when the completion is done, before what was held."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import pytest

from leveret.errors import PreconditionFailed
from leveret.model.broker import Broker
from leveret.model.completion import Completion
from leveret.protocol.amqp091._generated import methods as m
from leveret.server.amqp091 import handlers
from leveret.server.shell.shell import HOLD_BOUND
from leveret.testing import CodecClient
from leveret.testing.client import feed, new_shell, run_turns

if TYPE_CHECKING:
    from leveret.server.amqp091.channel import Channel
    from leveret.server.amqp091.connection import AMQP091Connection
    from leveret.server.shell.info import ChannelInfo
    from leveret.server.shell.shell import Shell


class Deferring:
    """queue.declare answered only when the test resolves its completion (with the name)."""

    def __init__(self, *, whole_connection: bool = False) -> None:
        self.pending: list[Completion[str]] = []
        self.whole_connection = whole_connection

    def __call__(self, channel: Channel, method: m.Method) -> None:
        assert isinstance(method, m.QueueDeclare)
        conn = cast("AMQP091Connection", channel.conn)
        completion: Completion[str] = Completion()
        self.pending.append(completion)

        def reply(name: str) -> None:
            conn.send_method(channel.id, m.QueueDeclareOk(queue=name))

        if self.whole_connection:
            conn.shell.defer(completion, lambda done: reply(done.result()))
        else:
            conn.defer(channel, completion, reply, class_id=50, method_id=10)


@pytest.fixture
def deferring(monkeypatch: pytest.MonkeyPatch) -> Deferring:
    handler = Deferring()
    monkeypatch.setitem(handlers.HANDLERS, m.QueueDeclare.INDEX, handler)
    return handler


def reading(client: CodecClient) -> bool:
    # A call, not the property: the type checker would keep an earlier assert's answer.
    return client.shell.reading


def _client(broker: Broker | None = None) -> CodecClient:
    client = CodecClient.connect(broker)
    client.handshake()
    client.open_channel(1)
    client.open_channel(2)
    return client


def test_the_channel_waits_and_the_reply_goes_before_what_it_held(deferring: Deferring) -> None:
    client = _client()
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(1, m.BasicQos(prefetch_count=5))
    client.send(1, m.ExchangeDeclare(exchange="x", type="fanout"))
    assert client.frames() == []
    # Another channel of the same connection is not held.
    client.send(2, m.ExchangeDeclare(exchange="y", type="direct"))
    client.expect(2, m.ExchangeDeclareOk)
    client.expect_nothing()
    (completion,) = deferring.pending
    completion.resolve("q")
    assert client.methods() == [
        (1, m.QueueDeclareOk(queue="q")),
        (1, m.BasicQosOk()),
        (1, m.ExchangeDeclareOk()),
    ]
    # Input flows again, and in order.
    client.send(1, m.BasicQos(prefetch_count=1))
    client.expect(1, m.BasicQosOk)


def test_a_failed_completion_closes_the_channel_with_its_error(deferring: Deferring) -> None:
    client = _client()
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(1, m.BasicQos(prefetch_count=5))
    deferring.pending[0].fail(PreconditionFailed("inequivalent arg 'durable' for queue 'q'"))
    close = client.expect(1, m.ChannelClose)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 50, 10)
    assert "inequivalent arg" in close.reply_text
    client.expect_nothing()  # what the channel held died with it
    client.send(2, m.BasicQos(prefetch_count=1))
    client.expect(2, m.BasicQosOk)


def test_two_deferrals_on_a_channel_answer_in_order(deferring: Deferring) -> None:
    client = _client()
    client.send(1, m.QueueDeclare(queue="a"))
    client.send(1, m.QueueDeclare(queue="b"))
    assert len(deferring.pending) == 1  # the second waits behind the first
    deferring.pending[0].resolve("a")
    assert client.methods() == [(1, m.QueueDeclareOk(queue="a"))]
    assert len(deferring.pending) == 2
    deferring.pending[1].resolve("b")
    assert client.methods() == [(1, m.QueueDeclareOk(queue="b"))]


def test_input_past_the_bound_stays_in_the_transport(deferring: Deferring) -> None:
    broker = Broker()
    broker.vhosts["/"].declare_queue("target", owner=None)
    client = _client(broker)
    client.send(1, m.QueueDeclare(queue="q"))
    assert reading(client)
    body = b"x" * 1024
    n = HOLD_BOUND // len(body) + 8
    publishes = b"".join(client.encode_publish(1, "", "target", body) for _ in range(n))
    client.send_raw(publishes)
    assert not reading(client)  # the adapter pauses the socket
    assert broker.vhosts["/"].queues["target"].message_count == 0
    deferring.pending[0].resolve("q")
    assert client.methods() == [(1, m.QueueDeclareOk(queue="q"))]
    assert reading(client)
    assert broker.vhosts["/"].queues["target"].message_count == n


def test_a_deferral_of_the_whole_connection_holds_every_channel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deferring = Deferring(whole_connection=True)
    monkeypatch.setitem(handlers.HANDLERS, m.QueueDeclare.INDEX, deferring)
    client = _client()
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(2, m.BasicQos(prefetch_count=5))
    client.expect_nothing()
    deferring.pending[0].resolve("q")
    assert client.methods() == [(1, m.QueueDeclareOk(queue="q")), (2, m.BasicQosOk())]


def test_a_whole_connection_deferral_made_by_held_input_holds_the_rest_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Held input handled at the release defers the connection again (a publisher paced
    # by the cluster link's window does, at each release): what is left of it stays
    # held, in order, its bytes counted, and is handled at the next release.
    deferring = Deferring(whole_connection=True)
    monkeypatch.setitem(handlers.HANDLERS, m.QueueDeclare.INDEX, deferring)
    client = _client()
    client.send_raw(  # one read: what follows "a" is held by the front end
        client.encode(1, m.QueueDeclare(queue="a"))
        + client.encode(1, m.QueueDeclare(queue="b"))
        + client.encode(2, m.BasicQos(prefetch_count=5))
        + client.encode(1, m.QueueDeclare(queue="c"))
    )
    front = cast("AMQP091Connection", client.shell.front)
    held = front.held_size
    assert held > 0
    deferring.pending[0].resolve("a")
    assert client.methods() == [(1, m.QueueDeclareOk(queue="a"))]
    assert len(deferring.pending) == 2  # "b" defers; the Qos and "c" wait behind it
    assert 0 < front.held_size < held
    deferring.pending[1].resolve("b")
    assert client.methods() == [(1, m.QueueDeclareOk(queue="b")), (2, m.BasicQosOk())]
    assert len(deferring.pending) == 3
    assert front.held_size == 0
    deferring.pending[2].resolve("c")
    assert client.methods() == [(1, m.QueueDeclareOk(queue="c"))]


def test_a_completion_done_already_answers_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def declare(channel: Channel, method: m.Method) -> None:
        conn = cast("AMQP091Connection", channel.conn)
        reply = conn.send_method
        conn.defer(channel, Completion.of("q"), lambda name: reply(1, m.QueueDeclareOk(queue=name)))

    monkeypatch.setitem(handlers.HANDLERS, m.QueueDeclare.INDEX, declare)
    client = _client()
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(1, m.BasicQos(prefetch_count=5))
    assert client.methods() == [(1, m.QueueDeclareOk(queue="q")), (1, m.BasicQosOk())]


def test_a_connection_that_closes_while_waiting_gets_no_reply(deferring: Deferring) -> None:
    client = _client()
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(0, m.ConnectionClose(reply_code=200))
    client.expect(0, m.ConnectionCloseOk)
    assert client.closed
    deferring.pending[0].resolve("q")
    client.expect_nothing()
    assert client.shell.internal_errors == 0


def test_a_whole_connection_deferral_reads_no_more_while_earlier_input_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As a publisher held by the cluster link's window is, again and again: each deferral
    # starts the bound's count afresh, so input that waits already must stop the reading.
    deferring = Deferring(whole_connection=True)
    monkeypatch.setitem(handlers.HANDLERS, m.QueueDeclare.INDEX, deferring)
    broker = Broker()
    broker.vhosts["/"].declare_queue("target", owner=None)
    client = _client(broker)
    n = 400  # three frames each: more than one turn's share
    publishes = b"".join(client.encode_publish(1, "", "target", b"x") for _ in range(n))
    client.send_raw(client.encode(2, m.QueueDeclare(queue="q")) + publishes)
    assert client.shell.front is not None
    assert client.shell.front.pending  # read before the deferral, not handled yet
    assert not reading(client)
    deferring.pending[0].resolve("q")
    assert client.methods() == [(2, m.QueueDeclareOk(queue="q"))]
    assert reading(client)
    assert broker.vhosts["/"].queues["target"].message_count == n


class _Inbox:
    """A front end whose input waits undecoded while it is held and which is not
    ``pending`` then (as the 1.0, 0-10 and AMQP/Fast front ends): each byte is a unit whose
    handler defers the whole connection on the completion the test gives it next."""

    protocol = "inbox"
    turn_budget = paced_turn_budget = 100
    output_high_water = 1 << 20
    reads_when_blocked = False
    should_close_transport = False
    close_reason = ""
    held_size = 0

    def __init__(self, shell: Shell, waits: list[Completion[None]]) -> None:
        self.shell = shell
        self.waits = waits
        self.inbox = bytearray()
        self.held = False

    @property
    def pending(self) -> bool:
        return bool(self.inbox) and not self.held

    def receive(self, data: bytes, now: float) -> None:
        self.inbox += data

    def run(self, budget: int, now: float) -> None:
        while budget > 0 and self.inbox and not self.held:
            del self.inbox[0]
            budget -= 1
            if self.waits:
                self.shell.defer(self.waits.pop(0), lambda _done: None)

    def hold_input(self, channel: int | None) -> bool:
        self.held = True
        return True

    def release_input(self, channel: int | None) -> None:
        self.held = False

    def take_output(self, now: float) -> list[bytes]:
        return self.shell.output.take()

    def next_tick(self, now: float) -> float | None:
        return None

    def tick(self, now: float) -> None: ...
    def notify_blocked(self, reason: str) -> None: ...
    def notify_unblocked(self, now: float) -> None: ...
    def writable_changed(self, writable: bool) -> None: ...
    def close(self, reply_code: int, reply_text: str, now: float) -> None: ...
    def internal_error(self, now: float) -> None: ...
    def connection_lost(self) -> None: ...

    def channel_infos(self) -> list[ChannelInfo]:
        return []


def reads(shell: Shell) -> bool:
    # A call, not the property: the type checker would keep an earlier assert's answer.
    return shell.reading


def done(completion: Completion[None]) -> bool:
    return completion.done


def test_deferrals_in_a_row_count_the_bound_while_input_waits() -> None:
    # Input read before (or while) a deferral that is still waiting when the next one is
    # made counts against the bound: a front end that is not pending while held must not
    # let in another read's worth with each deferral.
    waits: list[Completion[None]] = [Completion() for _ in range(3)]
    first, second = waits[0], waits[1]
    shell = new_shell(lambda s: _Inbox(s, waits))
    feed(shell, b"x" * 10, 1.0)  # the first unit defers; nine wait
    assert reads(shell)  # nothing read while held yet
    feed(shell, b"y" * (HOLD_BOUND + 1), 1.0)
    assert not reads(shell)
    first.resolve(None)
    run_turns(shell, 1.0)  # the next unit defers again, with the rest still waiting
    assert not done(second)
    assert not reads(shell)
    second.resolve(None)
    waits.clear()
    run_turns(shell, 1.0)
    assert reads(shell)
