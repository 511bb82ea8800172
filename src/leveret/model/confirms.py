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

A publish routed to a queue led by another node (``queues/remote.py``) is confirmed only
once that node confirmed it too: its ``remote`` completion (True: the leader confirmed;
False: refused, or the leader's node went) gates its confirm as a store write does, and a
refusal makes a negative confirm of that publish alone, the others around it positive.
Confirm sends wait in one queue in order, each until the store's commit and every remote
completion it covers are in.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.model.completion import Completion
    from leveret.model.journal import Journal


class ConfirmSink(Protocol):
    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        """Publishes up to ``upto`` (all since the last confirm when ``multiple``, else that
        one alone) are confirmed (``ack``) or refused."""
        ...


class JournalSource(Protocol):
    """Where the journal in force is read (the server attaches it after recovery)."""

    journal: Journal


class _Send:
    """A confirm send waiting for its gates: the store's commit, remote completions."""

    __slots__ = ("ack", "gates", "pending", "remote", "start", "upto")

    def __init__(self, start: int, upto: int, ack: bool) -> None:
        self.start = start
        self.upto = upto
        self.ack = ack
        self.gates = 0
        self.remote: list[tuple[int, Completion[bool]]] = []
        # ``remote[pending:]`` are done (``Confirms._await_remote``).
        self.pending = 0


class Confirms:
    """The confirm state of one publisher; see the module docstring."""

    def __init__(self, store: JournalSource, sink: ConfirmSink) -> None:
        self.store = store
        self.sink = sink
        self.seq = 0
        self._confirmed_upto = 0
        self._pending_upto = 0
        # The last publish whose confirm waits for the store's commit.
        self._sync_upto = 0
        # Confirm sends waiting for their gates, in order; later ones wait behind them.
        self._sends: deque[_Send] = deque()
        # Publishes whose queue's leader (another node) has not answered yet.
        self._remote: list[tuple[int, Completion[bool]]] = []
        # Set when the publisher went away: confirms still waiting for the store are dropped.
        self.closed = False

    def published(
        self, accepted: bool, stored: bool, remote: Completion[bool] | None = None
    ) -> None:
        """Record publish number ``seq`` (already counted by the caller): whether a queue
        accepted it, whether routing it made the store write, and (``remote``) whether the
        leaders of the queues led elsewhere that it went to confirmed it."""
        if stored:
            if self.store.journal.ok:
                self._sync_upto = self.seq  # stored: confirm once on disk
            else:
                accepted = False  # the store is failing (disk full): nack at once
        if remote is not None:
            if not remote.done:
                self._remote.append((self.seq, remote))
            elif remote.error is not None or not remote.result():
                accepted = False
        if accepted:
            self._pending_upto = self.seq
            return
        self.flush()
        seq = self._confirmed_upto = self._pending_upto = self.seq
        if self._sends:
            self._sends.append(_Send(seq - 1, seq, False))
            self._drain()
        else:
            self.sink.confirm(seq, multiple=False, ack=False)

    def flush(self) -> None:
        """Send the confirms owed for publishes routed so far, coalesced."""
        upto = self._pending_upto
        start = self._confirmed_upto
        if upto <= start:
            return
        self._confirmed_upto = upto
        remote = self._remote
        if self._sync_upto <= start and not remote and not self._sends:
            self.sink.confirm(upto, multiple=upto - start > 1, ack=True)
            return
        # Confirms behind a send that waits go through the store's commit too, so that
        # the confirms of a batch that fails are all negative, in order.
        sync = self._sync_upto > start or bool(self._sends)
        send = _Send(start, upto, True)
        self._sends.append(send)
        if remote:
            if remote[-1][0] <= upto:
                send.remote, self._remote = remote, []
            else:
                send.remote = [r for r in remote if r[0] <= upto]
                self._remote = [r for r in remote if r[0] > upto]
            send.pending = len(send.remote)
            if self._await_remote(send):
                send.gates += 1
        if sync:
            # Some of these publishes are being written: confirm after the commit.
            send.gates += 1
            self.store.journal.after_commit(lambda: self._committed(send))
        self._drain()

    def _await_remote(self, send: _Send) -> bool:
        """Wait for the last of ``send``'s remote completions still pending, if any. One
        callback a send, not one a publish: a leader confirms in order, so when the last
        is done the others are too; any still pending then (another leader's) is waited
        for the same way. Each completion is looked at once (``pending`` only falls)."""
        remote = send.remote
        i = send.pending
        while i > 0:
            completion = remote[i - 1][1]
            if not completion.done:
                send.pending = i - 1
                completion.on_done(lambda _done: self._remote_done(send))
                return True
            i -= 1
        send.pending = 0
        return False

    def _remote_done(self, send: _Send) -> None:
        if not self._await_remote(send):
            self._opened(send)

    def _committed(self, send: _Send) -> None:
        # Negative if the commit failed (the store's ``ok`` is False while the callbacks
        # of a failed batch run).
        if not self.store.journal.ok:
            send.ack = False
        self._opened(send)

    def _opened(self, send: _Send) -> None:
        send.gates -= 1
        self._drain()

    def _drain(self) -> None:
        sends = self._sends
        while sends and sends[0].gates <= 0:
            self._emit(sends.popleft())

    def _emit(self, send: _Send) -> None:
        if self.closed:
            return
        sink = self.sink
        last, upto, ack = send.start, send.upto, send.ack
        for seq, completion in send.remote:
            if completion.error is None and completion.result():
                continue
            if seq - 1 > last:
                sink.confirm(seq - 1, multiple=seq - 1 - last > 1, ack=ack)
            sink.confirm(seq, multiple=False, ack=False)
            last = seq
        if upto > last:
            sink.confirm(upto, multiple=upto - last > 1, ack=ack)
