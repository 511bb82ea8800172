"""``leveret ctl``'s commands for quorum queues, with ``rabbitmq-queues``' names and
argument order: ``add_member [-p vhost] queue node``, ``delete_member [-p vhost] queue
node``, ``grow node all|even [--vhost-pattern P] [--queue-pattern P] [--errors-only]``,
``shrink node [--errors-only]``, ``quorum_status [-p vhost] queue``; and
``rabbitmq-streams``' for streams: ``add_replica [-p vhost] stream node``,
``delete_replica [-p vhost] stream node``, ``stream_status [-p vhost] stream``.

``cli/ctl.py`` merges these into its tables (verbs, banners, columns, request arguments);
``server/ctl/quorum.py`` answers them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

__all__ = ["BANNERS", "DEFAULT_COLUMNS", "SPECS", "VERBS", "request_args"]

# One ``add_argument`` call: its names and its keywords (ctl.py's ``Arg``).
_Arg = tuple[tuple[str, ...], dict[str, Any]]
_VHOST: _Arg = (("-p", "--vhost"), {"default": "/", "help": "virtual host (default /)"})
_QUEUE_NODE: tuple[_Arg, ...] = (
    _VHOST,
    (("queue",), {}),
    (("node",), {"help": "a cluster node's name (cluster_status lists them)"}),
)
_ERRORS_ONLY: _Arg = (
    ("--errors-only",),
    {"action": "store_true", "help": "only list the queues that reported an error"},
)

# verb -> (help, its arguments), merged into ctl.py's VERBS.
SPECS: dict[str, tuple[str, tuple[_Arg, ...]]] = {
    "add_member": ("add a member (replica) on a node to a quorum queue", _QUEUE_NODE),
    "delete_member": ("remove a quorum queue's member (replica) on a node", _QUEUE_NODE),
    "grow": (
        "add a node as a member to every matching quorum queue",
        (
            (("node",), {}),
            (
                ("strategy",),
                {
                    "choices": ("all", "even"),
                    "help": "all: every queue; even: those with an even number of members",
                },
            ),
            (("--vhost-pattern",), {"default": ".*", "help": "regex of the vhosts"}),
            (("--queue-pattern",), {"default": ".*", "help": "regex of the queue names"}),
            _ERRORS_ONLY,
        ),
    ),
    "shrink": (
        "remove a node's member from every quorum queue (not the last member of one)",
        ((("node",), {}), _ERRORS_ONLY),
    ),
    "quorum_status": (
        "show a quorum queue's members: role, in sync, log offsets",
        (_VHOST, (("queue",), {})),
    ),
    # rabbitmq-streams' verbs.
    "add_replica": ("add a replica on a node to a stream", _QUEUE_NODE),
    "delete_replica": ("remove a stream's replica on a node", _QUEUE_NODE),
    "stream_status": (
        "show a stream's members: role (writer, replica), in sync, offsets",
        (_VHOST, (("queue",), {})),
    ),
}

VERBS = frozenset(SPECS)

BANNERS = {
    "add_member": "Adding a replica for queue {queue} on node {node}...",
    "delete_member": "Removing a replica of queue {queue} on node {node}...",
    "grow": "Growing {strategy} quorum queues on {node}...",
    "shrink": "Shrinking quorum queues on {node}...",
    "quorum_status": "Status of quorum queue {queue} on node ...",
    "add_replica": "Adding a replica for stream {queue} on node {node}...",
    "delete_replica": "Removing a replica of stream {queue} on node {node}...",
    "stream_status": "Status of stream {queue} ...",
}

_STATUS_COLUMNS = [
    "node",
    "role",
    "running",
    "in_sync",
    "epoch",
    "log_offset",
    "committed_offset",
]

DEFAULT_COLUMNS = {
    "grow": ["vhost", "name", "size", "result"],
    "shrink": ["vhost", "name", "size", "result"],
    "quorum_status": _STATUS_COLUMNS,
    "stream_status": _STATUS_COLUMNS,
}


def request_args(verb: str, a: argparse.Namespace) -> dict[str, Any]:
    """The control request's arguments for one of :data:`VERBS`."""
    if verb in ("add_member", "delete_member", "add_replica", "delete_replica"):
        return {"vhost": a.vhost, "queue": a.queue, "node": a.node}
    if verb == "grow":
        return {
            "node": a.node,
            "strategy": a.strategy,
            "vhost_pattern": a.vhost_pattern,
            "queue_pattern": a.queue_pattern,
            "errors_only": a.errors_only,
        }
    if verb == "shrink":
        return {"node": a.node, "errors_only": a.errors_only}
    if verb in ("quorum_status", "stream_status"):
        return {"vhost": a.vhost, "queue": a.queue}
    return {}
