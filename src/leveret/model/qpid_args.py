"""Qpid's queue arguments, read as the Qpid C++ broker (1.36) reads them, whichever protocol
declares the queue: ``parse_queue_args`` calls :func:`qpid_settings` when a ``qpid.`` or
``x-qpid-`` argument is there, and the result goes into the same ``QueueConfig`` fields
RabbitMQ's arguments fill where the two mean the same thing.

=================================  ===========================================================
argument                           meaning in Leveret
=================================  ===========================================================
``qpid.max_count``                 ``max_length`` (a count limit)
``qpid.max_size``                  ``max_length_bytes`` (bodies' bytes)
``qpid.policy_type``               what a limit does: ``reject`` (the default, as Qpid) =
                                   ``reject-publish``; ``ring`` / ``ring_strict`` = drop the
                                   oldest message of the lowest priority (``overflow``
                                   ``ring``); ``self-destruct`` = delete the queue;
                                   ``flow_to_disk`` = no limit (Leveret pages deep queues)
``qpid.priorities``,               ``priority_levels``: that many levels (1-10), Qpid's
``x-qpid-priorities``              mapping of priorities 0-9 onto them, 4 when a message has
                                   none
``qpid.fairshare[-N]``,            ``fairshare``: how many messages of a level (of level N) go
``x-qpid-fairshare[-N]``           before the next lower level gets a turn (0: no limit)
``qpid.queue_msg_sequence``        ``sequence_key``: each message gets that header, numbered
                                   from 1 in arrival order
``qpid.auto_delete_timeout``       ``auto_delete_timeout``: an auto-delete queue goes that
                                   many seconds after it is left unused, if still unused
``qpid.last_value_queue_key``      ``lvq_key`` (``qpid.last_value_queue``: the key
                                   ``qpid.LVQ_key``)
``qpid.group_header_key``,         ``group_key`` (messages without it form the group
``qpid.shared_msg_group``          ``qpid.no-group``)
=================================  ===========================================================

Counts and sizes are integers, or strings of digits (Qpid's clients send strings too); a
negative number, a fraction or other text is refused (406), and the queue is not made.

This module imports nothing from leveret but :mod:`leveret.errors`.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Final

from leveret.errors import PreconditionFailed

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_PRIORITY",
    "LEGACY_LVQ_KEY",
    "NO_GROUP",
    "has_qpid_arguments",
    "qpid_priority_level",
    "qpid_settings",
]

# Qpid's priority of a message that has none (AMQP 0-10's "medium").
DEFAULT_PRIORITY: Final = 4
MAX_LEVELS: Final = 10
NO_GROUP: Final = "qpid.no-group"
LEGACY_LVQ_KEY: Final = "qpid.LVQ_key"
_DIGITS: Final = re.compile(r"[+-]?[0-9]+")
_FAIRSHARE: Final = re.compile(r"(?:qpid\.|x-qpid-)fairshare-([0-9]+)")
POLICIES: Final = ("reject", "ring", "ring_strict", "self-destruct", "flow_to_disk")


def has_qpid_arguments(arguments: Mapping[str, object]) -> bool:
    return any(k.startswith(("qpid.", "x-qpid-")) for k in arguments)


def qpid_priority_level(priority: int | None, levels: int) -> int:
    """The level (0 = lowest) a message priority falls in on a queue of ``levels`` levels:
    Qpid C++'s ``PriorityQueue::getPriorityLevel`` (the levels centred on priority 4-5)."""
    value = DEFAULT_PRIORITY if priority is None else priority
    offset = 5 - math.ceil(levels / 2)
    return min(max(value - offset, 0), levels - 1)


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def _count(name: str, value: object) -> int:
    """A non-negative integer given as a number or as a string of digits."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        number = value
    else:
        text = _text(value)
        if text is None or _DIGITS.fullmatch(text.strip()) is None:
            raise PreconditionFailed(f"invalid value for '{name}': {value!r} is not an integer")
        number = int(text)
    if number < 0:
        raise PreconditionFailed(f"invalid value for '{name}': {number} is negative")
    return number


def _flag(value: object) -> bool:
    text = _text(value)
    if text is not None:
        return text.lower() not in ("", "0", "false", "no")
    return bool(value)


def qpid_settings(arguments: Mapping[str, object]) -> dict[str, object]:
    """``QueueConfig`` field values from the Qpid arguments in ``arguments`` (406 with the
    reason for a value Qpid refuses)."""
    values: dict[str, object] = {}
    get = arguments.get
    count = get("qpid.max_count")
    size = get("qpid.max_size")
    limited = False
    if count is not None:
        values["max_length"] = _count("qpid.max_count", count)
        limited = True
    if size is not None:
        values["max_length_bytes"] = _count("qpid.max_size", size)
        limited = True
    policy = get("qpid.policy_type")
    if policy is not None:
        text = _text(policy)
        if text not in POLICIES:
            raise PreconditionFailed(f"invalid value for 'qpid.policy_type': {policy!r}")
        if text in ("ring", "ring_strict"):
            values["overflow"] = "ring"
        elif text == "self-destruct":
            values["overflow"] = "self-destruct"
        elif text == "flow_to_disk":
            # Leveret pages deep queues anyway: the limit only said when to start.
            values.pop("max_length", None)
            values.pop("max_length_bytes", None)
            limited = False
        else:
            values["overflow"] = "reject-publish"
    if limited and "overflow" not in values:
        values["overflow"] = "reject-publish"  # Qpid's default policy
    levels = get("qpid.priorities", get("x-qpid-priorities"))
    if levels is not None:
        number = _count("qpid.priorities", levels)
        if number > 0:
            number = min(number, MAX_LEVELS)
            values["priority_levels"] = number
            values["max_priority"] = number - 1
    fairshare = get("qpid.fairshare", get("x-qpid-fairshare"))
    per_level: dict[int, int] = {}
    for key, value in arguments.items():
        match = _FAIRSHARE.fullmatch(key)
        if match is not None:
            per_level[int(match.group(1))] = _count(key, value)
    if (fairshare is not None or per_level) and "priority_levels" in values:
        default = 0 if fairshare is None else _count("qpid.fairshare", fairshare)
        levels_count = int(str(values["priority_levels"]))
        limits = tuple(per_level.get(i, default) for i in range(levels_count))
        if any(limits):
            values["fairshare"] = limits
    sequence = get("qpid.queue_msg_sequence")
    if sequence is not None:
        values["sequence_key"] = _text(sequence) or "qpid.queue_msg_sequence"
    timeout = get("qpid.auto_delete_timeout")
    if timeout is not None:
        seconds = _count("qpid.auto_delete_timeout", timeout)
        if seconds:
            values["auto_delete_timeout"] = float(seconds)
    lvq = get("qpid.last_value_queue_key")
    if lvq is not None:
        values["lvq_key"] = _text(lvq) or LEGACY_LVQ_KEY
    elif _flag(get("qpid.last_value_queue", False)) or _flag(
        get("qpid.last_value_queue_no_browse", False)
    ):
        values["lvq_key"] = LEGACY_LVQ_KEY
    group = get("qpid.group_header_key")
    if group is not None:
        values["group_key"] = _text(group) or NO_GROUP
    return values
