"""The buffer every connection of one event loop reads its socket into (issue 26, scenario f).

While large frames come, a connection's transport reads into this buffer (the adapter's
``_ViewReader``, an ``asyncio.BufferedProtocol``, ``server/connection.py``): the loop reads
the socket straight into the buffer ``get_buffer`` returns and calls ``buffer_updated``,
where a plain protocol's ``data_received`` gets a fresh ``bytes`` of each read (uvloop
copies every read out of its own buffer). For a 64 KiB message that copy was one of three
of its body in user space (the decoder's slice of the body frame and, for a frame that
straddles two reads, the join of its pieces being the others).

One buffer per loop serves all its connections, as uvloop's own does: a loop reads one
socket at a time, and each read is decoded before ``buffer_updated`` returns, so the next
read may overwrite it. Only a front end that decodes a view in place and keeps nothing of
it (``receive_view``: 0-9-1's decoder copies out each frame, and a frame held for the next
read) is read this way (``Shell.wants_views``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    import asyncio

__all__ = ["SIZE", "VIEW_READ", "read_buffer"]

# uvloop's own read buffer is 256,000 octets: reads as large as before (libuv asks for 64
# KiB but takes what it is given), about four 64 KiB messages a read.
SIZE: Final = 262144

# A read shorter than this is not looked at for a switch to this buffer: it cannot have
# brought a large frame whole (0-9-1's decoder counts 16 KiB as large, ``VIEW_FRAME``).
VIEW_READ: Final = 16384

_per_loop: WeakKeyDictionary[asyncio.AbstractEventLoop, memoryview] = WeakKeyDictionary()


def read_buffer(loop: asyncio.AbstractEventLoop) -> memoryview:
    """The loop's one read buffer, writable, ``SIZE`` octets."""
    found = _per_loop.get(loop)
    if found is None:
        found = _per_loop[loop] = memoryview(bytearray(SIZE))
    return found
