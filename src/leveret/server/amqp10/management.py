"""RabbitMQ 4's HTTP-over-AMQP management node (``/management``), so RabbitMQ's own 1.0
clients declare and delete queues, exchanges and bindings through it.

A client attaches a link pair with the address ``/management`` (one link each way, both
with the same name). Each request is a message whose properties carry ``message-id``,
``to`` (the HTTP target: ``/queues/:queue``, ``/exchanges/:exchange``, ``/bindings``,
``/bindings/src=…;dstq=…;key=…;args=…``, ``/queues/:queue/messages``), ``subject`` (the HTTP
method) and ``reply-to`` ``$me``, with an ``amqp-value`` body (a map for PUT and POST). The
answer goes back on the paired link: ``correlation-id`` = the request's message-id,
``subject`` = the status code (``200``, ``201``, ``204``, ``400``, ``403``, ``404``,
``409``), application property ``http:response`` = ``1.1`` and an ``amqp-value`` body (the
queue, a message count, the bindings, or the error's text), as
``rabbit_amqp_management`` answers.

The 1.0 front end's session imports it.
"""

from __future__ import annotations

import base64
import logging
import zlib
from collections import deque
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from leveret.convert.amqp10 import field_value, value_of_field
from leveret.errors import AMQPError
from leveret.model.completion import Completion
from leveret.model.queues.remote import RemoteQueue
from leveret.protocol.amqp10 import (
    Accepted,
    AMQP10Error,
    AmqpValue,
    Error,
    Properties,
    Rejected,
    UInt,
    ULong,
)
from leveret.protocol.amqp10.message import encode_message
from leveret.protocol.amqp10.types import decode_value

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.queues.base import Queue
    from leveret.protocol.amqp10.events import CreditGranted, MessageReceived
    from leveret.protocol.amqp10.types import Value
    from leveret.server.amqp10.session_core import SessionCore

log = logging.getLogger("leveret.amqp10")

__all__ = ["ManagementNode"]

_STATUS_FOR_CODE = {403: "403", 404: "404", 405: "409", 406: "409"}


class HttpError(Exception):
    def __init__(self, status: str, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


class ManagementNode:
    """One link of a management link pair (``sending``: the broker answers on it)."""

    def __init__(self, session: SessionCore, handle: int, name: str, *, sending: bool) -> None:
        self.session = session
        self.handle = handle
        self.name = name
        self.sending = sending
        self.credit = 0
        self.answers: deque[bytes] = deque()
        self.closed = False

    # -- the sending link ---------------------------------------------------------------

    def credit_granted(self, event: CreditGranted) -> None:
        self.credit = event.credit
        self.flush()
        if event.drain and self.credit > 0:
            self.session.drained(self.handle)
            self.credit = 0

    def flush(self) -> None:
        while self.answers and self.credit > 0 and not self.closed:
            self.credit -= 1
            self.session.send(self.handle, self.answers.popleft(), True)

    # -- the receiving link -------------------------------------------------------------

    def receive(self, event: MessageReceived) -> None:
        session = self.session
        try:
            props, body = _request_sections(event.payload)
        except AMQP10Error as exc:
            log.warning("management request refused: %s (%r)", exc, bytes(event.payload[:200]))
            if not event.settled:
                error = Error(condition=exc.condition, description=exc.description)
                session.settle_incoming(event.delivery_id, event.delivery_id, Rejected(error=error))
            return
        if not event.settled:
            session.settle_incoming(event.delivery_id, event.delivery_id, Accepted())
        if props is None:
            return
        request: Value = body.value if isinstance(body, AmqpValue) else None
        method = props.subject or ""
        target = props.to if isinstance(props.to, str) else ""
        correlation = props.message_id
        try:
            written = self._shared_first(method, target, request)
        except (HttpError, AMQPError) as exc:
            refused: Exception = exc
            self._answer(correlation, method, target, lambda: _raise(refused))
            return
        if written is None:
            self._answer(
                correlation, method, target, lambda: self.handle_request(method, target, request)
            )
            return

        def then() -> tuple[str, Value]:
            value = written.result()  # the write's own error, answered as the request's
            if method == "DELETE" and isinstance(value, int):
                # A queue deleted through etcd: gone from this node's model too, with the
                # count checked before the write.
                return "200", {"message_count": ULong(value)}
            return self.handle_request(method, target, request)

        # A cluster node writes the declaration to etcd first: the connection's further
        # input waits for it (the requests are answered in order).
        session.conn.defer(written, lambda: self._answer(correlation, method, target, then))

    def _answer(
        self,
        correlation: Value,
        method: str,
        target: str,
        request: Callable[[], tuple[str, Value]],
    ) -> None:
        try:
            status, answer = request()
        except HttpError as exc:
            log.warning("management request %s %s failed: %s", method, target, exc.text)
            status, answer = exc.status, exc.text
        except AMQPError as exc:
            status = _STATUS_FOR_CODE.get(exc.reply_code, "400")
            answer = exc.reply_text
            log.warning("management request %s %s failed: %s", method, target, answer)
        payload = encode_message(
            AmqpValue(answer),
            properties=Properties(subject=status, correlation_id=correlation),
            application_properties={"http:response": "1.1"},
        )
        reply = _reply_link(self.session, self.name)
        if reply is not None:
            reply.answers.append(payload)
            reply.flush()

    def _shared_first(self, method: str, target: str, body: Value) -> Completion[Any] | None:
        """On a cluster node, a declaration of a queue or exchange this node does not know,
        or a binding, written to etcd first (``VirtualHost.shared``): what to wait for."""
        vhost = self.session.vhost
        shared = vhost.shared
        if shared is None or method not in ("PUT", "POST", "DELETE"):
            return None
        segments = urlsplit(target).path.split("/")[1:]
        guard = self.session.guard
        if method == "DELETE":
            if len(segments) == 2 and segments[0] == "queues":
                return self._delete_queue_first(unquote(segments[1]))
            return None
        if method == "PUT" and len(segments) == 2 and segments[0] == "queues":
            name = unquote(segments[1])
            if not name or name.startswith("amq.") or vhost.find_queue(name) is not None:
                return None
            props = _map(body, ("durable", "exclusive", "auto_delete", "arguments"), "queue")
            arguments = _arguments(props.get("arguments"))
            guard.queue_declare(name, passive=False, arguments=arguments)
            return shared.declare_queue(
                name,
                generated_name=name,
                owner=self.session.client,
                durable=bool(props.get("durable", True)),
                exclusive=bool(props.get("exclusive", False)),
                auto_delete=bool(props.get("auto_delete", False)),
                arguments=arguments,
            )
        if method == "PUT" and len(segments) == 2 and segments[0] == "exchanges":
            name = unquote(segments[1])
            if not name or name.startswith("amq.") or name in vhost.exchanges:
                return None
            fields = ("type", "durable", "auto_delete", "internal", "arguments")
            props = _map(body, fields, "exchange")
            type_name = str(props.get("type", "direct"))
            arguments = _arguments(props.get("arguments"))
            guard.exchange_declare(name, type_name, passive=False, arguments=arguments)
            return shared.declare_exchange(
                name,
                type_name,
                durable=bool(props.get("durable", True)),
                auto_delete=bool(props.get("auto_delete", False)),
                internal=bool(props.get("internal", False)),
                arguments=arguments,
            )
        if method == "POST" and segments == ["bindings"]:
            props, source, key, arguments = _binding_request(body)
            if not source:
                return None
            if "destination_queue" in props:
                queue = str(props["destination_queue"])
                guard.queue_bind(queue, source, key)
                return shared.bind(
                    source, "queue", queue, key, arguments, owner=self.session.client
                )
            if "destination_exchange" in props:
                destination = str(props["destination_exchange"])
                guard.exchange_bind(destination, source, key)
                return shared.bind(
                    source, "exchange", destination, key, arguments, owner=self.session.client
                )
        return None

    def _delete_queue_first(self, name: str) -> Completion[int | None] | None:
        """A queue's deletion on a cluster node: checked here (a queue led by another node
        with its leader's count), then written to etcd (``SharedMetadata.delete_queue``);
        done with the message count once etcd and this node's model have lost it, or with
        None when etcd has no record of it (the request deletes it from the model)."""
        vhost = self.session.vhost
        shared = vhost.shared
        queue = vhost.find_queue(name)
        if shared is None or queue is None:
            return None
        self.session.guard.queue_delete(name)
        owner = self.session.client
        deleted: Completion[int | None] = Completion()

        def counted(leader_counts: tuple[int, int] | None) -> None:
            try:
                checked = vhost.check_delete(name, owner=owner, leader_counts=leader_counts)
                written = shared.delete_queue(checked[0]) if checked is not None else None
            except AMQPError as exc:
                deleted.fail(exc)
                return
            if written is None or checked is None:
                deleted.resolve(None)
                return
            count = checked[1]
            written.on_done(
                lambda w: deleted.fail(w.error) if w.error is not None else deleted.resolve(count)
            )

        if isinstance(queue, RemoteQueue):
            # Led by another node: the count is its leader's, asked first.
            def asked(done: Completion[tuple[int, int]]) -> None:
                try:
                    leader_counts = done.result()
                except AMQPError as exc:
                    deleted.fail(exc)
                    return
                counted(leader_counts)

            queue.deletion_counts().on_done(asked)
        else:
            counted(None)
        return deleted

    # -- HTTP over AMQP ---------------------------------------------------------------------

    def handle_request(self, method: str, target: str, body: Value) -> tuple[str, Value]:
        split = urlsplit(target)
        segments = split.path.split("/")[1:]
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        if len(segments) == 2 and segments[0] == "queues":
            name = unquote(segments[1])
            if method == "GET":
                return "200", self._queue_info(self._queue(name))
            if method == "PUT":
                return self._declare_queue(name, body)
            if method == "DELETE":
                self.session.guard.queue_delete(name)
                count = self.session.vhost.delete_queue(name, owner=self.session.client)
                return "200", {"message_count": ULong(count)}
        if (
            len(segments) == 3
            and segments[0] == "queues"
            and segments[2] == "messages"
            and method == "DELETE"
        ):
            name = unquote(segments[1])
            queue = self._queue(name)
            if not queue.type.purges:
                raise HttpError("400", f"purge not supported by queue '{name}'")
            self.session.guard.queue_purge(name)
            count = self.session.vhost.purge_queue(name, owner=self.session.client)
            return "200", {"message_count": ULong(count)}
        if len(segments) == 2 and segments[0] == "exchanges":
            name = unquote(segments[1])
            if not name:
                raise HttpError("403", "operation not permitted on the default exchange")
            if method == "PUT":
                return self._declare_exchange(name, body)
            if method == "DELETE":
                if name.startswith("amq."):
                    raise HttpError("403", f"exchange '{name}' starts with reserved prefix 'amq.'")
                self.session.guard.exchange_delete(name)
                if name in self.session.vhost.exchanges:
                    self.session.vhost.delete_exchange(name)
                return "204", None
        if segments == ["bindings"]:
            if method == "POST":
                self._bind(body)
                return "204", None
            if method == "GET":
                return "200", self._bindings(query)
        if len(segments) == 2 and segments[0] == "bindings" and method == "DELETE":
            self._unbind(segments[1])
            return "204", None
        raise HttpError("400", f"unsupported request {method} {target}")

    def _queue(self, name: str) -> Queue:
        return self.session.vhost.queue(name, self.session.client)

    def _queue_info(self, queue: Queue) -> dict[Value, Value]:
        vhost = self.session.vhost
        arguments: dict[Value, Value] = {
            str(k): value_of_field(v) for k, v in queue.arguments.items()
        }
        return {
            # RabbitMQ 4 counts no messages in a stream (its positions are offsets).
            "message_count": ULong(0 if queue.type.offsets else queue.message_count),
            "consumer_count": UInt(queue.consumer_count),
            "name": queue.name,
            "vhost": vhost.name,
            "durable": queue.durable,
            "auto_delete": queue.auto_delete,
            "exclusive": queue.exclusive,
            "type": queue.type.name,
            "arguments": arguments,
            "leader": "leveret",
            "replicas": ["leveret"],
        }

    def _declare_queue(self, name: str, body: Value) -> tuple[str, Value]:
        if not name:
            raise HttpError("400", "declare queue with empty name not allowed")
        props = _map(body, ("durable", "exclusive", "auto_delete", "arguments"), "queue")
        durable = props.get("durable", True)
        exclusive = props.get("exclusive", False)
        auto_delete = props.get("auto_delete", False)
        arguments = _arguments(props.get("arguments"))
        vhost = self.session.vhost
        existed = vhost.find_queue(name) is not None
        if name.startswith("amq.") and not existed:
            raise HttpError("403", f"queue '{name}' starts with reserved prefix 'amq.'")
        self.session.guard.queue_declare(name, passive=False, arguments=arguments)
        queue = vhost.declare_queue(
            name,
            owner=self.session.client,
            durable=bool(durable),
            exclusive=bool(exclusive),
            auto_delete=bool(auto_delete),
            arguments=arguments,
        )
        return ("200" if existed else "201"), self._queue_info(queue)

    def _declare_exchange(self, name: str, body: Value) -> tuple[str, Value]:
        props = _map(body, ("type", "durable", "auto_delete", "internal", "arguments"), "exchange")
        vhost = self.session.vhost
        if name.startswith("amq.") and name not in vhost.exchanges:
            raise HttpError("403", f"exchange '{name}' starts with reserved prefix 'amq.'")
        type_name = str(props.get("type", "direct"))
        arguments = _arguments(props.get("arguments"))
        self.session.guard.exchange_declare(name, type_name, passive=False, arguments=arguments)
        vhost.declare_exchange(
            name,
            type_name,
            durable=bool(props.get("durable", True)),
            auto_delete=bool(props.get("auto_delete", False)),
            internal=bool(props.get("internal", False)),
            arguments=arguments,
        )
        return "204", None

    def _bind(self, body: Value) -> None:
        props, source, key, arguments = _binding_request(body)
        if not source:
            raise HttpError("403", "operation not permitted on the default exchange")
        vhost = self.session.vhost
        guard = self.session.guard
        if "destination_queue" in props:
            queue = str(props["destination_queue"])
            guard.queue_bind(queue, source, key)
            vhost.bind_queue(queue, source, key, arguments, owner=self.session.client)
        elif "destination_exchange" in props:
            destination = str(props["destination_exchange"])
            guard.exchange_bind(destination, source, key)
            vhost.bind_exchange(destination, source, key, arguments)
        else:
            raise HttpError("400", "binding without a destination")

    def _bindings(self, query: dict[str, str]) -> Value:
        source = query.get("src")
        key = query.get("key")
        if source is None or key is None:
            raise HttpError("400", "missing 'src' or 'key' in query")
        if "dstq" in query:
            kind, destination = "queue", query["dstq"]
        elif "dste" in query:
            kind, destination = "exchange", query["dste"]
        else:
            raise HttpError("400", "missing 'dste' or 'dstq' in query")
        out: list[Value] = []
        for found_key, arguments in self._find_bindings(source, kind, destination):
            if found_key != key:
                continue
            out.append(
                {
                    "source": source,
                    f"destination_{kind}": destination,
                    "binding_key": found_key,
                    "arguments": {str(k): value_of_field(v) for k, v in arguments.items()},
                    "location": _binding_uri(source, kind, destination, found_key, arguments),
                }
            )
        return out

    def _find_bindings(
        self, source: str, kind: str, destination: str
    ) -> list[tuple[str, dict[str, object]]]:
        vhost = self.session.vhost
        exchange = vhost.exchanges.get(source)
        if exchange is None:
            return []
        target: object = (
            vhost.find_queue(destination) if kind == "queue" else vhost.exchanges.get(destination)
        )
        return [
            (key, dict(arguments or {}))
            for destination_, key, arguments in exchange.kind.bindings()
            if destination_ is target
        ]

    def _unbind(self, segment: str) -> None:
        fields = dict(part.split("=", 1) for part in segment.split(";") if "=" in part)
        source = unquote(fields.get("src", ""))
        key = unquote(fields.get("key", ""))
        args_hash = fields.get("args", "")
        if "dstq" in fields:
            kind, destination = "queue", unquote(fields["dstq"])
        elif "dste" in fields:
            kind, destination = "exchange", unquote(fields["dste"])
        else:
            raise HttpError("400", f"bad binding path segment '{segment}'")
        vhost = self.session.vhost
        for found_key, arguments in self._find_bindings(source, kind, destination):
            if found_key == key and _args_hash(arguments) == args_hash:
                if kind == "queue":
                    self.session.guard.queue_unbind(destination, source, key)
                    vhost.unbind_queue(
                        destination, source, key, arguments, owner=self.session.client
                    )
                else:
                    self.session.guard.exchange_unbind(destination, source, key)
                    vhost.unbind_exchange(destination, source, key, arguments)
                return

    def close(self) -> None:
        self.closed = True


def _reply_link(session: SessionCore, name: str) -> ManagementNode | None:
    """The sending link of the session's management link pair named ``name`` (any sending
    management link of the session if none has that name)."""
    fallback = None
    for link in session.links.values():
        if isinstance(link, ManagementNode) and link.sending:
            if link.name == name:
                return link
            fallback = link
    return fallback


def _request_sections(payload: bytes) -> tuple[Properties | None, Value]:
    """A request's properties and body, in whatever order they come (RabbitMQ's own client
    puts an ``amqp-value`` null before the properties, and RabbitMQ reads it so)."""
    props: Properties | None = None
    body: Value = None
    off = 0
    while off < len(payload):
        value, off = decode_value(payload, off)
        if isinstance(value, Properties):
            props = value
        elif isinstance(value, AmqpValue):
            body = value
    return props, body


def _map(body: Value, allowed: tuple[str, ...], what: str) -> dict[str, object]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise HttpError("400", f"bad {what} body")
    out: dict[str, object] = {}
    for key, value in body.items():
        if not isinstance(key, str) or key not in allowed:
            raise HttpError("400", f"bad {what} property {key!r}")
        out[str(key)] = value if key == "arguments" else field_value(value)
    return out


def _arguments(value: object) -> dict[str, object]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HttpError("400", "arguments must be a map")
    return {str(k): field_value(v) for k, v in value.items()}


def _args_hash(arguments: dict[str, object]) -> str:
    if not arguments:
        return ""
    digest = zlib.crc32(repr(sorted(arguments.items())).encode()).to_bytes(4, "big")
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _binding_uri(
    source: str, kind: str, destination: str, key: str, arguments: dict[str, object]
) -> str:
    char = "q" if kind == "queue" else "e"
    return (
        f"/bindings/src={quote(source, safe='')};dst{char}={quote(destination, safe='')};"
        f"key={quote(key, safe='')};args={_args_hash(arguments)}"
    )


def _raise(error: Exception) -> tuple[str, Value]:
    raise error


def _binding_request(body: Value) -> tuple[dict[str, object], str, str, dict[str, object]]:
    """A ``POST /bindings`` body: its fields, source, binding key and arguments."""
    props = _map(
        body,
        ("source", "destination_queue", "destination_exchange", "binding_key", "arguments"),
        "binding",
    )
    return (
        props,
        str(props.get("source", "")),
        str(props.get("binding_key", "")),
        _arguments(props.get("arguments")),
    )
