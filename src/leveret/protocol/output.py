"""The buffer a sans-IO machine writes its encoded frames into: ``Output``.

A machine appends frames; whoever owns the connection (the front-end shell,
``server/shell/``) takes them all at once for one ``writelines`` and decides what the sizes
mean. Two things are reported to the owner through the callbacks it sets:

- ``on_write``: output appeared while the owner was not handling input (``quiet`` False),
  for instance a delivery caused by another connection's publish, so the owner schedules a
  flush;
- ``on_full``: the bytes waiting crossed ``high_water`` (True), or were taken (False), so
  the owner stops handing deliveries to this connection until they are written. Only the
  frames that carry messages are counted (:meth:`add`, :meth:`count`): a deep queue must not
  be encoded into memory all at once, and small control frames cannot make that happen.

The machine neither paces nor schedules: it only writes. Compiled (a delivery's frames go
through :meth:`add`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DEFAULT_HIGH_WATER", "Output"]

DEFAULT_HIGH_WATER: Final = 256 * 1024


def _nothing() -> None:
    """The default callback: an owner that is not told."""


def _ignore(full: bool) -> None:
    """The default ``on_full``."""


class Output:
    """Encoded frames waiting to be written, and how many message bytes they hold."""

    __slots__ = ("frames", "full", "high_water", "on_full", "on_write", "quiet", "size")

    def __init__(self, high_water: int = DEFAULT_HIGH_WATER) -> None:
        self.frames: list[bytes] = []
        # Bytes of message-carrying frames since the last take (including those counted
        # but queued elsewhere, :meth:`count`).
        self.size = 0
        self.high_water = high_water
        self.full = False
        # True while the owner handles input: it flushes afterwards anyway.
        self.quiet = False
        self.on_write: Callable[[], None] = _nothing
        self.on_full: Callable[[bool], None] = _ignore

    def append(self, frame: bytes) -> None:
        """A control frame (not counted against the high-water mark)."""
        self.frames.append(frame)
        if not self.quiet:
            self.on_write()

    def mark(self) -> int:
        """Where the output stands now, for :meth:`insert`."""
        return len(self.frames)

    def insert(self, mark: int, frame: bytes) -> None:
        """``frame`` before what was queued since :meth:`mark` gave ``mark``."""
        self.frames.insert(mark, frame)
        if not self.quiet:
            self.on_write()

    def add(self, data: bytes, body: bytes = b"", end: bytes = b"") -> None:
        """Frames that carry a message. A large ``body`` may come separately (then ``end``,
        the bytes that close its frame), so that the transport's writev takes it from the
        message itself instead of from a joined copy."""
        frames = self.frames
        frames.append(data)
        size = len(body)
        if size:  # a length test, not truthiness: compiled, it is inline
            frames.append(body)
            if len(end):
                frames.append(end)
        self.size += len(data) + size
        if self.size > self.high_water and not self.full:
            self.full = True
            self.on_full(True)
        if not self.quiet:
            self.on_write()

    def count(self, size: int) -> None:
        """``size`` message bytes queued in a buffer of the machine's own (AMQP 1.0's)."""
        self.size += size
        if self.size > self.high_water and not self.full:
            self.full = True
            self.on_full(True)
        if not self.quiet:
            self.on_write()

    def take(self) -> list[bytes]:
        """Everything waiting, oldest first; the count starts again from zero."""
        frames = self.frames
        self.frames = []
        self.size = 0
        if self.full:
            self.full = False
            self.on_full(False)
        return frames
