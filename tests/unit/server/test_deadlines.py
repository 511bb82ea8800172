"""The broker-wide deadline timer (``server/deadlines.py``) on the test clock: the model's
deadlines fire at their times and in order, an earlier one re-arms the timer, and a target
that raises does not stop the ones after it; the model's wall clock is the loop's own
when it has one."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest

from leveret.model.timers import Timers
from leveret.server.deadlines import DeadlineTimer
from leveret.testing.clock import ClockedEventLoop

if TYPE_CHECKING:
    from collections.abc import Iterator

# Left out of the compiled pass (scripts/test): the deadline timer is not compiled.
pytestmark = pytest.mark.pure_only


class Target:
    def __init__(self, name: str, log: list[tuple[str, float]], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    def on_deadline(self, now: float) -> None:
        self.log.append((self.name, now))
        if self.fail:
            raise RuntimeError(self.name)


@pytest.fixture
def loop() -> Iterator[ClockedEventLoop]:
    loop = ClockedEventLoop()
    try:
        yield loop
    finally:
        loop.close()


def test_deadlines_fire_at_their_times_in_order(loop: ClockedEventLoop) -> None:
    timers = Timers()
    log: list[tuple[str, float]] = []
    start = 0.0

    async def body() -> None:
        nonlocal start
        timer = DeadlineTimer(loop, timers)
        start = timers.now
        timers.schedule(start + 300, Target("late", log))
        timers.schedule(start + 100, Target("early", log))  # earlier: re-arms the timer
        await loop.advance(200)
        assert [name for name, _ in log] == ["early"]
        timers.now = loop.time()  # as the server does before it hands input to the model
        timers.schedule(timers.now + 50, Target("chained", log))
        await loop.advance(200)
        timer.close()

    loop.run_until_complete(body())
    assert [name for name, _ in log] == ["early", "chained", "late"]
    for (_, now), due in zip(log, (100, 250, 300), strict=True):
        assert due <= now - start < due + 0.5


def test_a_target_that_raises_does_not_stop_later_deadlines(loop: ClockedEventLoop) -> None:
    timers = Timers()
    log: list[tuple[str, float]] = []
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))

    async def body() -> None:
        timer = DeadlineTimer(loop, timers)
        timers.schedule(timers.now + 10, Target("broken", log, fail=True))
        timers.schedule(timers.now + 20, Target("next", log))
        await loop.advance(30)
        timer.close()

    loop.run_until_complete(body())
    assert [name for name, _ in log] == ["broken", "next"]
    assert len(errors) == 1
    assert isinstance(errors[0]["exception"], RuntimeError)


def test_the_model_wall_clock_is_the_loop_s_own_when_it_has_one(loop: ClockedEventLoop) -> None:
    """A broker booted on a clock already advanced (a restart in a test) keeps the advance
    in its wall clock; an ordinary loop gives the system's."""
    loop.offset = 3600.0
    timers = Timers()

    async def body() -> None:
        timer = DeadlineTimer(loop, timers)
        timer.close()

    loop.run_until_complete(body())
    assert abs(timers.wall - (time.time() + 3600)) < 1

    plain = asyncio.new_event_loop()
    try:
        timers = Timers()

        async def plain_body() -> None:
            DeadlineTimer(plain, timers).close()

        plain.run_until_complete(plain_body())
    finally:
        plain.close()
    assert abs(timers.wall - time.time()) < 1


def test_the_wall_offset_follows_the_system_clock_as_it_drifts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The monotonic clock and the wall clock drift apart; a broker up for hours must still
    stamp stream entries with the wall clock, so the offset is read again each second."""
    skew = [0.0]
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew[0])
    loop = asyncio.new_event_loop()
    timers = Timers()
    seen: list[float] = []

    async def body() -> None:
        timer = DeadlineTimer(loop, timers)
        seen.append(timers.wall_offset)
        skew[0] = 0.25  # the wall clock slewed a quarter second ahead
        await asyncio.sleep(1.3)
        seen.append(timers.wall_offset)
        timer.close()

    try:
        loop.run_until_complete(body())
    finally:
        loop.close()
    assert 0.2 < seen[1] - seen[0] < 0.3
