"""What the server sees of a store: open (recover), start, close.

The model sees the store only through ``leveret.model.journal.Journal``, which it defines
and which the server injects (``Broker.attach_journal``); ``DiskStore`` implements both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from leveret.model.journal import Journal

if TYPE_CHECKING:
    import asyncio

    from leveret.store.disk import Recovered

__all__ = ["Journal", "Store"]


class Store(Journal, Protocol):
    def open(self) -> Recovered: ...

    def start(self, loop: asyncio.AbstractEventLoop) -> None: ...

    def close(self) -> None: ...
