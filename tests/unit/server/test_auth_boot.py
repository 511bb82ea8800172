"""The registry's boot (first-boot defaults, a vhost whose deletion a crash cut short) and
the removal of a vhost's contents through the model, with the journal watching."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from leveret.auth import authn, persist
from leveret.auth.users import UserStore
from leveret.config import Settings
from leveret.model.broker import Broker
from leveret.server.auth_boot import AuthBootError, boot_auth, remove_vhost_contents

if TYPE_CHECKING:
    from pathlib import Path


def test_first_boot_makes_rabbitmqs_defaults(tmp_path: Path) -> None:
    broker = Broker()
    broker.add_vhost("old").declare_queue("kept", owner=None, durable=True)  # recovered
    users = UserStore(loopback_users=("guest",))
    settings = Settings(default_user="admin", default_pass="pw", vhosts=("/", "dev"))
    boot_auth(users, broker, tmp_path, settings)
    assert sorted(users.vhosts) == ["/", "dev", "old"]
    assert users.users["admin"].tags == ("administrator",)
    assert sorted(users.users["admin"].vhosts) == ["/", "dev", "old"]
    assert sorted(broker.vhosts) == ["/", "dev", "old"]
    assert authn.authenticate(users, "admin", "pw", loopback=False) is not None
    saved = json.loads((tmp_path / persist.AUTH_FILE).read_text())
    assert {u["name"] for u in saved["users"]} == {"admin"}
    # A later boot uses the file, whatever the settings say.
    again = UserStore()
    boot_auth(again, Broker(), tmp_path, Settings(default_user="other"))
    assert set(again.users) == {"admin"}


def test_a_vhost_deleted_before_a_crash_is_emptied(tmp_path: Path) -> None:
    users = UserStore.with_default_user()
    persist.save(tmp_path / persist.AUTH_FILE, persist.snapshot(users))
    broker = Broker()
    gone = broker.add_vhost("gone")
    gone.declare_queue("q", owner=None, durable=True)
    gone.declare_exchange("x", "fanout", durable=True)
    boot_auth(users, broker, tmp_path, Settings())
    assert sorted(broker.vhosts) == ["/"]


def test_without_slash_the_default_vhost_goes(tmp_path: Path) -> None:
    broker = Broker()
    boot_auth(UserStore(), broker, tmp_path, Settings(vhosts=("dev",)))
    assert sorted(broker.vhosts) == ["dev"]


def test_a_damaged_auth_file_stops_the_boot(tmp_path: Path) -> None:
    (tmp_path / persist.AUTH_FILE).write_text("{")
    with pytest.raises(AuthBootError, match="not valid JSON"):
        boot_auth(UserStore(), Broker(), tmp_path, Settings())


class _Journal:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def __getattr__(self, name: str) -> object:
        def record(*args: object) -> int:
            self.calls.append((name, *map(str, args[:2])))
            return len(self.calls)

        return record


def test_remove_vhost_contents_journals_every_deletion() -> None:
    broker = Broker()
    journal = _Journal()
    broker.attach_journal(journal)  # type: ignore[arg-type]
    vhost = broker.add_vhost("v")
    vhost.declare_queue("q", owner=None, durable=True)
    vhost.declare_exchange("x", "fanout", durable=True)
    vhost.bind_queue("q", "x", "", {}, owner=None)
    remove_vhost_contents(broker, "v")
    assert "v" not in broker.vhosts
    names = [c[0] for c in journal.calls]
    assert "queue_deleted" in names
    assert "exchange_deleted" in names
    remove_vhost_contents(broker, "v")  # already gone: nothing to do
