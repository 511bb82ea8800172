"""RabbitMQ's definitions in and out of the store, and the auth file on disk.

tests/data/rabbitmq-3.10.8-definitions.json is ``rabbitmqctl export_definitions`` of the
RabbitMQ 3.10.8 next to the project, cut to the objects made for this test: users with
SHA-256 (``add_user``), SHA-512 and MD5 hashes (imported into RabbitMQ from hashes its
``rabbit_password:hash/2`` made, then logged in with pika to prove them), a user without a
password, tags, a vhost with metadata and limits, permissions, topic permissions and user
limits."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from leveret.auth import authn, persist
from leveret.auth.definitions import export_definitions, import_definitions
from leveret.auth.persist import AuthFileError
from leveret.auth.users import InvalidArgument, NoSuchUser, UserStore

# Left out of the compiled pass (scripts/test): auth/ is not compiled.
pytestmark = pytest.mark.pure_only

DATA = Path(__file__).resolve().parents[2] / "data" / "rabbitmq-3.10.8-definitions.json"
PASSWORDS = {
    "lv_exp_sha256": "secret-256",
    "lv_exp_sha512": "secret-512",
    "lv_exp_md5": "secret-md5",
}


def _imported() -> UserStore:
    store = UserStore.with_default_user()
    summary = import_definitions(store, json.loads(DATA.read_text()))
    assert (summary.users, summary.vhosts, summary.permissions) == (4, 1, 4)
    assert (summary.topic_permissions, summary.limits, summary.skipped) == (1, 1, {})
    return store


def test_rabbitmq_users_log_in_unchanged() -> None:
    store = _imported()
    for name, password in PASSWORDS.items():
        assert authn.authenticate(store, name, password, loopback=False) is store.users[name]
        assert authn.authenticate(store, name, password + "x", loopback=False) is None
    assert authn.authenticate(store, "lv_exp_nopw", "", loopback=False) is None
    assert not store.users["lv_exp_nopw"].has_password


def test_everything_else_is_imported() -> None:
    store = _imported()
    assert store.users["lv_exp_sha256"].tags == ("management", "policymaker")
    assert store.users["lv_exp_nopw"].tags == ("impersonator",)
    assert store.users["lv_exp_sha512"].limits == {"max-channels": 5, "max-connections": 3}
    vhost = store.vhosts["lv_exp"]
    assert (vhost.description, vhost.tags, vhost.default_queue_type) == (
        "exported vhost",
        ("qa", "blue"),
        "quorum",
    )
    assert vhost.limits == {"max-connections": 10, "max-queues": 20}
    assert store.permissions[("lv_exp_sha256", "lv_exp")].write == r"^(amq\.topic|app\..*)"
    topic = store.topic_permission("lv_exp_sha256", "lv_exp", "amq.topic")
    assert topic is not None
    assert (topic.write, topic.read) == (r"^{username}\.", r"^{vhost}\.")
    # What was there before stays.
    assert "guest" in store.users
    assert "/" in store.vhosts


def test_export_reads_back_the_same() -> None:
    store = _imported()
    exported = export_definitions(store)
    again = UserStore()
    import_definitions(again, json.loads(json.dumps(exported)))
    assert export_definitions(again) == exported
    # The RabbitMQ users' entries come out as RabbitMQ wrote them.
    original = {u["name"]: u for u in json.loads(DATA.read_text())["users"]}
    for user in exported["users"]:
        if user["name"] in original:
            assert user == original[user["name"]]


def test_a_bad_import_changes_nothing() -> None:
    store = _imported()
    before = export_definitions(store)
    bad = {
        "users": [{"name": "new", "password_hash": "", "tags": []}],
        "permissions": [
            {"user": "ghost", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
        ],
    }
    with pytest.raises(NoSuchUser):
        import_definitions(store, bad)
    assert export_definitions(store) == before
    for doc, message in [
        ([], "JSON object"),
        ({"users": "x"}, "'users' must be a list"),
        ({"users": [{"name": 1}]}, "'name' must be a string"),
        ({"users": [{"name": "u", "password_hash": "?"}]}, "not base64"),
        (
            {
                "permissions": [
                    {"user": "guest", "vhost": "/", "configure": "(", "write": "", "read": ""}
                ]
            },
            "regular expression '\\(' is invalid",
        ),
    ]:
        with pytest.raises(InvalidArgument, match=message):
            import_definitions(store, doc)
    assert export_definitions(store) == before


def test_cleartext_password_and_old_formats() -> None:
    store = UserStore()
    import_definitions(
        store,
        {
            "users": [{"name": "u", "password": "pw", "tags": "administrator,management"}],
            "vhosts": [{"name": "old", "description": "top-level", "tags": "a"}],
            "queues": [{"name": "q"}],
            "parameters": [{"component": "federation-upstream", "name": "x", "vhost": "old"}],
        },
    )
    assert authn.authenticate(store, "u", "pw", loopback=True) is not None
    assert store.users["u"].tags == ("administrator", "management")
    assert store.vhosts["old"].description == "top-level"


def test_auth_file_round_trip(tmp_path: Path) -> None:
    store = _imported()
    path = tmp_path / persist.AUTH_FILE
    persist.save(path, persist.snapshot(store))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not (tmp_path / "auth.json.tmp").exists()
    loaded = UserStore()
    assert persist.load(path, loaded)
    assert export_definitions(loaded) == export_definitions(store)
    assert authn.authenticate(loaded, "lv_exp_md5", "secret-md5", loopback=False) is not None


def test_auth_file_missing_or_damaged(tmp_path: Path) -> None:
    path = tmp_path / persist.AUTH_FILE
    assert not persist.load(path, UserStore())
    for content, message in [
        (b"{", "not valid JSON"),
        (b"{}", "not a Leveret auth file"),
        (b'{"format": "leveret-auth 1", "users": 3}', "must be a list"),
    ]:
        path.write_bytes(content)
        with pytest.raises(AuthFileError, match=message):
            persist.load(path, UserStore())
