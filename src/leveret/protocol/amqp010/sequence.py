"""RFC 1982 serial numbers and the sequence sets of AMQP 0-10; the amqp010 package imports it.

Command ids (``sequence-no``) are 32-bit serial numbers: they wrap, and ``a < b`` means "b
is less than 2**31 ahead of a" (RFC 1982 section 3.2).  A :class:`SequenceSet` holds
disjoint, non-touching closed ranges of them in serial order, as ``session.completed``,
``message.accept`` and their kin carry (spec type ``sequence-set``).  Comparisons are only
meaningful inside a window of less than 2**31 ids, which a session never exceeds: the
sender keeps at most that many commands outstanding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["SERIAL_MASK", "SequenceSet", "serial_add", "serial_le", "serial_lt"]

SERIAL_MASK = 0xFFFFFFFF
_HALF = 0x80000000


def serial_add(a: int, n: int) -> int:
    """``a + n`` in 32-bit serial arithmetic (``n`` may be negative)."""
    return (a + n) & SERIAL_MASK


def serial_lt(a: int, b: int) -> bool:
    """RFC 1982 ``a < b``; false when the two are exactly 2**31 apart (undefined there)."""
    return a != b and ((b - a) & SERIAL_MASK) < _HALF


def serial_le(a: int, b: int) -> bool:
    """RFC 1982 ``a <= b``."""
    return a == b or serial_lt(a, b)


def _span(lower: int, upper: int) -> int:
    """Number of ids in the closed range, minus one."""
    return (upper - lower) & SERIAL_MASK


class SequenceSet:
    """A set of 32-bit serial numbers kept as sorted, merged closed ranges.

    Mutable: the session machines add completed ids and remove known-completed ones.
    Iterating yields ``(lower, upper)`` pairs in serial order.
    """

    __slots__ = ("_ranges",)

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._ranges: list[tuple[int, int]] = []
        for lower, upper in ranges:
            self.add_range(lower, upper)

    @classmethod
    def of(cls, *ids: int) -> SequenceSet:
        """The set of the given single ids."""
        result = cls()
        for i in ids:
            result.add(i)
        return result

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._ranges)

    def __len__(self) -> int:
        """The number of ranges (not of ids; see :meth:`count`)."""
        return len(self._ranges)

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SequenceSet):
            return NotImplemented
        return self._ranges == other._ranges

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in self._ranges)
        return f"SequenceSet([{inner}])"

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, int):
            return False
        n = item & SERIAL_MASK
        return any(_span(lo, n) <= _span(lo, hi) for lo, hi in self._ranges)

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        return tuple(self._ranges)

    def copy(self) -> SequenceSet:
        result = SequenceSet()
        result._ranges = list(self._ranges)
        return result

    def count(self) -> int:
        """The number of ids in the set."""
        return sum(_span(lo, hi) + 1 for lo, hi in self._ranges)

    def ids(self) -> Iterator[int]:
        """Every id, in serial order (beware of huge ranges)."""
        for lo, hi in self._ranges:
            for k in range(_span(lo, hi) + 1):
                yield (lo + k) & SERIAL_MASK

    def first(self) -> int | None:
        return self._ranges[0][0] if self._ranges else None

    def last(self) -> int | None:
        return self._ranges[-1][1] if self._ranges else None

    def add(self, n: int) -> None:
        self.add_range(n, n)

    def add_range(self, lower: int, upper: int) -> None:
        """Add the closed range ``lower..upper`` (serial order; ``lower <= upper``)."""
        lower &= SERIAL_MASK
        upper &= SERIAL_MASK
        if serial_lt(upper, lower):
            raise ValueError(f"range {lower}-{upper} has its bounds reversed")
        kept: list[tuple[int, int]] = []
        i = 0
        rs = self._ranges
        # Ranges wholly before the new one (and not touching it) stay in front.
        while i < len(rs) and serial_lt(serial_add(rs[i][1], 1), lower):
            kept.append(rs[i])
            i += 1
        # Ranges that overlap or touch it are merged into it.
        while i < len(rs) and serial_le(rs[i][0], serial_add(upper, 1)):
            if serial_lt(rs[i][0], lower):
                lower = rs[i][0]
            if serial_lt(upper, rs[i][1]):
                upper = rs[i][1]
            i += 1
        kept.append((lower, upper))
        kept.extend(rs[i:])
        self._ranges = kept

    def add_set(self, other: Iterable[tuple[int, int]]) -> None:
        for lower, upper in other:
            self.add_range(lower, upper)

    def remove_range(self, lower: int, upper: int) -> None:
        """Remove every id of ``lower..upper`` from the set."""
        lower &= SERIAL_MASK
        upper &= SERIAL_MASK
        if serial_lt(upper, lower):
            raise ValueError(f"range {lower}-{upper} has its bounds reversed")
        kept: list[tuple[int, int]] = []
        for lo, hi in self._ranges:
            if serial_lt(hi, lower) or serial_lt(upper, lo):
                kept.append((lo, hi))
                continue
            if serial_lt(lo, lower):
                kept.append((lo, serial_add(lower, -1)))
            if serial_lt(upper, hi):
                kept.append((serial_add(upper, 1), hi))
        self._ranges = kept

    def remove_set(self, other: Iterable[tuple[int, int]]) -> None:
        for lower, upper in other:
            self.remove_range(lower, upper)

    def remove(self, n: int) -> None:
        self.remove_range(n, n)

    def covers(self, lower: int, upper: int) -> bool:
        """Whether every id of ``lower..upper`` is in the set."""
        return any(
            serial_le(lo, lower) and serial_le(upper, hi) and serial_le(lower, upper)
            for lo, hi in self._ranges
        )
