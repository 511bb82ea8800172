"""The values an ``x-lvc`` exchange keeps (``model/exchanges/lvc.py``): their memory in the
broker's gauge and, for a durable exchange, their copies in the message store.

A durable exchange's values are a hidden durable queue of the message store,
``amq.lvc.<exchange>`` (a name no client can declare), declared when the first value is
kept: each value is written there under its key (the stored copy's routing key is the key it
is kept under), and the one it replaces removed, in the same loop turn, so in the same
group-committed batch. Every value is written, whatever its delivery mode, as the plugin
keeps every one in a disc table. ``store/recovery.py`` gives the records back to
``restore`` after the bindings are restored, so that restoring a binding hands nothing out
again. A non-durable exchange keeps its values in memory only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from leveret.model.entry import MESSAGE_OVERHEAD

if TYPE_CHECKING:
    from leveret.model.exchange import Exchange
    from leveret.model.exchanges.base import RoutedMessage
    from leveret.model.exchanges.lvc import LastValueExchange
    from leveret.model.journal import Journal
    from leveret.model.memory_gauge import MemoryGauge
    from leveret.model.message import Message

__all__ = ["STORE_PREFIX", "LastValueStore", "LvcHost"]

STORE_PREFIX = "amq.lvc."


class LvcHost(Protocol):
    """What the store asks of its virtual host: its name, gauge and journal (read at each
    write: the broker sets it once it has its message store)."""

    @property
    def name(self) -> str: ...

    @property
    def gauge(self) -> MemoryGauge: ...

    @property
    def journal(self) -> Journal: ...


class LastValueStore:
    """Memory accounting and durable copies of one ``x-lvc`` exchange's values."""

    def __init__(self, vhost: LvcHost, exchange: Exchange, kind: LastValueExchange) -> None:
        self.vhost = vhost
        self.exchange = exchange
        self.kind = kind
        self.name = STORE_PREFIX + exchange.name
        self.store_id = 0
        # Store ids of the stored copies by key (durable exchanges).
        self.sids: dict[str, int] = {}
        kind.store = self

    def kept(self, key: str, old: RoutedMessage | None, new: RoutedMessage | None) -> None:
        gauge = self.vhost.gauge
        if old is not None:
            gauge.bytes -= _size(old)
        if new is not None:
            gauge.bytes += _size(new)
        if not self.exchange.durable:
            return
        journal = self.vhost.journal
        sid = self.sids.pop(key, 0)
        if sid:
            journal.removed(self.store_id, sid)
        if new is not None:
            message = cast("Message", new)
            copy = message.replace(routing_key=key) if message.routing_key != key else message
            self.sids[key] = journal.enqueued(self._store_id(), copy)

    def _store_id(self) -> int:
        if not self.store_id:
            self.store_id = self.vhost.journal.queue_declared(
                self.vhost.name, self.name, False, {"x-lvc-exchange": self.exchange.name}
            )
        return self.store_id

    def restore(self, message: Message, sid: int) -> None:
        """A value recovered from the store (its routing key is its key); nothing written."""
        key = message.routing_key
        old = self.kind.values.get(key)
        self.kind.values[key] = message
        if old is not None:
            self.vhost.gauge.bytes -= _size(old)
        self.vhost.gauge.bytes += _size(message)
        self.sids[key] = sid

    def drop(self) -> None:
        """The exchange is deleted: its values and the hidden queue go."""
        self.kind.forget()
        if self.store_id:
            self.vhost.journal.queue_deleted(self.vhost.name, self.name, self.store_id)
            self.store_id = 0
        self.sids.clear()


def _size(message: RoutedMessage) -> int:
    body = getattr(message, "body", b"")
    return len(body) + MESSAGE_OVERHEAD
