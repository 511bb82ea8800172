"""RabbitMQ's AMQP URIs as its Erlang clients read them (``amqp_uri:parse``,
``amqp10_client:parse_uri``), and ``redact`` (``remove_credentials``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.links.uri import UriError, parse_amqp091, parse_amqp10, redact

# Left out of the compiled pass (scripts/test): leveret.links is not compiled.
pytestmark = pytest.mark.pure_only


def test_no_host_is_this_broker_with_the_default_vhost() -> None:
    e = parse_amqp091("amqp://")
    assert e.local
    assert e.vhost == "/"
    assert e.username is None


@pytest.mark.parametrize(
    ("uri", "vhost"),
    [("amqp:///", ""), ("amqp:///v1", "v1"), ("amqp:///%2F", "/"), ("amqp:///a%20b", "a b")],
)
def test_the_path_is_the_percent_decoded_vhost(uri: str, vhost: str) -> None:
    assert parse_amqp091(uri).vhost == vhost


def test_a_network_uri_with_everything() -> None:
    e = parse_amqp091(
        "amqp://us%40er:p%3Ass@broker.example:5673/prod?heartbeat=5&channel_max=9"
        "&frame_max=8192&connection_timeout=2500&auth_mechanism=amqplain"
    )
    assert (e.host, e.port, e.vhost) == ("broker.example", 5673, "prod")
    assert (e.username, e.password) == ("us@er", "p:ss")
    assert (e.heartbeat, e.channel_max, e.frame_max) == (5, 9, 8192)
    assert e.connection_timeout == 2.5
    assert e.mechanisms == ("AMQPLAIN",)
    assert e.tls is None


def test_the_default_vhost_is_the_callers() -> None:
    # Federation reads an upstream URI with the downstream's vhost as the default.
    assert parse_amqp091("amqp://h", default_vhost="shop").vhost == "shop"


def test_amqps_reads_rabbitmqs_tls_keys() -> None:
    e = parse_amqp091(
        "amqps://h?cacertfile=/ca.pem&certfile=/c.pem&keyfile=/k.pem&verify=verify_peer"
        "&fail_if_no_peer_cert=true&server_name_indication=disable&depth=3"
    )
    assert e.port == 5671
    assert e.tls is not None
    assert (e.tls.cacertfile, e.tls.certfile, e.tls.keyfile) == ("/ca.pem", "/c.pem", "/k.pem")
    assert e.tls.verify
    assert e.tls.fail_if_no_peer_cert
    assert e.tls.server_name_indication == ""
    assert e.tls.depth == 3


def test_ipv6_hosts() -> None:
    e = parse_amqp091("amqp://[::1]:5700/v")
    assert (e.host, e.port, e.vhost) == ("::1", 5700, "v")


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("http://h", "unexpected URI scheme"),
        ("nonsense", "no scheme"),
        ("amqp://:5672", "a port requires a host"),
        ("amqp://h/a/b", "invalid vhost"),
        ("amqp://h:x", "invalid port"),
        ("amqp://h:70000", "out of range"),
        ("amqp://h?heartbeat=soon", "not an integer"),
        ("amqps://h?verify=maybe", "verify"),
        ("amqp://h?auth_mechanism=gssapi", "auth_mechanism"),
    ],
)
def test_what_rabbitmq_refuses_is_refused(uri: str, why: str) -> None:
    with pytest.raises(UriError, match=why):
        parse_amqp091(uri)


def test_amqp10_uris() -> None:
    e = parse_amqp10("amqp://u:p@h:5673?sasl=plain&hostname=vhost:v&idle_time_out=5000")
    assert (e.host, e.port, e.sasl, e.hostname, e.idle_time_out) == (
        "h",
        5673,
        "PLAIN",
        "vhost:v",
        5000,
    )
    assert parse_amqp10("amqp://h?sasl=anon").sasl == "ANONYMOUS"
    assert parse_amqp10("amqp://h").sasl == ""  # no credentials: no SASL layer
    assert parse_amqp10("amqp://").sasl == "EXTERNAL"  # this broker
    with pytest.raises(UriError, match="path_segment_not_supported"):
        parse_amqp10("amqp://h/vhost")
    with pytest.raises(UriError, match="plain_sasl_missing_userinfo"):
        parse_amqp10("amqp://h?sasl=plain")


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("amqp://", "amqp://"),
        ("amqp://guest:guest@localhost:5672/%2F?heartbeat=5", "amqp://localhost:5672/%2F"),
        ("amqps://u:p@h/v", "amqps://h/v"),
        ("amqp://u@h", "amqp://h"),
    ],
)
def test_redact_is_rabbitmqs_remove_credentials(uri: str, shown: str) -> None:
    assert redact(uri) == shown


@given(
    user=st.text(alphabet="UVWXYZ", min_size=1, max_size=8),
    password=st.text(alphabet="KLMNOPQRST", min_size=1, max_size=8),
    host=st.sampled_from(["h", "broker.example", "[::1]"]),
    query=st.sampled_from(["", "?heartbeat=5", "?cacertfile=/x&password=KLM"]),
)
def test_redacted_uris_never_show_credentials(
    user: str, password: str, host: str, query: str
) -> None:
    shown = redact(f"amqps://{user}:{password}@{host}:5671/v{query}")
    assert password not in shown
    assert f"{user}:" not in shown
    assert "@" not in shown


@given(st.text(max_size=40))
def test_any_text_parses_or_is_refused_with_uri_error(text: str) -> None:
    for parse in (parse_amqp091, parse_amqp10):
        try:
            parse(text)
        except UriError:
            pass
    redact(text)
