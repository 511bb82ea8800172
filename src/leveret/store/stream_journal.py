"""The journal the server attaches when streams are stored: the message store's journal,
with publisher confirms that also wait for the stream writer.

A session compares ``writes`` before and after routing; stream appends count there too, and
``after_commit`` waits for both writers at once: the callback runs when the stream writer
has synced every append made so far AND the message store has committed its batch. Each
writer runs its callbacks in registration order, so a later confirm never completes before
an earlier one. So a confirm goes out only when both the classic-queue records and the
stream records of the publishes it covers are on disk, confirms keep their order, and the
two syncs overlap instead of following each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from leveret.model.journal import Journal
    from leveret.store.stream_log import StreamStore


class StreamJournal:
    """``Journal`` = ``disk`` + the stream writer's syncs; see the module docstring."""

    def __init__(self, disk: Journal, streams: StreamStore) -> None:
        self.disk = disk
        self.streams = streams
        # Called once or twice per message (publish, delivery, ack): the message store's
        # own methods, without a frame of this wrapper's in between.
        self.enqueued = disk.enqueued
        self.delivered = disk.delivered
        self.removed = disk.removed

    @property
    def writes(self) -> int:
        return self.disk.writes + self.streams.writes

    @writes.setter
    def writes(self, value: int) -> None:
        raise AttributeError("writes is counted by the stores")

    @property
    def ok(self) -> bool:
        return self.disk.ok

    @ok.setter
    def ok(self, value: bool) -> None:
        raise AttributeError("ok is the message store's")

    def exchange_declared(
        self,
        vhost: str,
        name: str,
        type_name: str,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, object],
    ) -> None:
        self.disk.exchange_declared(vhost, name, type_name, auto_delete, internal, arguments)

    def exchange_deleted(self, vhost: str, name: str) -> None:
        self.disk.exchange_deleted(vhost, name)

    def queue_declared(
        self, vhost: str, name: str, auto_delete: bool, arguments: Mapping[str, object]
    ) -> int:
        return self.disk.queue_declared(vhost, name, auto_delete, arguments)

    def queue_deleted(self, vhost: str, name: str, store_id: int) -> None:
        self.disk.queue_deleted(vhost, name, store_id)

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
        self.disk.binding_changed(
            added, vhost, source, to_queue, destination, routing_key, arguments
        )

    def dtx_committed(self, key: bytes) -> int:
        return self.disk.dtx_committed(key)

    def dtx_forgotten(self, marker: int) -> None:
        self.disk.dtx_forgotten(marker)

    def after_commit(self, callback: Callable[[], None]) -> None:
        waiting = [2]

        def one_done() -> None:
            waiting[0] -= 1
            if not waiting[0]:
                callback()

        self.disk.after_commit(one_done)
        self.streams.after_sync(one_done)
