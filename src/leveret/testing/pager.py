"""An in-memory ``Pager`` for tests of queue paging without files."""

from __future__ import annotations


class MemoryPager:
    """Keeps pages as bytes; ``refuse`` makes writes fail (as a full disk would)."""

    def __init__(self) -> None:
        self.pages: dict[int, bytes] = {}
        self.next_handle = 0
        self.refuse = False
        self.writes = 0

    def write(self, data: bytes) -> object | None:
        if self.refuse:
            return None
        self.next_handle += 1
        self.pages[self.next_handle] = data
        self.writes += 1
        return self.next_handle

    def read(self, handle: object) -> bytes:
        assert isinstance(handle, int)
        return self.pages[handle]

    def discard(self, handle: object) -> None:
        assert isinstance(handle, int)
        del self.pages[handle]
