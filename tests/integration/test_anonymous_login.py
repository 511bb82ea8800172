"""Logging in without credentials, as RabbitMQ 4 does: SASL ANONYMOUS is offered by default
and logs in as ``anonymous_login_user`` (guest), loopback rule included;
``anonymous_login_user = none`` turns it off. Through real clients: Qpid Proton (AMQP 1.0,
which picks ANONYMOUS when the URL has no user name, as its examples do) and py-amqp
(0-9-1). Every front end takes its mechanisms from ``auth/authn.py``
(``tests/unit/auth/test_authn.py`` has the loopback case, which needs a remote address)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import amqp
import pytest
from amqp.sasl import SASL
from proton import ConnectionException, Message
from proton.utils import BlockingConnection

from tests.integration.conftest import start_broker

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(60)]


class _Anonymous(SASL):  # type: ignore[misc]
    """py-amqp has no ANONYMOUS class; its SASL base takes any mechanism."""

    mechanism = b"ANONYMOUS"

    def start(self, connection: Any) -> bytes:
        return b"trace"


def test_proton_without_credentials_logs_in_as_guest(broker: Broker, name: str) -> None:
    c = BlockingConnection(f"amqp://{broker.host}:{broker.port}", timeout=10)
    try:
        # user-id must name the connection's user (or the message is rejected): guest.
        c.create_sender(f"/queue/{name}").send(Message(body="hi", user_id=b"guest"))
        receiver = c.create_receiver(f"/queue/{name}", credit=1)
        got: Any = receiver.receive(timeout=5)
        receiver.accept()
    finally:
        c.close()
    assert (got.body, bytes(got.user_id)) == ("hi", b"guest")


def test_py_amqp_anonymous_logs_in_as_guest(broker: Broker, name: str) -> None:
    with amqp.Connection(f"{broker.host}:{broker.port}", authentication=(_Anonymous(),)) as conn:
        channel = conn.channel()
        channel.queue_declare(name, auto_delete=True)
        channel.basic_publish(amqp.Message("hi", user_id="guest"), routing_key=name)
        got = channel.basic_get(name, no_ack=True)  # after the publish: same channel
        assert got is not None
        assert (got.body, got.properties["user_id"]) == ("hi", "guest")


def test_anonymous_login_user_none_turns_it_off() -> None:
    b = start_broker(env={"LEVERET_ANONYMOUS_LOGIN_USER": "none"})
    try:
        # Offered PLAIN and AMQPLAIN only, Proton has nothing to log in with.
        with pytest.raises(ConnectionException, match="unauthorized-access"):
            BlockingConnection(f"amqp://{b.host}:{b.port}", timeout=10)
    finally:
        b.stop()
