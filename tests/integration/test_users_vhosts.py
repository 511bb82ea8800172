"""The default user and the virtual hosts a broker boots with, through a real client."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from tests.integration.conftest import start_broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only]


def _url(port: int, user: str, password: str, vhost: str) -> str:
    return f"amqp://{user}:{password}@127.0.0.1:{port}/{vhost}"


def _connect(port: int, vhost: str, user: str = "admin", password: str = "s3cret") -> object:
    return pika.BlockingConnection(pika.URLParameters(_url(port, user, password, vhost)))


def test_configured_user_and_vhosts() -> None:
    broker = start_broker(
        "--default-user", "admin", "--default-pass", "s3cret", "--vhosts", "/,dev"
    )
    try:
        for vhost in ("%2F", "dev"):
            conn = pika.BlockingConnection(
                pika.URLParameters(_url(broker.port, "admin", "s3cret", vhost))
            )
            ch = conn.channel()
            q = ch.queue_declare("", exclusive=True).method.queue
            ch.basic_publish("", q, vhost.encode())
            assert ch.basic_get(q, auto_ack=True)[2] == vhost.encode()
            conn.close()
        # The vhosts are separate namespaces.
        root = pika.BlockingConnection(
            pika.URLParameters(_url(broker.port, "admin", "s3cret", "%2F"))
        )
        dev = pika.BlockingConnection(
            pika.URLParameters(_url(broker.port, "admin", "s3cret", "dev"))
        )
        root.channel().queue_declare("only-in-root")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            dev.channel().queue_declare("only-in-root", passive=True)
        assert info.value.reply_code == 404
        root.close()
        dev.close()
        # guest no longer exists, and an unknown vhost is refused.
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            _connect(broker.port, "%2F", "guest", "guest")
        with pytest.raises(
            (pika.exceptions.ProbableAccessDeniedError, pika.exceptions.ConnectionClosedByBroker)
        ):
            _connect(broker.port, "x")
    finally:
        broker.stop()
