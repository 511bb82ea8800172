"""Which protocol ``protocol=auto`` picks (``_protocol``), against a real broker, no Spark."""

from __future__ import annotations

import pytest

from leveret.spark._options import Options
from leveret.spark._protocol import resolve_read, resolve_write
from tests.spark import support

pytestmark = pytest.mark.spark


def _options(url: str, **extra: str) -> Options:
    return Options.parse({"uri": url, **extra}, need_queue=False)


def test_auto_reads_streams_over_the_stream_protocol_when_its_port_is_known(
    stream_url: str, stream_port: int, name: str
) -> None:
    support.declare_stream(stream_url, name)
    try:
        known = _options(stream_url, queue=name, streamPort=str(stream_port))
        assert resolve_read(known).protocol == "stream"
        # A classic queue, or a stream the stream port does not serve: 0-9-1.
        support.declare(stream_url, f"{name}.classic")
        both = _options(stream_url, queues=f"{name},{name}.classic", streamPort=str(stream_port))
        assert resolve_read(both).protocol == "amqp"
        with pytest.raises(ValueError, match="not streams"):
            resolve_read(
                _options(
                    stream_url,
                    queue=f"{name}.classic",
                    protocol="stream",
                    streamPort=str(stream_port),
                )
            )
        # The consume mode reads classic queues over 0-9-1 whatever is asked.
        consume = _options(stream_url, queue=name, queueMode="consume", streamPort=str(stream_port))
        assert resolve_read(consume).protocol == "amqp"
    finally:
        support.delete(stream_url, name)
        support.delete(stream_url, f"{name}.classic")


def test_auto_does_not_guess_a_stream_port_beside_a_non_standard_amqp_port(
    stream_url: str, name: str
) -> None:
    if ":5672/" in stream_url:
        pytest.skip("the broker is on the standard port: the stream port is assumed")
    opts = _options(stream_url, queue=name)
    assert resolve_read(opts).protocol == "amqp"


def test_auto_writes_over_the_stream_protocol_only_to_a_stream_by_name(
    stream_url: str, stream_port: int, name: str
) -> None:
    support.declare_stream(stream_url, name)
    port = str(stream_port)
    try:
        to_stream = _options(stream_url, routingKey=name, streamPort=port)
        decided = resolve_write(to_stream, ["value"])
        assert (decided.protocol, decided.stream) == ("stream", name)
        assert resolve_write(to_stream, ["value", "routing_key"]).protocol == "amqp"
        via_exchange = _options(stream_url, routingKey=name, exchange="amq.direct", streamPort=port)
        assert resolve_write(via_exchange, ["value"]).protocol == "amqp"
        named = _options(stream_url, stream=name, exchange="ignored", streamPort=port)
        assert resolve_write(named, ["value"]).stream == name
        with pytest.raises(ValueError, match="stream protocol"):
            resolve_write(_options(stream_url, stream=f"{name}.none", streamPort=port), ["value"])
    finally:
        support.delete(stream_url, name)


def test_a_rabbitmq_stream_uri_means_the_stream_protocol(stream_port: int, name: str) -> None:
    opts = Options.parse(
        {"uri": f"rabbitmq-stream://guest:guest@127.0.0.1:{stream_port}/%2F", "queue": name}
    )
    assert (opts.protocol, opts.stream_params.port, opts.stream_params.vhost) == (
        "stream",
        stream_port,
        "/",
    )
    with pytest.raises(ValueError, match="protocol=amqp"):
        Options.parse({"uri": "rabbitmq-stream://h/", "protocol": "amqp", "queue": name})
