"""The auth registry and the runtime parameters as etcd keys, one key per entry of their
definitions document (``keys.py`` has the layout), and back.

A change to either is made on a scratch copy (``scratch_users`` / ``scratch_runtime``)
with the code a single node runs, so the same checks give the same errors; the keys that
differ before and after are what the transaction writes (``diff``). Used by
``cluster/metadata.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.auth.definitions import export_definitions, load_store
from leveret.auth.users import UserStore
from leveret.cluster.keys import AUTH_SECTIONS, RUNTIME_SECTIONS, encode
from leveret.model.broker import Broker
from leveret.server.parameters import Runtime

if TYPE_CHECKING:
    from leveret.cluster.apply import Applier
    from leveret.cluster.keys import Layout

# The names in each section's key, from its definitions entry.
_IDS = {
    "users": ("name",),
    "vhosts": ("name",),
    "permissions": ("vhost", "user"),
    "topic_permissions": ("vhost", "user", "exchange"),
    "policies": ("vhost", "name"),
    "operator_policies": ("vhost", "name"),
    "parameters": ("vhost", "component", "name"),
    "global_parameters": ("name",),
}


def entries(layout: Layout, area: str, doc: dict[str, Any]) -> dict[bytes, bytes]:
    """``doc``'s entries as keys and values of ``area`` (auth or runtime)."""
    sections = AUTH_SECTIONS if area == "auth" else RUNTIME_SECTIONS
    out: dict[bytes, bytes] = {}
    for section in sections:
        for entry in doc.get(section) or []:
            names = tuple(str(entry.get(f, "")) for f in _IDS[section])
            out[layout.key(area, section, *names)] = encode(entry)
    return out


def current(applier: Applier, area: str) -> dict[bytes, bytes]:
    """The keys of ``area`` the copy holds (the lock key left out)."""
    layout = applier.layout
    lock = layout.lock(area)
    marker = layout.under(area)
    return {
        k: encode(e.value) for k, e in applier.entries.items() if k.startswith(marker) and k != lock
    }


def diff(
    before: dict[bytes, bytes], after: dict[bytes, bytes]
) -> tuple[dict[bytes, bytes], list[bytes]]:
    """The puts and deletes that turn ``before`` into ``after``."""
    puts = {k: v for k, v in after.items() if before.get(k) != v}
    deletes = [k for k in before if k not in after]
    return puts, deletes


def scratch_users(applier: Applier) -> UserStore:
    users = UserStore(loopback_users=applier.users.loopback_users)
    load_store(users, applier.auth_document())
    return users


def auth_document(users: UserStore) -> dict[str, Any]:
    return export_definitions(users)


def scratch_runtime(applier: Applier) -> Runtime:
    """A runtime over a broker of empty vhosts (the registry's), holding the parameters
    and policies the copy holds."""
    broker = Broker(consumer_timeout=None)
    for name in applier.users.vhosts:
        broker.add_vhost(name)
    runtime = Runtime(broker)
    runtime.load(runtime_document(applier))
    return runtime


def runtime_document(applier: Applier) -> dict[str, Any]:
    return {s: applier.section_values("runtime", s) for s in RUNTIME_SECTIONS}
