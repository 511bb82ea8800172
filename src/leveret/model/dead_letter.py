"""Dead-lettering, as RabbitMQ 3.10 does it (rabbit_dead_letter).

A message leaves a queue with a reason (``rejected``, ``expired``, ``maxlen``,
``delivery_limit``) and, when the queue has ``x-dead-letter-exchange``, is republished to
that exchange with:

- routing key ``x-dead-letter-routing-key`` if set (and ``CC`` removed), else its own
  routing keys (the original key plus ``CC``);
- ``x-death``: an array of tables, one per (queue, reason), most recent first; a repeated
  (queue, reason) increments ``count`` and moves to the front, keeping its first ``time``,
  ``exchange`` and ``routing-keys``;
- ``x-first-death-queue`` / ``-reason`` / ``-exchange`` on the first dead-lettering;
- a per-message ``expiration`` removed and kept as ``original-expiration`` in the entry.

A missing dead-letter exchange drops the message. Cycles are broken as RabbitMQ does: a
target queue that already appears in ``x-death`` is skipped unless a ``rejected`` death lies
between (a client took part, so the loop is not automatic).

This module is pure: it makes the copy and answers the cycle question; the router
(``model/router.py``) routes the copy and enqueues it.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from leveret.model.message import HINT_EXPIRATION, HINT_HEADERS

if TYPE_CHECKING:
    from leveret.model.message import Message

REJECTED = "rejected"
EXPIRED = "expired"
MAXLEN = "maxlen"
DELIVERY_LIMIT = "delivery_limit"


def _str(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def routing_keys(message: Message) -> list[str]:
    """The message's routing key followed by its ``CC`` keys."""
    keys = [message.routing_key]
    headers = message.headers if message.hints & HINT_HEADERS else None
    if headers:
        cc = headers.get("CC")
        if isinstance(cc, list):
            keys.extend(k for k in (_str(v) for v in cc) if k is not None)
    return keys


def dead_lettered_copy(
    message: Message,
    reason: str,
    queue: str,
    dlx: str,
    dlrk: str | None,
    wall: float,
) -> Message:
    """The message republished to ``dlx``, with x-death updated."""
    headers = dict(message.headers or {})
    keys = routing_keys(message)
    if dlrk is not None:
        headers.pop("CC", None)
    info: dict[str, object] = {
        "reason": reason,
        "queue": queue,
        "time": datetime.datetime.fromtimestamp(int(wall), tz=datetime.UTC),
        "exchange": message.exchange,
        "routing-keys": list(keys),
    }
    changes: dict[str, object] = {}
    if message.hints & HINT_EXPIRATION:
        expiration = message.properties.expiration
        if expiration is not None:
            info["original-expiration"] = expiration
            changes["expiration"] = None
    deaths = headers.get("x-death")
    if not isinstance(deaths, list) or not deaths:
        headers["x-death"] = [{"count": 1, **info}]
        headers["x-first-death-reason"] = reason
        headers["x-first-death-queue"] = queue
        headers["x-first-death-exchange"] = message.exchange
    else:
        match = None
        others = []
        for death in deaths:
            if (
                match is None
                and isinstance(death, dict)
                and _str(death.get("queue")) == queue
                and _str(death.get("reason")) == reason
            ):
                match = death
            else:
                others.append(death)
        if match is None:
            entry = {"count": 1, **info}
        else:
            count = match.get("count")
            entry = {
                **match,
                "count": (count if isinstance(count, int) else 0) + 1,
            }
        headers["x-death"] = [entry, *others]
    changes["headers"] = headers
    hints = (message.hints | HINT_HEADERS) & ~HINT_EXPIRATION
    return message.replace(
        exchange=dlx,
        routing_key=dlrk if dlrk is not None else message.routing_key,
        hints=hints,
        **changes,
    )


def is_cycle(queue: str, deaths: list[object]) -> bool:
    """RabbitMQ's rule: the queue is in x-death and no rejection happened since."""
    for index, death in enumerate(deaths):
        if isinstance(death, dict) and _str(death.get("queue")) == queue:
            return all(
                isinstance(d, dict) and _str(d.get("reason")) != REJECTED
                for d in deaths[: index + 1]
            )
    return False
