"""What the consume methods of the older classes share (``file.consume``, ``stream.consume``,
0-9's ``message.consume``): the queue resolved and checked as ``basic.consume`` does it, the
consumer tag (RabbitMQ's shape, never one in use on the channel), and a consumer started
with its class's deliverer in place and no delivery before the method's answer; and each
class's per-channel state (``LegacyChannel.extras``). Imported by ``filexfer.py``,
``ratestream.py`` and ``references.py``.
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING, TypeVar

from leveret.errors import NotAllowed

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from leveret.model.consumer import Consumer
    from leveret.server.legacy.channel import LegacyChannel

__all__ = ["channel_extra", "consume_queue", "new_consumer_tag", "start_consumer", "unused_tag"]

T = TypeVar("T")


def channel_extra(channel: LegacyChannel, name: str, kind: type[T], make: Callable[[], T]) -> T:
    """The channel's state for one class, made on first use (closed with the channel)."""
    extra = channel.extras.get(name)
    if extra is None:
        extra = channel.extras[name] = make()
    assert isinstance(extra, kind)
    return extra


def new_consumer_tag() -> str:
    return "amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def consume_queue(channel: LegacyChannel, queue: str) -> str:
    """The name of the queue to consume from (the channel's last queue for an empty name),
    once the user may read it and it exists for this connection."""
    session = channel.session
    queue_name = session.queue_name(queue)
    channel.guard.consume(queue_name)
    return session.vhost.queue(queue_name, session.owner).name


def unused_tag(channel: LegacyChannel, tag: str) -> str:
    """``tag``, or a new one if empty; 530 if the channel already uses it."""
    session = channel.session
    tag = tag or new_consumer_tag()
    if tag in session.consumers or tag == session.reply_consumer:
        raise NotAllowed(f"attempt to reuse consumer tag '{tag}'")
    return tag


def start_consumer(
    channel: LegacyChannel,
    queue_name: str,
    tag: str,
    deliverer: object,
    *,
    no_ack: bool,
    exclusive: bool,
    arguments: Mapping[str, object],
) -> Consumer:
    """Start a consumer whose deliveries go to ``deliverer``; nothing is delivered until
    the caller has answered and dispatches the queue."""
    session = channel.session
    channel.deliverers[tag] = deliverer
    flow = session.flow_active
    session.flow_active = False
    try:
        session.consume(queue_name, tag, no_ack=no_ack, exclusive=exclusive, arguments=arguments)
    except BaseException:
        channel.deliverers.pop(tag, None)
        raise
    finally:
        session.flow_active = flow
    return session.consumers[tag]
