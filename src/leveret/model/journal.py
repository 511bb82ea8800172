"""What the model tells the durable store, as a Protocol the store implements.

The model never imports the store (DESIGN.md layers): the server injects an object with
these methods (``Broker.attach_journal``). Without one, ``NULL_JOURNAL`` ignores everything,
so unit tests and a broker without a data directory behave as before.

Ids: the store gives every durable queue an id (``queue_declared``) and every persistent
message stored in a durable queue an id (``enqueued``); the model keeps them in
``Queue.store_id`` and ``QueuedMessage.sid`` and hands them back on delivery and removal.
``enqueued``'s ``at_ms`` (wall clock, milliseconds) is the time stored with the message
instead of the enqueue time: a delayed exchange's store (``model/queues/delayed.py``) keeps each
pending message's due time there, and recovery hands it back as the enqueue time.
``writes`` counts message records a publisher confirm must wait for; a session compares it
before and after routing and, when it moved, sends its confirm from ``after_commit``.

Distributed transactions (``model/dtx.py``): ``dtx_committed`` writes a marker with the
effects of a logged two-phase commit, in the same batch (the store writes a batch whole or
not at all), so that at the next boot the store can tell whether those effects are on disk
(``Recovered.dtx_markers``); ``dtx_forgotten`` drops the marker once the dtx log says the
branch is finished.

``ok`` is False while the callbacks of a batch that failed to write run (their confirms
become nacks) and while the store is failing (then ``after_commit`` runs its callback at once
and a publish that moved ``writes`` is nacked at once); a journal that cannot fail keeps it
True.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from leveret.model.message import Message


class Journal(Protocol):
    writes: int
    ok: bool

    def exchange_declared(
        self,
        vhost: str,
        name: str,
        type_name: str,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, object],
    ) -> None: ...

    def exchange_deleted(self, vhost: str, name: str) -> None: ...

    def queue_declared(
        self, vhost: str, name: str, auto_delete: bool, arguments: Mapping[str, object]
    ) -> int: ...

    def queue_deleted(self, vhost: str, name: str, store_id: int) -> None: ...

    def binding_changed(
        self,
        added: bool,
        vhost: str,
        source: str,
        to_queue: bool,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> None: ...

    def enqueued(self, queue_id: int, message: Message, at_ms: int = 0) -> int: ...

    def delivered(self, queue_id: int, sid: int) -> None: ...

    def removed(self, queue_id: int, sid: int) -> None: ...

    def after_commit(self, callback: Callable[[], None]) -> None: ...

    def dtx_committed(self, key: bytes) -> int: ...

    def dtx_forgotten(self, marker: int) -> None: ...


class NullJournal:
    """Keeps nothing: every entity is transient."""

    writes = 0
    ok = True

    def exchange_declared(
        self,
        vhost: str,
        name: str,
        type_name: str,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, object],
    ) -> None:
        return None

    def exchange_deleted(self, vhost: str, name: str) -> None:
        return None

    def queue_declared(
        self, vhost: str, name: str, auto_delete: bool, arguments: Mapping[str, object]
    ) -> int:
        return 0

    def queue_deleted(self, vhost: str, name: str, store_id: int) -> None:
        return None

    def binding_changed(
        self,
        added: bool,
        vhost: str,
        source: str,
        to_queue: bool,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> None:
        return None

    def enqueued(self, queue_id: int, message: Message, at_ms: int = 0) -> int:
        return 0

    def delivered(self, queue_id: int, sid: int) -> None:
        return None

    def removed(self, queue_id: int, sid: int) -> None:
        return None

    def after_commit(self, callback: Callable[[], None]) -> None:
        callback()

    def dtx_committed(self, key: bytes) -> int:
        return 0

    def dtx_forgotten(self, marker: int) -> None:
        return None


NULL_JOURNAL = NullJournal()
