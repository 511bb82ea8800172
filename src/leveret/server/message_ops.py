"""Messages looked at and moved without being consumed, and the pending messages of delayed
exchanges: the operations the management API (``management/api_messages.py``) and
``leveret ctl`` (``server/ctl/messages.py``) share, with their arguments as JSON.

- Browse and search (``browse``): a queue's ready messages in delivery order, from the head
  or from a position, or a stream's by offset range, with an optional filter (headers,
  properties, routing key, body substring) and a limit. Nothing changes: no redelivered
  flag, no order, no delivery record. A deep queue's paged tail is read a page at a time;
  the scan yields the loop every ``SCAN_SLICE`` messages.
- Move and copy (``move``): the ready messages that match, to a queue or through an
  exchange. Each message is put in its destination(s) and taken from its queue in the
  same loop turn, so the store commits both in one batch: after a crash (``kill -9``) it is
  in one place, never both, never neither (a torn last batch keeps the destination's
  record, which comes first, so at worst a power loss doubles it, never loses it). The
  answer comes once the store has synced the last batch, as a publisher confirm would.
- Replay (``replay``): a dead-letter queue's messages, each back into the queue its newest
  ``x-death`` entry names, the same way.
- Delayed exchanges (``pending``, ``cancel``, ``reschedule``): ``model/delayed.py``'s
  store, with selectors from JSON.

Errors are ``ToolError`` (an HTTP status and a ctl exit code).
"""

from __future__ import annotations

import asyncio
import base64
import time
from itertools import islice
from typing import TYPE_CHECKING, Any

from leveret.model.delayed import DelayQueue, Selector
from leveret.model.stream import StreamQueue
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.formats import amqp091_parts
from leveret.server.rows import json_value

if TYPE_CHECKING:
    from leveret.model.delayed import DelayHost, Scheduled
    from leveret.model.message import Message
    from leveret.model.queue import Queue
    from leveret.model.vhost import VirtualHost

__all__ = [
    "MessageFilter",
    "ToolError",
    "browse",
    "cancel",
    "delay_store",
    "message_json",
    "move",
    "pending",
    "replay",
    "reschedule",
    "selector",
]

# Messages looked at between two yields of the loop (other connections run meanwhile).
SCAN_SLICE = 1000
# Messages moved per loop turn (each turn's moves are one group commit).
MOVE_SLICE = 500
DEFAULT_COUNT = 100
PROPERTY_NAMES = tuple(BasicProperties.__dataclass_fields__)


class ToolError(Exception):
    """A request the operation cannot do: ``status`` for HTTP, ``code`` for ctl."""

    def __init__(self, text: str, status: int = 400, code: int = 65) -> None:
        super().__init__(text)
        self.status = status
        self.code = code


def _int(body: dict[str, Any], name: str, default: int | None, low: int = 0) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ToolError(f"{name} must be an integer")
    try:
        number = int(value)
    except ValueError:
        raise ToolError(f"{name} must be an integer") from None
    if number < low:
        raise ToolError(f"{name} must be at least {low}")
    return number


def _now(vhost: VirtualHost | DelayHost) -> None:
    """The model's clock, as a connection would set it before acting."""
    try:
        vhost.timers.now = asyncio.get_running_loop().time()
    except RuntimeError:
        pass  # no loop (unit tests drive the clock themselves)


# -- what a message looks like -------------------------------------------------------------


def _properties(message: Message) -> BasicProperties:
    raw, _body = amqp091_parts(message)
    return BasicProperties.decode(raw)


def message_json(
    message: Message,
    *,
    encoding: str = "auto",
    truncate: int | None = None,
    redelivered: bool | None = None,
    message_count: int | None = None,
) -> dict[str, Any]:
    """A message as the management API's get-messages shows one (RabbitMQ's fields, in its
    order; ``redelivered`` and ``message_count`` only where given)."""
    _raw, body = amqp091_parts(message)
    props = _properties(message)
    properties = {
        name: json_value(getattr(props, name))
        for name in PROPERTY_NAMES
        if getattr(props, name, None) is not None
    }
    shown = body if truncate is None else body[:truncate]
    payload_encoding = "string"
    if encoding == "base64":
        payload, payload_encoding = base64.b64encode(shown).decode(), "base64"
    else:
        try:
            payload = shown.decode("utf-8")
        except UnicodeDecodeError:
            payload, payload_encoding = base64.b64encode(shown).decode(), "base64"
    result: dict[str, Any] = {"payload_bytes": len(body)}
    if redelivered is not None:
        result["redelivered"] = redelivered
    result["exchange"] = message.exchange
    result["routing_key"] = message.routing_key
    if message_count is not None:
        result["message_count"] = message_count
    result["properties"] = properties or []
    result["payload"] = payload
    result["payload_encoding"] = payload_encoding
    return result


class MessageFilter:
    """Which messages a browse, move or replay is about, from JSON: ``headers`` and
    ``properties`` (each given name must be there with the given value, compared as JSON
    or as text), ``routing_key``, ``exchange``, ``body_contains`` (a substring of the
    body, as UTF-8 text), ``redelivered``. No condition: every message."""

    def __init__(self, spec: object) -> None:
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise ToolError("filter must be an object")
        known = {"headers", "properties", "routing_key", "exchange", "body_contains", "redelivered"}
        unknown = set(spec) - known
        if unknown:
            raise ToolError(f"unknown filter field(s): {', '.join(sorted(unknown))}")
        self.headers = self._table(spec, "headers")
        self.properties = self._table(spec, "properties")
        for name in self.properties:
            if name not in PROPERTY_NAMES:
                raise ToolError(f"unknown property '{name}'")
        self.routing_key = self._text(spec, "routing_key")
        self.exchange = self._text(spec, "exchange")
        contains = self._text(spec, "body_contains")
        self.body_contains = contains.encode() if contains is not None else None
        redelivered = spec.get("redelivered")
        if redelivered is not None and not isinstance(redelivered, bool):
            raise ToolError("redelivered must be true or false")
        self.redelivered: bool | None = redelivered

    @staticmethod
    def _table(spec: dict[str, Any], name: str) -> dict[str, Any]:
        value = spec.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ToolError(f"{name} must be an object")
        return value

    @staticmethod
    def _text(spec: dict[str, Any], name: str) -> str | None:
        value = spec.get(name)
        if value is not None and not isinstance(value, str):
            raise ToolError(f"{name} must be a string")
        return value

    @property
    def everything(self) -> bool:
        return not (
            self.headers
            or self.properties
            or self.routing_key is not None
            or self.exchange is not None
            or self.body_contains is not None
            or self.redelivered is not None
        )

    def matches(self, message: Message, redelivered: bool = False) -> bool:
        if self.redelivered is not None and redelivered != self.redelivered:
            return False
        if self.routing_key is not None and message.routing_key != self.routing_key:
            return False
        if self.exchange is not None and message.exchange != self.exchange:
            return False
        if self.body_contains is not None:
            _raw, body = amqp091_parts(message)
            if self.body_contains not in body:
                return False
        if self.headers or self.properties:
            props = _properties(message)
            headers = props.headers or {}
            for name, wanted in self.headers.items():
                if name not in headers or not _same(headers[name], wanted):
                    return False
            for name, wanted in self.properties.items():
                have = getattr(props, name, None)
                if have is None or not _same(have, wanted):
                    return False
        return True


def _same(have: object, wanted: object) -> bool:
    shown = json_value(have)
    return bool(shown == wanted or str(shown) == str(wanted))


# -- browse and search ---------------------------------------------------------------------


async def browse(queue: Queue, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ready messages of ``queue`` from ``offset`` (the position from the head; for a
    stream, the stream offset), at most ``count`` of those that match ``filter``, looking
    at no more than ``scan`` messages (default: all). Each row has its ``position`` (or
    ``offset``) and ``redelivered``."""
    count = _int(body, "count", DEFAULT_COUNT) or 0
    start = _int(body, "offset", 0) or 0
    scan = _int(body, "scan", None, 1)
    encoding = body.get("encoding", "auto")
    if encoding not in ("auto", "base64"):
        raise ToolError("encoding must be auto or base64")
    truncate = _int(body, "truncate", None)
    flt = MessageFilter(body.get("filter"))
    if isinstance(queue, StreamQueue):
        return await _browse_stream(queue, start, count, scan, flt, encoding, truncate)
    rows: list[dict[str, Any]] = []
    looked = 0
    position = -1
    for position, entry in enumerate(queue.browse()):
        if len(rows) >= count or (scan is not None and looked >= scan):
            break
        if position < start:
            continue
        looked += 1
        if flt.matches(entry.message, entry.redelivered):
            row = message_json(entry.message, encoding=encoding, truncate=truncate)
            row["position"] = position
            row["redelivered"] = entry.redelivered
            rows.append(row)
        if looked % SCAN_SLICE == 0:
            await asyncio.sleep(0)  # (Queue.browse stops if the queue moved its pages)
    return rows


async def _browse_stream(
    queue: StreamQueue,
    start: int,
    count: int,
    scan: int | None,
    flt: MessageFilter,
    encoding: str,
    truncate: int | None,
) -> list[dict[str, Any]]:
    log = queue.log
    offset = max(start, log.first_offset)
    end = log.committed_offset
    rows: list[dict[str, Any]] = []
    looked = 0
    while offset < end and len(rows) < count and (scan is None or looked < scan):
        entries = log.read(offset, SCAN_SLICE)
        if not entries:
            break
        for entry in entries:
            if entry.offset >= end or len(rows) >= count or (scan is not None and looked >= scan):
                break
            looked += 1
            if flt.matches(entry.message):
                row = message_json(entry.message, encoding=encoding, truncate=truncate)
                row["offset"] = entry.offset
                row["timestamp"] = entry.timestamp
                rows.append(row)
        offset = entries[-1].offset + 1
        await asyncio.sleep(0)
    return rows


# -- move, copy, replay --------------------------------------------------------------------


class _Target:
    """Where moved messages go: one queue, or an exchange with a routing key (None: each
    message's own)."""

    def __init__(self, vhost: VirtualHost, body: dict[str, Any], source: Queue) -> None:
        self.vhost = vhost
        to_queue = body.get("to_queue")
        to_exchange = body.get("to_exchange")
        if (to_queue is None) == (to_exchange is None):
            raise ToolError("give either to_queue or to_exchange")
        self.queue: Queue | None = None
        self.exchange_name: str | None = None
        key = body.get("routing_key")
        if key is not None and not isinstance(key, str):
            raise ToolError("routing_key must be a string")
        self.routing_key: str | None = key
        if to_queue is not None:
            if not isinstance(to_queue, str):
                raise ToolError("to_queue must be a string")
            queue = vhost.queues.get(to_queue)
            if queue is None:
                raise ToolError(f"no queue '{to_queue}' in vhost '{vhost.name}'", 404, 69)
            if queue is source:
                raise ToolError("the destination is the queue itself")
            self.queue = queue
        else:
            if not isinstance(to_exchange, str):
                raise ToolError("to_exchange must be a string")
            if to_exchange not in vhost.exchanges:
                raise ToolError(f"no exchange '{to_exchange}' in vhost '{vhost.name}'", 404, 69)
            self.exchange_name = to_exchange

    def route(self, message: Message) -> tuple[list[Queue], Message]:
        if self.queue is not None:
            return [self.queue], message
        exchange = self.vhost.exchanges.get(self.exchange_name or "")
        if exchange is None:
            return [], message
        key = self.routing_key if self.routing_key is not None else message.routing_key
        return self.vhost.router.route_publish(exchange, key, message)


class _Moves:
    """Counts of one move; the destination's refusals go back to the source's tail."""

    def __init__(self) -> None:
        self.moved = 0
        self.unroutable = 0
        self.refused = 0

    def put(self, source: Queue | None, queues: list[Queue], message: Message) -> bool:
        """``message`` (already taken from ``source``) into ``queues``; if every one of them
        refuses it (a length limit with reject-publish), back to the tail of ``source``
        (False)."""
        accepted = 0
        for queue in queues:
            if queue.enqueue(message):
                accepted += 1
        if accepted:
            self.moved += 1
            return True
        self.refused += 1
        if source is not None:
            source.enqueue(message)
        return False

    def result(self) -> dict[str, int]:
        return {"moved": self.moved, "unroutable": self.unroutable, "refused": self.refused}


async def _durable(vhost: VirtualHost) -> None:
    """Wait until what was journalled so far is synced (as a publisher confirm waits)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()
    journal = vhost.journal

    def committed() -> None:
        if not done.done():
            done.set_result(journal.ok)

    journal.after_commit(committed)
    if not await done:
        raise ToolError("the store cannot write: the moves made are not durable", 500, 70)


async def move(vhost: VirtualHost, queue: Queue, body: dict[str, Any]) -> dict[str, int]:
    """Move (or ``copy``) the ready messages of ``queue`` that match ``filter``, at most
    ``limit``, to ``to_queue`` or through ``to_exchange`` (``routing_key``: the messages'
    own if not given)."""
    target = _Target(vhost, body, queue)
    flt = MessageFilter(body.get("filter"))
    limit = _int(body, "limit", None)
    copy = bool(body.get("copy", False))
    if isinstance(queue, StreamQueue) and not copy:
        raise ToolError("messages cannot be taken out of a stream: copy them")
    if isinstance(queue, StreamQueue):
        start = _int(body, "offset", 0) or 0
        end = _int(body, "end_offset", None)
        return await _copy_stream(vhost, queue, target, flt, limit, start, end)
    moves = _Moves()

    def route(message: Message) -> tuple[list[Queue], Message] | None:
        queues, message = target.route(message)
        if not queues:
            moves.unroutable += 1
            return None
        return queues, message

    def left() -> int:
        return MOVE_SLICE if limit is None else min(MOVE_SLICE, limit - moves.moved)

    if copy:
        _now(vhost)
        entries = [e for e in queue.browse() if flt.matches(e.message, e.redelivered)]
        for i, entry in enumerate(entries):
            if limit is not None and moves.moved >= limit:
                break
            routed = route(entry.message)
            if routed is not None:
                moves.put(None, *routed)
            if i % MOVE_SLICE == MOVE_SLICE - 1:
                await asyncio.sleep(0)
                _now(vhost)
    elif flt.everything:
        # From the head, so a paged tail comes back as the head drains; what cannot be
        # routed stays where it is and is passed over.
        stays: set[int] = set()  # the messages (by identity) that stay where they are
        while left() > 0:
            _now(vhost)
            window = islice(queue.ready, len(stays) + left())
            batch = [e for e in window if id(e.message) not in stays][: left()]
            if not batch:
                break
            for entry in batch:
                routed = route(entry.message)
                if routed is None:
                    stays.add(id(entry.message))
                elif queue.take(entry) and not moves.put(queue, *routed):
                    stays.add(id(entry.message))  # refused: back at the tail, left there
            await asyncio.sleep(0)
    else:
        queue.unpage()  # any entry may match: all of them must be takeable
        snapshot = list(queue.ready)
        for i in range(0, len(snapshot), MOVE_SLICE):
            _now(vhost)
            for entry in snapshot[i : i + MOVE_SLICE]:
                if limit is not None and moves.moved >= limit:
                    break
                if not flt.matches(entry.message, entry.redelivered):
                    continue
                routed = route(entry.message)
                if routed is not None and queue.take(entry):
                    moves.put(queue, *routed)
            await asyncio.sleep(0)
    await _durable(vhost)
    return moves.result()


async def _copy_stream(
    vhost: VirtualHost,
    queue: StreamQueue,
    target: _Target,
    flt: MessageFilter,
    limit: int | None,
    start: int,
    end: int | None,
) -> dict[str, int]:
    log = queue.log
    offset = max(start, log.first_offset)
    stop = log.committed_offset if end is None else min(end, log.committed_offset)
    moves = _Moves()
    while offset < stop and (limit is None or moves.moved < limit):
        _now(vhost)
        entries = log.read(offset, MOVE_SLICE)
        if not entries:
            break
        for entry in entries:
            if entry.offset >= stop or (limit is not None and moves.moved >= limit):
                break
            if not flt.matches(entry.message):
                continue
            queues, message = target.route(entry.message)
            if queues:
                moves.put(None, queues, message)
            else:
                moves.unroutable += 1
        offset = entries[-1].offset + 1
        await asyncio.sleep(0)
    await _durable(vhost)
    return moves.result()


def death_queue(message: Message) -> str | None:
    """The queue a dead-lettered message came from: its newest ``x-death`` entry's."""
    headers = message.headers or {}
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        name = deaths[0].get("queue")
    else:
        name = headers.get("x-first-death-queue")
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    return name if isinstance(name, str) else None


async def replay(vhost: VirtualHost, queue: Queue, body: dict[str, Any]) -> dict[str, Any]:
    """Move each ready message of a dead-letter queue (that matches ``filter``, at most
    ``limit``) back into the queue its ``x-death`` names. Messages without ``x-death``, or
    whose queue is gone, stay (``skipped``)."""
    if isinstance(queue, StreamQueue):
        raise ToolError("messages cannot be taken out of a stream")
    flt = MessageFilter(body.get("filter"))
    limit = _int(body, "limit", None)
    queue.unpage()
    snapshot = list(queue.ready)
    moves = _Moves()
    skipped = 0
    by_queue: dict[str, int] = {}
    for i in range(0, len(snapshot), MOVE_SLICE):
        _now(vhost)
        for entry in snapshot[i : i + MOVE_SLICE]:
            if limit is not None and moves.moved >= limit:
                break
            if not flt.matches(entry.message, entry.redelivered):
                continue
            name = death_queue(entry.message)
            home = vhost.queues.get(name) if name is not None else None
            if home is None or home is queue:
                skipped += 1
                continue
            if queue.take(entry):
                moves.put(queue, [home], entry.message)
                by_queue[home.name] = by_queue.get(home.name, 0) + 1
        await asyncio.sleep(0)
    await _durable(vhost)
    return {**moves.result(), "skipped": skipped, "queues": by_queue}


# -- delayed exchanges ---------------------------------------------------------------------


def delay_store(vhost: VirtualHost, name: str) -> DelayQueue:
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        raise ToolError(f"no exchange '{name}' in vhost '{vhost.name}'", 404, 69)
    store = vhost.delay_store(exchange)
    if store is None:
        raise ToolError(f"exchange '{name}' in vhost '{vhost.name}' is not x-delayed-message")
    return store


def selector(body: dict[str, Any], *, default_all: bool = False) -> Selector:
    """A selector from JSON: ``ids``, ``message_id``, ``correlation_id``, ``routing_key``
    (all that are given must match), or ``all: true``."""
    ids = body.get("ids")
    if ids is not None and (
        not isinstance(ids, list)
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    ):
        raise ToolError("ids must be a list of integers")
    texts = {}
    for name in ("message_id", "correlation_id", "routing_key"):
        value = body.get(name)
        if value is not None and not isinstance(value, str):
            raise ToolError(f"{name} must be a string")
        texts[name] = value
    everything = body.get("all", default_all)
    if not isinstance(everything, bool):
        raise ToolError("all must be true or false")
    chosen = Selector(ids=ids, everything=everything, **texts)
    if chosen.empty and not everything:
        raise ToolError("say which messages: ids, message_id, correlation_id, routing_key or all")
    return chosen


def scheduled_json(entry: Scheduled, now_ms: int, preview: int) -> dict[str, Any]:
    entry.identify()
    row = message_json(entry.message, truncate=preview)
    del row["exchange"]
    row["id"] = entry.id
    row["due"] = entry.due
    row["due_in"] = entry.due - now_ms
    row["due_at"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(entry.due / 1000)) + (
        f".{entry.due % 1000:03d}Z"
    )
    row["delay"] = entry.delay
    row["published_exchange"] = entry.message.exchange
    return row


def pending(store: DelayQueue, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The pending messages in due order: ``skip``, ``count`` (default 100), ``preview``
    (body bytes shown, default 200), selector fields to narrow it."""
    count = _int(body, "count", DEFAULT_COUNT)
    skip = _int(body, "skip", 0) or 0
    preview = _int(body, "preview", 200) or 0
    narrowed = selector(body, default_all=True)
    now_ms = int(time.time() * 1000)
    entries = store.entries(narrowed, limit=count, skip=skip)
    return [scheduled_json(e, now_ms, preview) for e in entries]


def cancel(store: DelayQueue, body: dict[str, Any]) -> dict[str, int]:
    _now(store.vhost)
    return {"cancelled": store.cancel(selector(body))}


def reschedule(store: DelayQueue, body: dict[str, Any]) -> dict[str, Any]:
    """``delay`` (ms from now) or ``due`` (ms since the epoch) for the selected messages."""
    _now(store.vhost)
    delay = _int(body, "delay", None)
    due = _int(body, "due", None)
    if (delay is None) == (due is None):
        raise ToolError("give either delay (ms from now) or due (ms since the epoch)")
    try:
        moved = store.reschedule(selector(body), due=due, delay=delay)
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    return {"rescheduled": len(moved), "ids": [e.id for e in moved]}
