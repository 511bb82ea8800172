"""Where a front end's declarations go first when a vhost's definitions are shared by the
nodes of a cluster: ``SharedMetadata``, which a cluster node gives each vhost
(``VirtualHost.shared``) and which writes a queue, an exchange or a binding to the
cluster's metadata store before the client is answered.

So two nodes whose clients declare the same queue at once agree on one outcome (the second
gets what a redeclaration gets: ok when equivalent, 406 when not), a queue's leader is
chosen by its locator rather than always being the declaring node, and transient and
exclusive queues and their bindings are known to every node, as in RabbitMQ. Each call
answers a ``Completion`` that is done once the change is in the store and in this node's
model (then the front end makes the same declaration on the model, which finds it there, or
makes the exclusive queue its connection owns, and answers as on one node), or None when
there is nothing to wait for (a queue's: whether this declaration made the record, rather
than finding one another made). ``owner``: the declaring connection's owner object (what the
model's exclusivity compares), for exclusive queues and bindings to them; the metadata
store names it by a token while it lives (kept weakly, so an owner must be weakly
referable: an owner that cannot be, the compiled 0-10 session, hands its ``RecordOwner``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from leveret.model.completion import Completion
    from leveret.model.queues.base import Queue


class RecordOwner:
    """An exclusive queue's owner as the cluster's records know it, for an owner that
    cannot be weakly referenced itself (a compiled class: the 0-10 session, which holds
    one for its life). The model still compares the owner itself; this one stands for it
    in ``SharedMetadata``'s calls, so both name it by one token."""

    __slots__ = ("__weakref__",)


class SharedMetadata(Protocol):
    def declare_queue(
        self,
        name: str,
        *,
        generated_name: str,
        owner: object,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Mapping[str, object],
    ) -> Completion[bool] | None: ...

    def owner_gone(self, owner: object) -> None:
        """``owner`` (what its declarations passed) ended, and the model lost its exclusive
        queues: the records of any its front end never made (a connection lost while the
        record was being written) go from the store too."""
        ...

    def released(self, queue: Queue) -> None:
        """``queue``, exclusive and led here, outlives its owner for a while and is
        anyone's meanwhile (Qpid's ``qpid.auto_delete_timeout``): its record in the store
        names no owner from now on, so every node serves it as this one does."""
        ...

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        *,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, object],
    ) -> Completion[None] | None: ...

    def bind(
        self,
        source: str,
        dest_kind: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object],
        owner: object,
    ) -> Completion[None] | None: ...

    def unbind(
        self,
        source: str,
        dest_kind: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> Completion[None] | None: ...

    def delete_exchange(self, name: str, *, if_unused: bool) -> Completion[None] | None: ...

    def delete_queue(self, queue: Queue) -> Completion[None] | None:
        """``queue``, which the front end checked (``VirtualHost.check_delete``), out of
        the store; done once it is gone there and from this node's model (which removes it,
        its consumers' owners told), or None when the store has no record of it."""
        ...

    def create_super_stream(
        self,
        name: str,
        streams: Sequence[str],
        binding_keys: Sequence[str],
        arguments: Mapping[str, object],
        owner: object | None,
    ) -> Completion[bool]:
        """Super stream ``name`` (``model/super_stream.py``'s exchange, partitions and
        bindings) into the store; done with whether this call made it (False: its exchange
        was there already, another's), or failed with what refused it, nothing left.
        ``owner``: the creating connection (None: ``leveret ctl``)."""
        ...

    def delete_super_stream(self, name: str, partitions: Sequence[Queue]) -> Completion[None]:
        """Super stream ``name``'s exchange and ``partitions`` (``super_stream.members``)
        out of the store; done once they are gone there and from this node's model."""
        ...
