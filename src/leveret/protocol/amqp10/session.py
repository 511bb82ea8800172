"""The state of AMQP 1.0 sessions and links (spec parts 2.5 and 2.6) held by the connection
machine: windows, handle maps, link credit and delivery counts, multi-frame assembly.

Plain slotted records with the few computations that belong to them; the transitions live in
``connection.py``, the only importer.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.protocol.amqp10._generated.composites import Error
    from leveret.protocol.amqp10.transfer import TransferEncoder
    from leveret.protocol.amqp10.types import Value

__all__ = ["SEQUENCE_MASK", "Link", "LinkState", "Session", "SessionState", "serial_diff"]

SEQUENCE_MASK = 0xFFFFFFFF
"""Sequence numbers (transfer ids, delivery ids, delivery counts) are RFC-1982 uint32."""


def serial_diff(a: int, b: int) -> int:
    """``a - b`` in RFC-1982 serial arithmetic on 32 bits (negative when a is before b)."""
    d = (a - b) & SEQUENCE_MASK
    return d - 0x100000000 if d & 0x80000000 else d


class SessionState(enum.Enum):
    BEGIN_SENT = "begin-sent"  # our begin is out, the peer's answer is not in
    MAPPED = "mapped"
    END_SENT = "end-sent"  # our end is out; everything but the peer's end is discarded
    END_RECEIVED = "end-received"  # the peer's end is in, the broker's answer is not out


class LinkState(enum.Enum):
    ATTACH_SENT = "attach-sent"  # our attach is out
    ATTACH_RECEIVED = "attach-received"  # the peer's attach awaits accept_link/refuse_link
    ATTACHED = "attached"
    DETACH_SENT = "detach-sent"  # our detach is out; input for the link is discarded
    DETACH_RECEIVED = "detach-received"  # the peer's is in, ours not out: the handle is ours


class Link:
    """One link end: ``role`` is ours (``Role.SENDER``: we send transfers on it)."""

    __slots__ = (
        "_state",
        "auto_credit",
        "credit",
        "delivery_count",
        "drain",
        "encoder",
        "handle",
        "initial_delivery_count",
        "max_message_size",
        "name",
        "part_format",
        "part_id",
        "part_settled",
        "part_size",
        "part_state",
        "part_tag",
        "parts",
        "peer_max_message_size",
        "receiving",
        "remote_handle",
        "reported",
        "role",
        "sending",
    )

    def __init__(self, name: str, handle: int, role: bool, state: LinkState) -> None:
        self.name = name
        self.handle = handle
        self.role = role
        self._state = state
        self.receiving = False
        self.sending = False
        self.remote_handle: int | None = None
        self.delivery_count = 0
        self.initial_delivery_count = 0
        self.credit = 0
        self.drain = False
        self.auto_credit = 0  # receiver: keep the credit topped up to this (0: off)
        self.max_message_size: int | None = None  # ours, for incoming messages
        self.peer_max_message_size: int | None = None  # the peer's, for outgoing ones
        self.encoder: TransferEncoder | None = None
        self.reported = False  # LinkDetached already emitted
        # The delivery being assembled from several frames (None: none in progress).
        self.parts: list[bytes] | None = None
        self.part_size = 0
        self.part_id = 0
        self.part_tag = b""
        self.part_settled = False
        self.part_format = 0
        self.part_state: Value = None

    @property
    def state(self) -> LinkState:
        return self._state

    @state.setter
    def state(self, value: LinkState) -> None:
        self._state = value
        # What the per-message paths test instead of role and state.
        self.receiving = value is LinkState.ATTACHED and self.role is True
        self.sending = value is LinkState.ATTACHED and self.role is False


class Session:
    """One session end: ``channel`` is ours, ``remote_channel`` the peer's."""

    __slots__ = (
        "by_remote",
        "channel",
        "end_error",
        "handle_max",
        "incoming_window",
        "incoming_window_size",
        "links",
        "next_delivery_id",
        "next_incoming_id",
        "next_outgoing_id",
        "outgoing_window",
        "pending",
        "remote_channel",
        "remote_handle_max",
        "remote_incoming_window",
        "remote_outgoing_window",
        "reported",
        "state",
    )

    def __init__(
        self,
        channel: int,
        state: SessionState,
        incoming_window: int,
        outgoing_window: int,
        handle_max: int,
    ) -> None:
        self.channel = channel
        self.state = state
        self.remote_channel: int | None = None
        self.next_outgoing_id = 0  # transfer-id of our next transfer frame
        self.next_delivery_id = 0  # delivery-id of our next delivery
        self.outgoing_window = outgoing_window
        self.incoming_window_size = incoming_window  # what we grant each time
        self.incoming_window = incoming_window  # what is left of it
        self.next_incoming_id = 0
        self.remote_incoming_window = 0
        self.remote_outgoing_window = 0
        self.handle_max = handle_max
        self.remote_handle_max = SEQUENCE_MASK
        self.links: dict[int, Link] = {}  # by our handle
        self.by_remote: dict[int, Link] = {}  # by the peer's handle
        # Transfer frames (our handle, the frame's pieces) waiting for the peer's window.
        self.pending: deque[tuple[int, list[bytes | memoryview]]] = deque()
        self.end_error: Error | None = None
        self.reported = False  # SessionEnded already emitted

    def free_handle(self) -> int:
        """The lowest output handle not in use, within the peer's handle-max."""
        handle = 0
        while handle in self.links:
            handle += 1
        return handle
