"""The test clock (``leveret.testing.clock``): an event loop whose time the test moves.

Every timer that falls due during an advance fires at its own time and in order, timers
armed by timers fire within the same advance, the loop only skips idle waits (I/O and
ready callbacks run first, at the current time), and without an advance the loop keeps
real time. No broker and no sockets but a socketpair.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.testing.clock import ClockedEventLoop

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

# Left out of the compiled pass (scripts/test): the test clock is not compiled.
pytestmark = pytest.mark.pure_only

# Real time that may pass between reading the clock and a timer firing on a busy machine.
SLACK = 0.5


@pytest.fixture
def loop() -> Iterator[ClockedEventLoop]:
    loop = ClockedEventLoop()
    try:
        yield loop
    finally:
        loop.close()


def run(loop: ClockedEventLoop, body: Callable[[], Awaitable[None]]) -> None:
    # No asyncio.wait_for guard: its timeout is a timer on this very clock, which the
    # advance would fire (pytest-timeout bounds the test in real time).
    loop.run_until_complete(body())


def test_timers_fire_in_order_at_their_own_times(loop: ClockedEventLoop) -> None:
    fired: list[tuple[str, float]] = []

    async def body() -> None:
        start = loop.time()

        def note(name: str) -> None:
            fired.append((name, loop.time() - start))

        # A message expiring at +10 s, dead-lettered into a queue with a 60 s TTL: the
        # second deadline is armed by the first and must fire inside the same advance.
        def expire() -> None:
            note("ttl")
            loop.call_later(60, note, "retry")

        loop.call_later(10, expire)
        loop.call_later(30, note, "expires")
        loop.call_later(500, note, "beyond")
        began = time.monotonic()
        await loop.advance(100)
        assert time.monotonic() - began < 2  # no real waiting
        assert 100 <= loop.time() - start < 100 + SLACK

    run(loop, body)
    assert [name for name, _ in fired] == ["ttl", "expires", "retry"]
    for (_, at), due in zip(fired, (10, 30, 70), strict=True):
        assert due <= at < due + SLACK


def test_a_periodic_timer_runs_as_often_as_it_would_have(loop: ClockedEventLoop) -> None:
    ticks: list[float] = []

    async def body() -> None:
        start = loop.time()

        def tick() -> None:
            ticks.append(loop.time() - start)
            loop.call_later(1.0, tick)

        loop.call_later(1.0, tick)
        await loop.advance(10.5)

    run(loop, body)
    assert len(ticks) == 10
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(ticks))


def test_coroutines_sleeping_wake_within_the_advance(loop: ClockedEventLoop) -> None:
    async def body() -> None:
        woke: list[float] = []

        async def sleeper() -> None:
            await asyncio.sleep(3600)
            woke.append(loop.time())

        task = loop.create_task(sleeper())
        await asyncio.sleep(0)
        target = loop.time() + 3600
        await loop.advance(3600)
        assert task.done()
        assert target - SLACK <= woke[0] <= target + SLACK

    run(loop, body)


def test_advance_zero_runs_what_is_due_and_what_it_makes_ready(loop: ClockedEventLoop) -> None:
    chain: list[int] = []

    async def body() -> None:
        def step(n: int) -> None:
            chain.append(n)
            if n < 5:
                loop.call_soon(step, n + 1)

        loop.call_soon(step, 0)
        await loop.advance(0)
        assert chain == [0, 1, 2, 3, 4, 5]

    run(loop, body)


def test_the_clock_never_goes_back(loop: ClockedEventLoop) -> None:
    async def body() -> None:
        with pytest.raises(ValueError, match="cannot go back"):
            await loop.advance(-1)

    run(loop, body)


def test_without_an_advance_the_loop_keeps_real_time(loop: ClockedEventLoop) -> None:
    async def body() -> None:
        assert abs(loop.time() - time.monotonic()) < 0.01
        began = time.monotonic()
        await asyncio.sleep(0.05)
        assert time.monotonic() - began >= 0.05

    run(loop, body)
    assert loop.offset == 0


def test_the_wall_clock_moves_with_the_advances(loop: ClockedEventLoop) -> None:
    async def body() -> None:
        assert abs(loop.wall_clock() - time.time()) < 0.01
        await loop.advance(7200)
        assert abs(loop.wall_clock() - (time.time() + 7200)) < 0.01

    run(loop, body)


def test_io_runs_before_the_clock_moves(loop: ClockedEventLoop) -> None:
    """A client's bytes waiting on a socket are read at the time they came, before the
    advance skips ahead to the next timer."""
    left, right = socket.socketpair()
    seen: list[tuple[str, float]] = []
    try:

        async def body() -> None:
            start = loop.time()

            def read() -> None:
                right.recv(16)
                seen.append(("read", loop.time() - start))

            loop.add_reader(right.fileno(), read)
            loop.call_later(5, lambda: seen.append(("timer", loop.time() - start)))
            left.send(b"x")
            await loop.advance(10)
            loop.remove_reader(right.fileno())

        run(loop, body)
    finally:
        left.close()
        right.close()
    assert seen[0][0] == "read"
    assert seen[0][1] < SLACK
    timer = [at for name, at in seen if name == "timer"]
    assert len(timer) == 1
    assert 5 <= timer[0] < 5 + SLACK


def test_advances_asked_together_end_together(loop: ClockedEventLoop) -> None:
    async def body() -> None:
        start = loop.time()
        await asyncio.gather(loop.advance(10), loop.advance(40))
        assert 40 <= loop.time() - start < 40 + SLACK

    run(loop, body)


@settings(max_examples=40, deadline=None)
@given(
    delays=st.lists(st.integers(min_value=0, max_value=2000), max_size=30),
    chained=st.lists(st.integers(min_value=0, max_value=500), max_size=10),
    span=st.integers(min_value=0, max_value=1500),
)
def test_any_timers_fire_exactly_when_due_within_the_span(
    delays: list[int], chained: list[int], span: int
) -> None:
    """Whatever timers are armed (directly, or by a timer as it fires), an advance over
    ``span`` fires exactly those due within it, each at its own time and in the order of
    their due times. (Whole seconds, and a span ending half-way between two, keep apart
    what real time could blur: the reading of the clock at each call.)"""
    loop = ClockedEventLoop()
    fired: list[tuple[float, float]] = []  # (due, fired at), relative to the start
    end = span + 0.5

    async def body() -> None:
        start = loop.time()

        def fire(due: float, then: int | None) -> None:
            now = loop.time() - start
            fired.append((due, now))
            if then is not None:
                loop.call_later(then, fire, due + then, None)

        for i, delay in enumerate(delays):
            loop.call_later(delay, fire, delay, chained[i] if i < len(chained) else None)
        await loop.advance(end)

    try:
        run(loop, body)
    finally:
        loop.close()
    expected = sorted(
        [d for d in delays if d <= end]
        + [d + c for d, c in zip(delays, chained, strict=False) if d + c <= end]
    )
    assert sorted(due for due, _ in fired) == expected
    for due, at in fired:
        assert due <= at + 1e-6
        assert at < due + SLACK
    dues = [due for due, _ in fired]
    assert dues == sorted(dues)
