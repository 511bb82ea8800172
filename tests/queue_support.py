"""Helpers for the queue tests: messages in a test format of their own (no front end
involved: the core in its own words), and a look inside a queue of a particular type."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from leveret.model.message import HINT_PERSISTENT, HINT_PRIORITY, Message
from leveret.model.queues import ClassicQueue, Queue

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Props", "classic", "message"]


def classic(queue: Queue) -> ClassicQueue:
    """``queue``, which a test declared as a classic queue, typed as one (its ready list,
    paging thresholds and other insides are not part of the ``Queue`` interface)."""
    assert isinstance(queue, ClassicQueue), queue
    return queue


@dataclass
class Props:
    """Message properties in a test format: JSON, no front end involved."""

    headers: Mapping[str, object] | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    expiration: str | None = None
    user_id: str | None = None
    reply_to: str | None = None


def _decode(raw: bytes) -> Props:
    return Props(**json.loads(raw)) if raw else Props()


def _encode(view: object, changes: Mapping[str, object]) -> bytes:
    assert isinstance(view, Props)
    values = {**vars(view), **changes}
    return json.dumps({k: v for k, v in values.items() if v is not None}).encode()


def message(ident: int, *, priority: int | None, persistent: bool) -> Message:
    props = Props(priority=priority, delivery_mode=2 if persistent else None)
    hints = (HINT_PRIORITY if priority is not None else 0) | (HINT_PERSISTENT if persistent else 0)
    return Message("", "q", _encode(props, {}), str(ident).encode(), _decode, _encode, hints)
