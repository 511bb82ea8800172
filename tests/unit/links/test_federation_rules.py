"""Federation's rules without sockets: upstream parameters and sets as policies resolve
them, loop and hop cutting (``x-received-from``), the queue link's headers, the upstream
queue's name (the ``x-federation-upstream`` exchange type: tests/unit/model)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.links.federation_config import (
    upstreams_for,
    validate_upstream,
    validate_upstream_set,
)
from leveret.links.federation_exchange import upstream_queue_name
from leveret.links.federation_queue import update_headers
from leveret.links.messages import prepend_table_header
from leveret.links.validation import ValidationError
from leveret.model.exchanges.federation_upstream import should_forward
from leveret.model.policies import PolicyError, make_policy

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable

# Left out of the compiled pass (scripts/test): leveret.links is not compiled.
pytestmark = pytest.mark.pure_only

PARAMS = {
    ("/", "federation-upstream", "a"): {"uri": "amqp://a", "max-hops": 2},
    ("/", "federation-upstream", "b"): {"uri": ["amqp://b1", "amqp://b2"], "queue": "bq"},
    ("/", "federation-upstream", "other"): {"uri": "amqp://o"},
    ("v", "federation-upstream", "a"): {"uri": "amqp://elsewhere"},
    ("/", "federation-upstream-set", "ab"): [{"upstream": "a", "max-hops": 3}, {"upstream": "b"}],
}


def test_one_upstream_with_its_defaults() -> None:
    [u] = upstreams_for({"federation-upstream": "a"}, "/", "x", PARAMS)
    assert (u.name, u.uris, u.exchange, u.queue) == ("a", ("amqp://a",), "x", "x")
    assert (u.max_hops, u.prefetch, u.reconnect_delay, u.ack_mode) == (2, 1000, 5, "on-confirm")
    assert u.consumer_tag == "federation-link-a"
    assert u.resource_cleanup_mode == "default"


def test_a_set_overrides_its_upstreams_keys() -> None:
    a, b = upstreams_for({"federation-upstream-set": "ab"}, "/", "x", PARAMS)
    assert (a.name, a.max_hops) == ("a", 3)
    assert (b.name, b.uris, b.queue) == ("b", ("amqp://b1", "amqp://b2"), "bq")


def test_all_and_patterns_and_missing_names() -> None:
    names = [u.name for u in upstreams_for({"federation-upstream-set": "all"}, "/", "x", PARAMS)]
    assert names == ["a", "b", "other"]
    names = [
        u.name for u in upstreams_for({"federation-upstream-pattern": "^[ab]$"}, "/", "x", PARAMS)
    ]
    assert names == ["a", "b"]
    assert upstreams_for({"federation-upstream": "nope"}, "/", "x", PARAMS) == []
    assert upstreams_for({"federation-upstream-set": "nope"}, "/", "x", PARAMS) == []
    assert upstreams_for({"max-length": 1}, "/", "x", PARAMS) == []
    [elsewhere] = upstreams_for({"federation-upstream": "a"}, "v", "x", PARAMS)
    assert elsewhere.uris == ("amqp://elsewhere",)


def test_upstream_validation() -> None:
    validate_upstream({"uri": "amqp://h", "max-hops": 2, "ack-mode": "on-publish"})
    with pytest.raises(ValidationError) as info:
        validate_upstream({"max-hops": "two"})
    assert info.value.errors == [
        'max-hops should be a number, actually was <<"two">>',
        'Key "uri" not found in federation-upstream',
    ]
    with pytest.raises(ValidationError, match="not a valid URI"):
        validate_upstream({"uri": "http://h"})
    validate_upstream_set([{"upstream": "a"}, {"upstream": "b", "max-hops": 2}])
    with pytest.raises(ValidationError, match='Key "upstream" not found'):
        validate_upstream_set([{"max-hops": 2}])


def test_policies_take_one_federation_key() -> None:
    with pytest.raises(PolicyError, match="together"):
        make_policy("/", "p", ".*", {"federation-upstream": "a", "federation-upstream-set": "s"})
    with pytest.raises(PolicyError, match="regular expression"):
        make_policy("/", "p", ".*", {"federation-upstream-pattern": "("})


def hop(name: str, vhost: str = "/") -> FieldTable:
    return {"uri": "amqp://h", "exchange": "x", "cluster-name": name, "vhost": vhost}


def test_should_forward_counts_hops_and_cuts_loops() -> None:
    assert should_forward(None, 1, "down", "/")
    assert should_forward({"x-received-from": "junk"}, 1, "down", "/")
    headers = prepend_table_header(None, "x-received-from", hop("up"))
    assert not should_forward(headers, 1, "down", "/")  # max-hops reached
    assert should_forward(headers, 2, "down", "/")
    assert not should_forward(headers, 5, "up", "/")  # already seen: a loop
    assert should_forward(headers, 5, "up", "other-vhost")


def test_prepend_table_header_keeps_what_was_there() -> None:
    headers = prepend_table_header({"x-received-from": [hop("b")]}, "x-received-from", hop("a"))
    hops = headers["x-received-from"]
    assert isinstance(hops, list)
    assert [h["cluster-name"] for h in hops if isinstance(h, dict)] == ["a", "b"]
    replaced = prepend_table_header({"x-received-from": "str"}, "x-received-from", hop("a"))
    assert replaced["x-invalid-x-received-from"] == "str"


def test_the_queue_links_headers() -> None:
    table: FieldTable = {"uri": "amqp://u", "queue": "q"}
    first = update_headers({"CC": ["k"]}, table, False, "ex", "rk")
    assert first["x-original-exchange"] == "ex"
    assert first["x-original-routing-key"] == "rk"
    assert first["x-original-cc"] == ["k"]
    assert first["x-received-from"] == [{**table, "redelivered": False, "visit-count": 1}]
    again = update_headers(first, table, True, "", "q")
    assert again["x-original-exchange"] == "ex"  # kept from the first hop
    assert again["x-received-from"] == [{**table, "redelivered": True, "visit-count": 2}]


def test_upstream_queue_names() -> None:
    assert upstream_queue_name("x", "/", "c", "x", "/") == "federation: x -> c"
    assert upstream_queue_name("x", "/", "c", "y", "/") == "federation: x -> c:y"
    assert upstream_queue_name("x", "up", "c", "y", "down") == "federation: x -> c:down:y"
