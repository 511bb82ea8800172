"""One timer per link client, armed for its machine's next deadline (heartbeats, close
time-outs): both link clients (``amqp091.py``, ``amqp10.py``) sleep until then."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

__all__ = ["Deadline"]


class Deadline:
    """Calls ``fire`` at the earliest deadline it was armed for, once."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fire: Callable[[], None]) -> None:
        self.loop = loop
        self.fire = fire
        self._timer: asyncio.TimerHandle | None = None

    def arm(self, deadline: float | None) -> None:
        """Fire at ``deadline`` unless armed for an earlier one already (None: nothing)."""
        if deadline is None:
            return
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        self._timer = self.loop.call_at(deadline, self._fired)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fired(self) -> None:
        self._timer = None
        self.fire()
