"""Helpers for tests that look inside a queue of a particular type."""

from __future__ import annotations

from leveret.model.queues import ClassicQueue, Queue

__all__ = ["classic"]


def classic(queue: Queue) -> ClassicQueue:
    """``queue``, which a test declared as a classic queue, typed as one (its ready list,
    paging thresholds and other insides are not part of the ``Queue`` interface)."""
    assert isinstance(queue, ClassicQueue), queue
    return queue
