"""What a node knows of the others (``cluster/apply.py``'s ``View``): where to reach a
peer's inter-node port, from its record or from ``cluster_peer_addresses``."""

from __future__ import annotations

import socket

from leveret.cluster.apply import View
from leveret.cluster.node import advertised


def test_a_peer_is_reached_at_its_record_unless_the_settings_say_otherwise() -> None:
    view = View(nodes={"b@x": {"cluster": "10.0.0.2:25672"}, "c@x": {"cluster": "[::1]:25673"}})
    assert view.cluster_address("b@x", {}) == ("10.0.0.2", 25672)
    assert view.cluster_address("c@x", {}) == ("::1", 25673)
    # The fault harness's proxy on the path to b (or a NAT) wins over b's own address.
    assert view.cluster_address("b@x", {"b@x": ("127.0.0.1", 4001)}) == ("127.0.0.1", 4001)


def test_a_peer_that_is_not_running_has_no_address() -> None:
    view = View(nodes={"b@x": {"cluster": "no port"}})
    assert view.cluster_address("b@x", {}) is None
    assert view.cluster_address("d@x", {}) is None


def test_a_node_listening_on_every_interface_advertises_its_host_name() -> None:
    name = socket.getfqdn()
    for wildcard in ("0.0.0.0", "::", ""):
        record = {"cluster": advertised(wildcard, 25672)}
        address = View(nodes={"a@x": record}).cluster_address("a@x", {})
        assert address == (name, 25672), wildcard
    assert advertised("10.0.0.2", 25672) == "10.0.0.2:25672"
    assert View(nodes={"a@x": {"cluster": advertised("::1", 1)}}).cluster_address("a@x", {}) == (
        "::1",
        1,
    )


def test_a_peer_stream_listener_is_its_record_first_with_a_wildcard_taken_from_its_address() -> (
    None
):
    view = View(
        nodes={
            "b@x": {
                "cluster": "10.0.0.2:25672",
                "listeners": ["amqp://0.0.0.0:5672", "rabbitmq-stream://0.0.0.0:5552"],
            },
            "c@x": {"cluster": "10.0.0.3:25672", "listeners": ["rabbitmq-stream://[::1]:5553"]},
            "d@x": {"cluster": "10.0.0.4:25672", "listeners": ["amqp://10.0.0.4:5672"]},
        }
    )
    assert view.stream_address("b@x") == ("10.0.0.2", 5552)
    assert view.stream_address("c@x") == ("::1", 5553)
    assert view.stream_address("d@x") is None
    assert view.stream_address("e@x") is None


def test_a_peer_stream_address_is_its_advertised_one_when_its_record_names_it() -> None:
    # stream_advertised_host/_port: the record's "stream" wins over the listeners; a
    # wildcard host there (only the port advertised) is its inter-node address's host.
    listeners = ["rabbitmq-stream://127.0.0.1:5552"]
    view = View(
        nodes={
            "b@x": {"cluster": "10.0.0.2:25672", "listeners": listeners, "stream": "b.ex:30552"},
            "c@x": {"cluster": "10.0.0.3:25672", "listeners": listeners, "stream": "0.0.0.0:1"},
            "d@x": {"cluster": "10.0.0.4:25672", "listeners": listeners, "stream": "[fd00::4]:2"},
            "e@x": {"cluster": "10.0.0.5:25672", "listeners": listeners, "stream": 5},
        }
    )
    assert view.stream_address("b@x") == ("b.ex", 30552)
    assert view.stream_address("c@x") == ("10.0.0.3", 1)
    assert view.stream_address("d@x") == ("fd00::4", 2)
    assert view.stream_address("e@x") == ("127.0.0.1", 5552)  # not ours: the listener's


def test_a_peer_tls_stream_address_is_its_tls_listener_else_its_plain_one() -> None:
    # For a client that came over TLS: the record's "stream_tls" (stream_advertised_host or
    # _tls_port), else its rabbitmq-stream+tls:// listener; a node with neither (no TLS
    # listener, or an older record) is named by its plain address, as before.
    plain_and_tls = ["rabbitmq-stream://0.0.0.0:5552", "rabbitmq-stream+tls://0.0.0.0:5551"]
    view = View(
        nodes={
            "b@x": {"cluster": "10.0.0.2:25672", "listeners": plain_and_tls},
            "c@x": {
                "cluster": "10.0.0.3:25672",
                "listeners": plain_and_tls,
                "stream": "c.ex:30552",
                "stream_tls": "c.ex:30551",
            },
            "d@x": {"cluster": "10.0.0.4:25672", "listeners": ["rabbitmq-stream://0.0.0.0:5552"]},
        }
    )
    assert view.stream_address("b@x", tls=True) == ("10.0.0.2", 5551)
    assert view.stream_address("b@x") == ("10.0.0.2", 5552)
    assert view.stream_address("c@x", tls=True) == ("c.ex", 30551)
    assert view.stream_address("c@x") == ("c.ex", 30552)
    assert view.stream_address("d@x", tls=True) == ("10.0.0.4", 5552)
    assert view.stream_address("e@x", tls=True) is None
