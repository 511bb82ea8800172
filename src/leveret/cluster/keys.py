"""Where the cluster's state lives in etcd: the key layout and the values' encoding.

Every key is under one prefix (``/leveret/`` by default) and made of path segments, each
percent-encoded (``urllib.parse.quote`` with no safe character), so the vhost ``/`` is
``%2F`` and a segment never contains the separator: the keys of one vhost are exactly the
keys under ``.../{vhost}/``, which a range or a delete can name.

```
{prefix}cluster                                   the cluster's identity (id, created by)
{prefix}nodes/{node}                              a running node (under its lease)
{prefix}members/{node}                            a node that joined (until forgotten)
{prefix}auth/lock                                 rewritten by every auth change
{prefix}auth/users/{user}
{prefix}auth/vhosts/{vhost}                       with its limits
{prefix}auth/permissions/{vhost}/{user}
{prefix}auth/topic_permissions/{vhost}/{user}/{exchange}
{prefix}runtime/lock                              rewritten by every runtime change
{prefix}runtime/policies/{vhost}/{name}
{prefix}runtime/operator_policies/{vhost}/{name}
{prefix}runtime/parameters/{vhost}/{component}/{name}
{prefix}runtime/global_parameters/{name}
{prefix}entities/exchanges/{vhost}/{name}
{prefix}entities/queues/{vhost}/{name}            with its leader node
{prefix}entities/bindings/{vhost}/{q|e}/{destination}/{source}/{digest}
```

Bindings are keyed by destination first, so a queue's deletion removes its bindings with
one range delete; ``digest`` identifies the routing key and arguments. Values are JSON;
arguments (field tables) are tagged so they come back with their types (``store/values.py``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from leveret.store.values import dump_table, load_table

DEFAULT_PREFIX = "/leveret/"

# What a key is about, by its first segments.
AUTH_SECTIONS = ("users", "vhosts", "permissions", "topic_permissions")
RUNTIME_SECTIONS = ("policies", "operator_policies", "parameters", "global_parameters")
ENTITY_SECTIONS = ("exchanges", "queues", "bindings")


def segment(name: str) -> str:
    return quote(name, safe="")


@dataclass(frozen=True, slots=True)
class Path:
    """A key split into its parts: ``area`` (auth, runtime, entities, nodes, members,
    cluster), ``section`` (users, queues, ...) and the names that follow."""

    area: str
    section: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    """The keys of one cluster (``prefix``: every key starts with it)."""

    prefix: str = DEFAULT_PREFIX

    def key(self, *parts: str) -> bytes:
        return (self.prefix + "/".join(segment(p) for p in parts)).encode()

    def under(self, *parts: str) -> bytes:
        """The prefix of every key below ``parts`` (ends with the separator)."""
        return self.key(*parts) + b"/"

    @property
    def root(self) -> bytes:
        return self.prefix.encode()

    @property
    def cluster(self) -> bytes:
        return self.key("cluster")

    def node(self, name: str) -> bytes:
        return self.key("nodes", name)

    def member(self, name: str) -> bytes:
        return self.key("members", name)

    def lock(self, area: str) -> bytes:
        return self.key(area, "lock")

    def exchange(self, vhost: str, name: str) -> bytes:
        return self.key("entities", "exchanges", vhost, name)

    def queue(self, vhost: str, name: str) -> bytes:
        return self.key("entities", "queues", vhost, name)

    def binding(
        self, vhost: str, dest_kind: str, destination: str, source: str, digest: str
    ) -> bytes:
        return self.key("entities", "bindings", vhost, dest_kind, destination, source, digest)

    def bindings_to(self, vhost: str, dest_kind: str, destination: str) -> bytes:
        return self.under("entities", "bindings", vhost, dest_kind, destination)

    def parse(self, key: bytes) -> Path | None:
        """The parts of a key of this layout; None for a key that is not one."""
        text = key.decode("utf-8", errors="replace")
        if not text.startswith(self.prefix):
            return None
        parts = [unquote(p) for p in text[len(self.prefix) :].split("/")]
        if len(parts) == 1:
            return Path(parts[0], "", ())
        return Path(parts[0], parts[1], tuple(parts[2:]))


def binding_digest(routing_key: str, arguments: dict[str, object]) -> str:
    """A short stable id of a binding's routing key and arguments (types included)."""
    data = json.dumps([routing_key, dump_table(arguments)], sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()[:24]


def encode(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes) -> Any:
    return json.loads(data)


def encode_arguments(arguments: dict[str, object]) -> Any:
    return dump_table(arguments)


def decode_arguments(data: Any) -> dict[str, object]:
    return load_table(data or {})
