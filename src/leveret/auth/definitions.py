"""The auth part of RabbitMQ's definitions format (``rabbitmqctl export_definitions``):
users, vhosts, permissions, topic permissions and limits, in and out of a ``UserStore``.

It is also how ``auth.persist`` keeps the store on disk, so a Leveret data directory's
``auth.json`` and a RabbitMQ export read the same way. Imported by ``auth.persist``,
``server.ctl.admin`` (``leveret ctl import_definitions`` / ``export_definitions``) and tests.

RabbitMQ's fields and their quirks, as 3.10 writes and reads them: ``password_hash`` is
base64 of salt + digest, with ``hashing_algorithm`` naming the digest (absent: the
default, SHA-256); a ``password`` field instead of a hash is hashed on import (RabbitMQ
accepts it too); ``tags`` is a list or a comma-separated string; vhost metadata sits in
``metadata`` (3.8 and later) or at the top of the entry (older); vhost limits come as
``parameters`` of component ``vhost-limits``. Exchanges, queues, bindings, policies and
other parameters are not this module's: they are counted in ``ImportSummary.skipped``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from leveret.auth import passwords
from leveret.auth.limits import USER_LIMITS, VHOST_LIMITS
from leveret.auth.passwords import DEFAULT_ALGORITHM, BadPasswordHash
from leveret.auth.users import InvalidArgument, UserStore

VHOST_LIMITS_COMPONENT = "vhost-limits"
_AUTH_KEYS = frozenset(
    ("users", "vhosts", "permissions", "topic_permissions", "parameters", "rabbit_version")
)


@dataclass
class ImportSummary:
    users: int = 0
    vhosts: int = 0
    permissions: int = 0
    topic_permissions: int = 0
    limits: int = 0
    # Definitions of kinds this module does not import, by kind.
    skipped: dict[str, int] = field(default_factory=dict)


def export_definitions(store: UserStore) -> dict[str, Any]:
    """The store as RabbitMQ's definitions (sorted, so equal stores give equal files)."""
    users = [
        {
            "name": u.name,
            "password_hash": passwords.encode_hash(u.password_hash),
            "hashing_algorithm": u.hashing_algorithm,
            "tags": list(u.tags),
            "limits": dict(sorted(u.limits.items())),
        }
        for u in sorted(store.users.values(), key=lambda u: u.name)
    ]
    vhosts = [
        {
            "name": v.name,
            "limits": [[k, n] for k, n in sorted(v.limits.items())],
            "metadata": {
                "description": v.description,
                "tags": list(v.tags),
                # Left out when unset: RabbitMQ 3.10 silently skips a vhost whose metadata
                # says "default_queue_type": "undefined" (its own exports never say it).
                **({"default_queue_type": v.default_queue_type} if v.default_queue_type else {}),
            },
        }
        for v in sorted(store.vhosts.values(), key=lambda v: v.name)
    ]
    permissions = [
        {"user": user, "vhost": vhost, "configure": p.configure, "write": p.write, "read": p.read}
        for (user, vhost), p in sorted(store.permissions.items())
    ]
    topic_permissions = [
        {"user": user, "vhost": vhost, "exchange": name, "write": t.write, "read": t.read}
        for (user, vhost), by_exchange in sorted(store.topic_permissions.items())
        for name, t in sorted(by_exchange.items())
    ]
    parameters = [
        {
            "component": VHOST_LIMITS_COMPONENT,
            "name": "limits",
            "vhost": v.name,
            "value": dict(sorted(v.limits.items())),
        }
        for v in sorted(store.vhosts.values(), key=lambda v: v.name)
        if v.limits
    ]
    return {
        "users": users,
        "vhosts": vhosts,
        "permissions": permissions,
        "topic_permissions": topic_permissions,
        "parameters": parameters,
    }


def _entries(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(e, Mapping) for e in value):
        raise InvalidArgument(f"definitions: '{key}' must be a list of objects")
    return value


def _str(entry: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str):
        raise InvalidArgument(f"definitions: {where}: '{key}' must be a string")
    return value


def _tag_list(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [t for t in value.split(",") if t.strip()]
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return value
    raise InvalidArgument(f"definitions: {where}: 'tags' must be a list or a string")


def _import_into(store: UserStore, doc: Mapping[str, Any], summary: ImportSummary) -> None:
    for entry in _entries(doc, "vhosts"):
        name = _str(entry, "name", "vhost")
        where = f"vhost '{name}'"
        meta = entry.get("metadata")
        meta = meta if isinstance(meta, Mapping) else entry
        queue_type = meta.get("default_queue_type")
        store.add_vhost(
            name,
            description=_str(meta, "description", where, ""),
            tags=_tag_list(meta.get("tags"), where),
            default_queue_type=None if queue_type in (None, "undefined") else str(queue_type),
        )
        limits = entry.get("limits")
        if isinstance(limits, list) and limits:
            pairs = {str(p[0]): p[1] for p in limits if isinstance(p, list) and len(p) == 2}
            store.set_vhost_limits(name, pairs)
        summary.vhosts += 1
    for entry in _entries(doc, "users"):
        name = _str(entry, "name", "user")
        where = f"user '{name}'"
        limits = entry.get("limits") or {}
        if not isinstance(limits, Mapping):
            raise InvalidArgument(f"definitions: {where}: 'limits' must be an object")
        if "password_hash" in entry:
            algorithm = _str(entry, "hashing_algorithm", where, DEFAULT_ALGORITHM)
            try:
                stored = passwords.decode_hash(_str(entry, "password_hash", where), algorithm)
            except BadPasswordHash as exc:
                raise InvalidArgument(f"definitions: {where}: {exc}") from None
        else:
            algorithm = DEFAULT_ALGORITHM
            password = _str(entry, "password", where, "")
            stored = passwords.hash_password(password) if password else b""
        store.put_user(
            name,
            stored,
            hashing_algorithm=algorithm,
            tags=_tag_list(entry.get("tags"), where),
            limits={k: v for k, v in limits.items() if k in USER_LIMITS},
        )
        summary.users += 1
    for entry in _entries(doc, "permissions"):
        where = "permission"
        store.set_permissions(
            _str(entry, "user", where),
            _str(entry, "vhost", where),
            _str(entry, "configure", where),
            _str(entry, "write", where),
            _str(entry, "read", where),
        )
        summary.permissions += 1
    for entry in _entries(doc, "topic_permissions"):
        where = "topic permission"
        store.set_topic_permissions(
            _str(entry, "user", where),
            _str(entry, "vhost", where),
            _str(entry, "exchange", where),
            _str(entry, "write", where),
            _str(entry, "read", where),
        )
        summary.topic_permissions += 1
    for entry in _entries(doc, "parameters"):
        if entry.get("component") != VHOST_LIMITS_COMPONENT:
            summary.skipped["parameters"] = summary.skipped.get("parameters", 0) + 1
            continue
        value = entry.get("value")
        if not isinstance(value, Mapping):
            raise InvalidArgument("definitions: vhost-limits parameter without a value object")
        store.set_vhost_limits(
            _str(entry, "vhost", "vhost-limits parameter"),
            {k: v for k, v in value.items() if k in VHOST_LIMITS},
        )
        summary.limits += 1
    for key, value in doc.items():
        if key not in _AUTH_KEYS and isinstance(value, list) and value:
            summary.skipped[key] = len(value)


def import_definitions(store: UserStore, doc: object) -> ImportSummary:
    """Add (or replace, entry by entry) what ``doc`` defines; all or nothing: on an error
    the store is unchanged and an ``AdminError`` says what was wrong."""
    if not isinstance(doc, Mapping):
        raise InvalidArgument("definitions must be a JSON object")
    scratch = UserStore(loopback_users=store.loopback_users)
    _import_into(scratch, export_definitions(store), ImportSummary())
    summary = ImportSummary()
    _import_into(scratch, doc, summary)  # an AdminError leaves ``store`` as it was
    replace_contents(store, scratch)
    return summary


def replace_contents(store: UserStore, source: UserStore) -> None:
    """Make ``store`` hold what ``source`` holds (users, vhosts, permissions, limits);
    its settings (loopback users, connection_max) and connection counts stay."""
    store.users = source.users
    for user in store.users.values():
        user.store = store
    store.vhosts = source.vhosts
    store.permissions = source.permissions
    store.topic_permissions = source.topic_permissions
    store.generation += 1


def load_store(store: UserStore, doc: object) -> None:
    """Replace the store's contents by ``doc`` (the boot path: ``auth.persist``)."""
    if not isinstance(doc, Mapping):
        raise InvalidArgument("definitions must be a JSON object")
    scratch = UserStore(loopback_users=store.loopback_users)
    _import_into(scratch, doc, ImportSummary())
    replace_contents(store, scratch)
