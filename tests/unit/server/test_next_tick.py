"""A connection's next deadline (``Shell.next_deadline``: its front end's timers and the
shell's own), so that the adapter (``server/connection.py``) sleeps until then instead of
ticking every second.

For the 0-9-1 front end, in memory: no deadline without heartbeats; with them, a tick just
before the deadline does nothing and one at it does what is due (a heartbeat, the drop of a
silent peer); the handshake timeout; and driving the connection only at its own deadlines
gives what ticking every tenth of a second gives.
"""

from __future__ import annotations

import pytest

from leveret.protocol.amqp091 import framing
from leveret.server.shell.shell import HANDSHAKE_TIMEOUT
from leveret.testing.client import CodecClient, Heartbeat

EARLY = 0.01


def due(client: CodecClient) -> float | None:
    return client.shell.next_deadline(client.clock.now)


def tick_to(client: CodecClient, when: float) -> None:
    client.tick(when - client.clock.now)


def closed(client: CodecClient) -> bool:
    # A call, not the property: the type checker would hold an earlier test's answer.
    return client.closed


def test_without_heartbeats_an_open_connection_has_no_deadline() -> None:
    client = CodecClient.connect()
    client.handshake(heartbeat=0)
    assert client.frames() == []
    assert due(client) is None


def test_the_heartbeat_is_due_half_an_interval_after_the_last_write() -> None:
    client = CodecClient.connect()
    client.handshake(heartbeat=10)
    assert client.frames() == []  # the handshake's output taken: the last write was now
    when = due(client)
    assert when is not None
    assert when == pytest.approx(client.clock.now + 5)
    tick_to(client, when - EARLY)
    assert client.frames() == []
    tick_to(client, when)
    assert client.frames() == [Heartbeat()]
    assert due(client) == pytest.approx(when + 5)


def test_a_connection_of_a_lower_phase_sends_its_heartbeats_sooner() -> None:
    """The phase the adapter gave the connection (server/heartbeat_phase.py) scales the
    idle time before each heartbeat: 0.8 of half a 10 s interval is 4 s."""
    client = CodecClient.connect(heartbeat_phase=0.8)
    client.handshake(heartbeat=10)
    assert client.frames() == []
    when = due(client)
    assert when is not None
    assert when == pytest.approx(client.clock.now + 4)
    tick_to(client, when - EARLY)
    assert client.frames() == []
    tick_to(client, when)
    assert client.frames() == [Heartbeat()]
    assert due(client) == pytest.approx(when + 4)


def test_a_silent_peer_is_dropped_at_its_deadline_and_not_before() -> None:
    client = CodecClient.connect()
    client.handshake(heartbeat=10)
    client.frames()
    client.tick(3)
    client.send_raw(framing.HEARTBEAT_FRAME)
    heard = client.clock.now
    deadlines = []
    while not closed(client):
        when = due(client)
        assert when is not None
        deadlines.append(when - heard)
        tick_to(client, when - EARLY)
        if closed(client):
            break
        tick_to(client, when)
        client.frames()
    # Heartbeats every 5 s after the last write, then the drop just past 20 s of silence.
    assert client.clock.now - heard == pytest.approx(20, abs=2e-3)
    assert deadlines[-1] == pytest.approx(20, abs=2e-3)


def test_before_the_connection_is_open_the_handshake_timeout_is_due() -> None:
    client = CodecClient.connect()
    created = client.clock.now
    when = due(client)
    assert when is not None
    assert when == pytest.approx(created + HANDSHAKE_TIMEOUT, abs=2e-3)
    tick_to(client, when - EARLY)
    assert not closed(client)
    tick_to(client, when)
    assert closed(client)
    assert due(client) is None


@pytest.mark.parametrize("speaks_every", [3.0, 7.0, 30.0])
def test_driven_only_at_its_deadlines_the_connection_keeps_its_times(
    speaks_every: float,
) -> None:
    """A client heartbeating every ``speaks_every`` s for 60 s, then silent, and the server
    ticked only at its own deadlines: its heartbeats come every 5 s exactly, and the drop
    exactly 20 s after the client's last frame (30 s is too late: dropped at 20)."""
    client = CodecClient.connect()
    client.handshake(heartbeat=10)
    client.frames()
    start = client.clock.now
    beats: list[float] = []
    spoke = start
    speak = start + speaks_every
    steps = 0
    while not client.closed:
        steps += 1
        when = due(client)
        assert when is not None
        if speak - start <= 60 and speak < when:
            tick_to(client, speak)
            client.send_raw(framing.HEARTBEAT_FRAME)
            spoke = client.clock.now
            speak += speaks_every
        else:
            tick_to(client, when)
        beats += [client.clock.now - start for _ in client.frames()]
    last_spoke = spoke - start
    assert client.clock.now - spoke == pytest.approx(20, abs=2e-3)
    assert beats == pytest.approx([5.0 * (i + 1) for i in range(len(beats))], abs=1e-6)
    assert len(beats) == int((last_spoke + 20) // 5)
    # One step per deadline and per client frame, not one per tenth of a second.
    assert steps < len(beats) + 60 / speaks_every + 5
