"""Access control through aio-pika (aiormq) and kombu (py-amqp), whose APIs surface
refusals their own way: a refused login, a vhost without access, refused declarations,
publishes (aio-pika with publisher confirms, kombu's declare-on-publish), gets and
consumes. Runs against RabbitMQ too, as ``test_permission_matrix.py`` (the texts are
RabbitMQ 3.10.8's).

Set-up, in vhost ``authz-cl``: user ``authz-cl`` may configure and read ``^ok-`` and write
to those and the default exchange; guest makes ``no-q`` and ``no-x``.
"""

# kombu ships py.typed but leaves most of its API unannotated.
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aio_pika
import aiormq
import amqp
import pytest
from kombu.connection import Connection
from kombu.entity import Queue
from kombu.messaging import Producer

from tests.integration.access_support import Definitions, Target, target
from tests.integration.ctl_support import login

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

__all__ = ["target"]

pytestmark = [pytest.mark.interop]

V = USER = "authz-cl"
PASSWORD = "pw-cl"
WRITE = "^(ok-.*|amq\\.default)$"  # kombu and aio-pika publish through the default exchange


def refused(what: str) -> str:
    return f"ACCESS_REFUSED - access to {what} in vhost '{V}' refused for user '{USER}'"


@pytest.fixture(scope="module")
def clients(target: Target) -> Target:
    target.apply(
        Definitions(
            vhosts=[V],
            users={USER: (PASSWORD, ())},
            permissions=[("guest", V, ".*", ".*", ".*"), (USER, V, "^ok-", WRITE, "^ok-")],
        )
    )
    conn = login(target.broker, "guest", "guest", V)
    ch = conn.channel()
    ch.queue_declare("no-q")
    ch.exchange_declare("no-x", "direct")
    conn.close()
    return target


def _url(target: Target, user: str = USER, password: str = PASSWORD, vhost: str = V) -> str:
    broker = target.broker
    return f"amqp://{user}:{password}@{broker.host}:{broker.port}/{quote(vhost, safe='')}"


def _run(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(20):
            await factory()

    asyncio.run(guarded(), debug=True)


# -- aio-pika --------------------------------------------------------------------------------


def test_aio_pika_refusals(clients: Target) -> None:
    async def main() -> None:
        connection = await aio_pika.connect(_url(clients), timeout=10)
        async with connection:
            channel = await connection.channel()  # publisher confirms on by default
            await channel.declare_queue("ok-aio", auto_delete=True)
            await channel.default_exchange.publish(aio_pika.Message(b"x"), routing_key="ok-aio")
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
                await channel.declare_queue("no-aio")
            assert str(info.value) == refused("queue 'no-aio'")

            channel = await connection.channel()
            exchange = await channel.get_exchange("no-x")  # passive: no permission needed
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
                await exchange.publish(aio_pika.Message(b"x"), routing_key="k")
            assert str(info.value) == refused("exchange 'no-x'")

            channel = await connection.channel()
            no_q = await channel.get_queue("no-q")
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
                await no_q.get(fail=False)
            assert str(info.value) == refused("queue 'no-q'")

            channel = await connection.channel()
            no_q = await channel.get_queue("no-q")
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
                await no_q.consume(lambda message: asyncio.sleep(0))

    _run(main)


# pure_only: auth/'s refusal, 3 s each (docs/architecture.md, "How it is tested")
@pytest.mark.pure_only
def test_aio_pika_refused_logins(clients: Target) -> None:
    async def main() -> None:
        with pytest.raises(aiormq.exceptions.ProbableAuthenticationError):
            await aio_pika.connect(_url(clients, password="wrong"), timeout=10)
        # aiormq does not expect connection.close in answer to connection.open: it reports
        # an unexpected frame rather than the 530 (with RabbitMQ as well).
        with pytest.raises(aiormq.exceptions.InvalidFrameError, match=r"Connection\.Close"):
            await aio_pika.connect(_url(clients, vhost="/"), timeout=10)

    _run(main)


# -- kombu ---------------------------------------------------------------------------------


def _kombu(target: Target, **kwargs: Any) -> Connection:
    return Connection(_url(target, **kwargs), transport="pyamqp", connect_timeout=10)


def test_kombu_refusals(clients: Target) -> None:
    with _kombu(clients) as conn:
        producer = Producer(conn.channel())
        producer.publish(b"x", routing_key="ok-kombu", declare=[Queue("ok-kombu")])
        with pytest.raises(amqp.exceptions.AccessRefused) as info:
            producer.publish(b"x", routing_key="no-kombu", declare=[Queue("no-kombu")])
        assert info.value.reply_text == refused("queue 'no-kombu'")

        queue = conn.SimpleQueue(Queue("no-q", no_declare=True))
        with pytest.raises(amqp.exceptions.AccessRefused) as info:
            queue.get(block=False)
        assert info.value.reply_text == refused("queue 'no-q'")


# pure_only: auth/'s refusal, 3 s each (docs/architecture.md, "How it is tested")
@pytest.mark.pure_only
def test_kombu_refused_login(clients: Target) -> None:
    conn = _kombu(clients, password="wrong")
    with pytest.raises(amqp.exceptions.AccessRefused) as info:
        conn.connect()
    assert "Login was refused using authentication mechanism PLAIN" in str(info.value)
    conn.release()
