"""Publisher confirms: one publisher's publishes confirmed in order, and only once the store
has what they confirm.

Each publish gets the next sequence number (1, 2, ...). A publish that wrote nothing durable
is confirmed at the next ``flush``; one that made the store write (``Journal.writes`` moved)
is confirmed from the store's commit callback, and every later confirm of this publisher
waits behind it, so that a confirm covering many publishes (``multiple``) never overtakes a
pending write. A publish that a queue refused (``x-overflow reject-publish``), or that the
failing store could not take, is negatively confirmed alone and at once (after the ones
before it). The front end turns ``ConfirmSink.confirm(upto, multiple, ack)`` into its
protocol: 0-9-1's ``basic.ack``/``basic.nack`` with ``multiple``; 1.0 settles the deliveries
of that range.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.model.journal import Journal


class ConfirmSink(Protocol):
    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        """Publishes up to ``upto`` (all since the last confirm when ``multiple``, else that
        one alone) are confirmed (``ack``) or refused."""
        ...


class JournalSource(Protocol):
    """Where the journal in force is read (the server attaches it after recovery)."""

    journal: Journal


class Confirms:
    """The confirm state of one publisher; see the module docstring."""

    def __init__(self, store: JournalSource, sink: ConfirmSink) -> None:
        self.store = store
        self.sink = sink
        self.seq = 0
        self._confirmed_upto = 0
        self._pending_upto = 0
        # The last publish whose confirm waits for the store's commit, and how many confirm
        # sends are waiting for one (later confirms queue behind them, to stay in order).
        self._sync_upto = 0
        self._waiting = 0
        # Set when the publisher went away: confirms still waiting for the store are dropped.
        self.closed = False

    def published(self, accepted: bool, stored: bool) -> None:
        """Record publish number ``seq`` (already counted by the caller): whether a queue
        accepted it, and whether routing it made the store write."""
        journal = self.store.journal
        if stored:
            if journal.ok:
                self._sync_upto = self.seq  # stored: confirm once on disk
            else:
                accepted = False  # the store is failing (disk full): nack at once
        if accepted:
            self._pending_upto = self.seq
            return
        self.flush()
        seq = self._confirmed_upto = self._pending_upto = self.seq
        if self._waiting:
            self._waiting += 1
            journal.after_commit(lambda: self._send(seq, False, False))
        else:
            self.sink.confirm(seq, multiple=False, ack=False)

    def flush(self) -> None:
        """Send the confirms owed for publishes routed so far, coalesced."""
        upto = self._pending_upto
        if upto > self._confirmed_upto:
            multiple = upto - self._confirmed_upto > 1
            if self._sync_upto > self._confirmed_upto or self._waiting:
                # Some of these publishes are being written: confirm after the commit
                # (and so do later ones, so that a multiple confirm never overtakes them).
                self._waiting += 1
                self.store.journal.after_commit(lambda: self._send(upto, multiple, True))
            else:
                self.sink.confirm(upto, multiple=multiple, ack=True)
            self._confirmed_upto = upto

    def _send(self, upto: int, multiple: bool, ack: bool) -> None:
        """A confirm that waited for the store's commit; negative if the commit failed (the
        store's ``ok`` is False while the callbacks of a failed batch run)."""
        self._waiting -= 1
        if not self.closed:
            self.sink.confirm(upto, multiple=multiple, ack=ack and self.store.journal.ok)
