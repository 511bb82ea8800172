"""``leveret.testing``'s public surface: every name in ``__all__`` is there, and the
protocol clients are the ones their modules define."""

from __future__ import annotations

import leveret.testing as testing
from leveret.testing import amqpfast_client, amqpfast_socket, legacy_client, legacy_socket


def test_every_exported_name_is_there() -> None:
    assert len(set(testing.__all__)) == len(testing.__all__)
    for name in testing.__all__:
        assert getattr(testing, name) is not None


def test_the_protocol_clients_are_exported() -> None:
    assert testing.FastClient is amqpfast_client.FastClient
    assert testing.FastSocket is amqpfast_socket.FastSocket
    assert testing.LegacyClient is legacy_client.LegacyClient
    assert testing.LegacySocket is legacy_socket.LegacySocket
    assert {"FastClient", "FastSocket", "LegacyClient", "LegacySocket"} <= set(testing.__all__)
