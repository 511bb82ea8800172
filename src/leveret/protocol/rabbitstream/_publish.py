"""The per-message loop of a publish frame's decode (``commands.Publish.decode``), in a
module of its own so the compiled build can compile it
(``build_info.HOT_PATH_MODULES``) while ``commands.py``'s frozen dataclasses stay interpreted.
Private to the codec."""

from __future__ import annotations

import struct

_ID_SIZE = struct.Struct(">QI")  # publishing id, then a record's size (or a sub-batch's flag)


def simple_entries(data: bytes, count: int, ids: list[int], entries: list[bytes]) -> int:
    """The leading run of whole records (not sub-batches) of a v1 publish body, into ``ids``
    and ``entries`` (one unpack and one slice each); returns where it stopped: the body's
    end, a sub-batch, or something malformed, which the general loop then refuses."""
    unpack = _ID_SIZE.unpack_from
    n = len(data)
    pos = 0
    for _ in range(count):
        if pos + 12 > n:
            return pos
        pid: int
        size: int
        pid, size = unpack(data, pos)
        end = pos + 12 + size
        if size & 0x80000000 or end > n:  # a sub-batch's flag byte, or an overrun
            return pos
        ids.append(pid)
        entries.append(data[pos + 8 : end])
        pos = end
    return pos
