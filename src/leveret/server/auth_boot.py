"""The auth registry at boot: ``data_dir/auth.json`` loaded, or on a new data directory
RabbitMQ's first-boot state made and written; then the model's vhosts made the registry's
(``remove_vhost_contents`` finishes a vhost deletion that a crash cut short, and is how
``leveret ctl delete_vhost`` empties one).

Used by ``server/server.py`` (after the store's recovery) and ``server/ctl/admin.py``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from leveret.auth import persist
from leveret.auth.definitions import load_store
from leveret.auth.users import UserStore

if TYPE_CHECKING:
    from pathlib import Path

    from leveret.config import Settings
    from leveret.model.broker import Broker
    from leveret.model.vhost import VirtualHost

log = logging.getLogger("leveret.admin")


class AuthBootError(Exception):
    """The auth registry cannot be loaded; the broker does not start."""


def boot_auth(users: UserStore, broker: Broker, data_dir: Path, settings: Settings) -> None:
    """Load ``auth.json``, or on a new data directory make RabbitMQ's first-boot state
    (the default user, an administrator with full permissions in every ``vhosts`` vhost
    and in every vhost recovered from the store); then make the model's vhosts the
    registry's: a vhost recovered from the store that the registry no longer has was
    deleted before a crash finished removing its contents, which happens now."""
    path = data_dir / persist.AUTH_FILE
    try:
        loaded = persist.load(path, users)
    except persist.AuthFileError as exc:
        raise AuthBootError(str(exc)) from None
    if not loaded:
        # The store may hold vhosts from before auth.json existed: keep them.
        recovered = [name for name, vhost in broker.vhosts.items() if _has_contents(vhost)]
        seeded = UserStore.with_default_user(
            settings.default_user,
            settings.default_pass,
            tuple(dict.fromkeys((*settings.vhosts, *recovered))),
            loopback_users=settings.loopback_users,
        )
        load_store(users, persist.snapshot(seeded))
        try:
            persist.save(path, persist.snapshot(users))
        except OSError as exc:
            raise AuthBootError(f"cannot write {path}: {exc.strerror}") from None
        log.info(
            "new data directory: created user '%s' and vhosts %s",
            settings.default_user,
            ", ".join(sorted(users.vhosts)),
        )
    for name in [v for v in broker.vhosts if v not in users.vhosts]:
        log.warning("vhost '%s' was deleted; removing what was left of it", name)
        remove_vhost_contents(broker, name)
    for name in users.vhosts:
        broker.add_vhost(name)


def _has_contents(vhost: VirtualHost) -> bool:
    return bool(vhost.queues) or any(n and not n.startswith("amq.") for n in vhost.exchanges)


def remove_vhost_contents(broker: Broker, name: str) -> None:
    """Delete every queue (with its messages) and exchange of vhost ``name``, through the
    model's public calls so the store records it, then forget the vhost."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        return
    for queue in list(vhost.queues.values()):
        vhost.remove_queue(queue)
    for exchange in list(vhost.exchanges):
        if exchange and not exchange.startswith("amq."):
            vhost.delete_exchange(exchange)
    del broker.vhosts[name]
