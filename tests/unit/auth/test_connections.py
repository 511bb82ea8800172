"""connection.open and channel.open checks: vhost access and the limits, with RabbitMQ
3.10.8's reply codes and texts (recorded with pika against the RabbitMQ next to the
project: vhost ``lvprobe`` limited to 2 connections, user ``lvprobe2`` to 1 connection and
2 channels)."""

from __future__ import annotations

import logging

import pytest

from leveret.auth.access import Access
from leveret.auth.limits import InvalidLimits, parse_limits
from leveret.auth.users import InvalidArgument, UserStore
from leveret.errors import NotAllowed

# Left out of the compiled pass (scripts/test): auth/ is not compiled.
pytestmark = pytest.mark.pure_only


def _store() -> UserStore:
    store = UserStore()
    store.add_vhost("/")
    store.add_vhost("lvprobe")
    for user in ("lvprobe", "lvprobe2"):
        store.add_user(user, "pw")
        store.set_permissions(user, "lvprobe", ".*", ".*", ".*")
    return store


def _open(store: UserStore, user: str, vhost: str = "lvprobe") -> Access:
    return Access.open(store, store.users[user], vhost, peer="127.0.0.1:1")


def _refusal(store: UserStore, user: str, vhost: str = "lvprobe") -> NotAllowed:
    with pytest.raises(NotAllowed) as info:
        _open(store, user, vhost)
    assert info.value.reply_code == 530
    assert info.value.hard
    return info.value


def test_vhost_without_permissions(caplog: pytest.LogCaptureFixture) -> None:
    # pika: amqp://lvprobe:...@.../%2F -> (530) NOT_ALLOWED - access to vhost '/' refused ...
    with caplog.at_level(logging.WARNING, "leveret.auth"):
        error = _refusal(_store(), "lvprobe", "/")
    assert error.reply_text == "access to vhost '/' refused for user 'lvprobe'"
    assert "no access to vhost '/'" in caplog.text


def test_unknown_vhost() -> None:
    # pika: .../nosuch -> (530) NOT_ALLOWED - vhost nosuch not found
    assert _refusal(_store(), "lvprobe", "nosuch").reply_text == "vhost nosuch not found"


def test_vhost_connection_limit() -> None:
    store = _store()
    store.set_vhost_limits("lvprobe", '{"max-connections": 2, "max-queues": 1}')
    first, _second = _open(store, "lvprobe"), _open(store, "lvprobe")
    # the third: (530) NOT_ALLOWED - access to vhost 'lvprobe' refused for user 'lvprobe':
    # connection limit (2) is reached
    assert _refusal(store, "lvprobe").reply_text == (
        "access to vhost 'lvprobe' refused for user 'lvprobe': connection limit (2) is reached"
    )
    first.close()
    first.close()  # idempotent
    _open(store, "lvprobe")


def test_zero_connections_allowed() -> None:
    store = _store()
    store.set_vhost_limits("lvprobe", {"max-connections": 0})
    assert "connection limit (0)" in _refusal(store, "lvprobe").reply_text


def test_user_connection_limit() -> None:
    store = _store()
    store.set_user_limits("lvprobe2", '{"max-connections": 1, "max-channels": 2}')
    access = _open(store, "lvprobe2")
    # (530) NOT_ALLOWED - connection refused for user 'lvprobe2': user connection limit (1)
    # is reached
    assert _refusal(store, "lvprobe2").reply_text == (
        "connection refused for user 'lvprobe2': user connection limit (1) is reached"
    )
    _open(store, "lvprobe")  # other users are not limited by it
    access.close()
    _open(store, "lvprobe2")


def test_user_channel_limit_counts_every_connection_of_the_user() -> None:
    store = _store()
    store.set_user_limits("lvprobe2", '{"max-connections": 5, "max-channels": 2}')
    one, two = _open(store, "lvprobe2"), _open(store, "lvprobe2")
    one.open_channel()
    two.open_channel()
    # (530) NOT_ALLOWED - number of channels opened for user 'lvprobe2' has reached the
    # maximum allowed user limit of (2)
    with pytest.raises(NotAllowed) as info:
        one.open_channel()
    assert info.value.reply_text == (
        "number of channels opened for user 'lvprobe2' has reached the maximum allowed user "
        "limit of (2)"
    )
    two.close()  # its channel goes with it
    one.open_channel()
    assert store.tracker.channels_by_user["lvprobe2"] == 2


def test_node_connection_limit() -> None:
    store = _store()
    store.connection_max = 2
    _open(store, "lvprobe")
    _open(store, "lvprobe2")
    assert _refusal(store, "lvprobe").reply_text == (
        "connection refused: node connection limit (2) is reached"
    )


def test_counts_return_to_zero() -> None:
    store = _store()
    accesses = [_open(store, u) for u in ("lvprobe", "lvprobe2", "lvprobe")]
    for access in accesses:
        access.open_channel()
        access.close()
    tracker = store.tracker
    assert (tracker.total, tracker.by_vhost, tracker.by_user, tracker.channels_by_user) == (
        0,
        {},
        {},
        {},
    )


def test_limits_documents() -> None:
    assert parse_limits('{"max-queues": 3}', ("max-queues",)) == {"max-queues": 3}
    for bad, message in [
        ("notjson", "not valid JSON"),
        ("[1]", "JSON object"),
        ('{"max-foo": 1}', "unrecognised limits max-foo"),
        ('{"max-queues": "1"}', "must be an integer"),
        ('{"max-queues": true}', "must be an integer"),
    ]:
        with pytest.raises(InvalidLimits, match=message):
            parse_limits(bad, ("max-queues",))


def test_negative_limit_means_none() -> None:
    store = _store()
    store.set_vhost_limits("lvprobe", '{"max-connections": -1, "max-queues": 4}')
    assert store.vhosts["lvprobe"].limits == {"max-queues": 4}
    store.set_user_limits("lvprobe", '{"max-connections": 1, "max-channels": 9}')
    store.set_user_limits("lvprobe", '{"max-connections": -1}')
    assert store.users["lvprobe"].limits == {"max-channels": 9}
    store.clear_user_limits("lvprobe", "max-channels")
    assert store.users["lvprobe"].limits == {}
    with pytest.raises(InvalidArgument, match="unknown user limit"):
        store.clear_user_limits("lvprobe", "max-queues")
