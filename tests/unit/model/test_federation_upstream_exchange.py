"""``x-federation-upstream``: the fanout a federation link declares upstream, which drops
messages that have made ``x-max-hops`` hops or were already seen downstream."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.errors import PreconditionFailed
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.testing import make_message

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable


def hop(name: str, vhost: str = "/") -> FieldTable:
    return {"uri": "amqp://h", "exchange": "x", "cluster-name": name, "vhost": vhost}


def test_the_upstream_exchange_type_drops_what_must_not_travel() -> None:
    vhost = VirtualHost("/")
    with pytest.raises(PreconditionFailed, match="x-max-hops missing"):
        vhost.declare_exchange("bad", "x-federation-upstream", arguments={})
    vhost.declare_exchange(
        "fx",
        "x-federation-upstream",
        arguments={"x-max-hops": 2, "x-downstream-name": "down", "x-downstream-vhost": "/"},
    )
    vhost.declare_queue("q", owner=None)
    vhost.bind_queue("q", "fx", "", {}, owner=None)
    exchange = vhost.exchanges["fx"]

    def routed(headers: FieldTable | None) -> int:
        message = make_message(b"", "k", "fx", BasicProperties(headers=headers))
        return len(vhost.router.route(exchange, "k", message))

    assert routed(None) == 1
    assert routed({"x-received-from": [hop("a")]}) == 1
    assert routed({"x-received-from": [hop("a"), hop("b")]}) == 0  # two hops made
    assert routed({"x-received-from": [hop("down")]}) == 0  # the downstream saw it
