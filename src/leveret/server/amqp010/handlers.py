"""The AMQP 0-10 commands a client sends on a session, each mapped onto the broker core:
message, exchange, queue, tx and dtx. ``HANDLERS`` maps a command class to its handler; a
handler returns True when the command is complete, False when it completes later (a
transfer waiting for the store, a commit). Errors are raised (the core's ``AMQPError``, or
``ExecutionError`` where 0-10 wants a code the core does not use) and turned into
``execution.exception`` by the connection (``connection.py``).

Permissions: every handler that names a resource asks the connection's ``Guard``
(``server/guard.py``) first, with the names the core will see, in RabbitMQ's order, after
the checks that are 0-10's own argument rules (a missing name, an unknown exchange type);
a refusal is the core's ``AccessRefused`` (403, 0-10's unauthorized-access) with RabbitMQ's
text, and nothing was changed. The queries (``exchange.query``, ``exchange.bound``,
``queue.query``) and passive declarations need no permission, as a passive declaration
over 0-9-1 needs none; settling transfers already sent, flow control and ``tx``/``dtx``
name no resource (the transfers a transaction holds were checked when they came).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from leveret.convert.amqp010 import routing_key_of, transfer_message, user_id_of
from leveret.errors import AccessRefused, AMQPError, NotFound
from leveret.model.completion import every
from leveret.model.dtx import XA_OK
from leveret.model.exchanges import TYPES
from leveret.model.exchanges.base import freeze
from leveret.model.queues.remote import RemoteQueue
from leveret.protocol.amqp010._generated import commands as c
from leveret.protocol.amqp010._generated.constants import ExecutionErrorCode
from leveret.protocol.amqp010._generated.structs import (
    Acquired,
    ExchangeBoundResult,
    ExchangeQueryResult,
    GetTimeoutResult,
    MessageResumeResult,
    QueueQueryResult,
    RecoverResult,
    XaResult,
    Xid,
)
from leveret.protocol.amqp010.errors import DecodeError, ExecutionError
from leveret.protocol.amqp010.ops import decode_header
from leveret.protocol.amqp010.sequence import SequenceSet
from leveret.server.amqp010.session import DLX, delete_rerouting, rerouting

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.completion import Completion
    from leveret.model.dtx import Xid as CoreXid
    from leveret.model.publisher import Publisher
    from leveret.protocol.amqp010.events import CommandReceived
    from leveret.protocol.amqp010.types import Struct
    from leveret.server.amqp010.session import Session
    from leveret.server.guard import Guard


class Commands(Protocol):
    """What a handler needs of the connection it runs for (``Commands``, which
    imports this module's table, is the one): its guard, the origin of what it publishes,
    where a publisher that took a message is reported (its confirms are flushed at the
    turn's end), and the two answers to a command."""

    origin: object

    @property
    def guard(self) -> Guard | None: ...

    def published_by(self, publisher: Publisher) -> None: ...

    def result(self, ev: CommandReceived, value: Struct) -> None: ...

    def fail_command(self, ssn: Session, ev: CommandReceived, exc: Exception) -> None: ...

    def complete(self, channel: int, command_id: int) -> None: ...

    def defer(self, completion: Completion[Any], then: Callable[[Completion[Any]], None]) -> None:
        """The shell's deferral: the connection's input waits for ``completion``."""


Handler = "Callable[[Commands, Session, CommandReceived], bool]"


def _shared_first(
    conn: Commands,
    ssn: Session,
    ev: CommandReceived,
    written: Completion[Any] | None,
    then: Callable[[], bool],
) -> bool:
    """``then()`` (the handler's own work) once ``written``, a declaration in a cluster's
    metadata store (``VirtualHost.shared``), is there and in this node's model; at once
    when there is nothing to wait for. What the handler returns: whether it is done."""
    if written is None:
        return then()

    def go_on(done: Completion[Any]) -> None:
        if ssn.closed:
            return
        try:
            done.result()
            finished = then()
        except (AMQPError, ExecutionError, DecodeError) as exc:
            conn.fail_command(ssn, ev, exc)
            return
        if finished:
            conn.complete(ev.channel, ev.command_id)

    conn.defer(written, go_on)
    return False


def _fail(code: ExecutionErrorCode, text: str) -> ExecutionError:
    return ExecutionError(text, error_code=int(code))


def _args(value: dict[str, Any] | None) -> dict[str, object]:
    return dict(value or {})


def _guard(conn: Commands) -> Guard:
    guard = conn.guard
    assert guard is not None  # sessions exist only on open connections
    return guard


# -- message -------------------------------------------------------------------------------


def message_transfer(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.MessageTransfer)
    exchange = command.destination or ""
    header: list[Struct] = decode_header(ev.header) if ev.header is not None else []
    user_id = user_id_of(header)
    routing_key = routing_key_of(header)
    guard = _guard(conn)
    # RabbitMQ's order: write on the exchange (and its topic key), then the user-id.
    guard.publish(exchange, routing_key, ssn.publisher)
    if user_id is not None:
        try:
            guard.check_user_id(user_id.decode(errors="replace"))
        except AMQPError as exc:
            # 0-10 (Qpid C++) answers a foreign user-id with unauthorized-access.
            raise _fail(ExecutionErrorCode.UNAUTHORIZED_ACCESS, exc.reply_text) from None
    message = transfer_message(exchange, routing_key, header, ev.body or b"")
    message.origin = conn.origin
    done = ssn.publish(ev.command_id, exchange, routing_key, message)
    conn.published_by(ssn.publisher)
    return done


def _transfers(command: c.MessageAccept | c.MessageReject | c.MessageRelease) -> SequenceSet:
    return command.transfers or SequenceSet()


def message_accept(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    assert isinstance(ev.command, c.MessageAccept)
    ssn.accept(_transfers(ev.command))
    return True


def message_reject(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    assert isinstance(ev.command, c.MessageReject)
    ssn.reject(_transfers(ev.command))
    return True


def message_release(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    assert isinstance(ev.command, c.MessageRelease)
    ssn.release(_transfers(ev.command), redelivered=bool(ev.command.set_redelivered))
    return True


def message_acquire(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.MessageAcquire)
    pending = ssn.acquire(command.transfers or SequenceSet())
    if pending.done:
        conn.result(ev, Acquired(transfers=SequenceSet.of(*pending.result())))
        return True

    # Of a queue led by another node: answered once its leader took (or refused) them.
    def acquired(done: Completion[list[int]]) -> None:
        if not ssn.closed:
            conn.result(ev, Acquired(transfers=SequenceSet.of(*done.result())))
            conn.complete(ev.channel, ev.command_id)

    conn.defer(pending, acquired)
    return False


def message_resume(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    # Leveret keeps no partial transfers: every resume-id is unknown, offset 0 (spec).
    conn.result(ev, MessageResumeResult(offset=0))
    return True


def message_subscribe(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.MessageSubscribe)
    if not command.queue:
        raise _fail(ExecutionErrorCode.ILLEGAL_ARGUMENT, "message.subscribe: no queue given")
    _guard(conn).consume(command.queue)  # read, for browsing as for acquiring
    try:
        sub = ssn.subscribe(
            command.queue,
            command.destination or "",
            accept_mode=command.accept_mode or 0,
            acquire_mode=command.acquire_mode or 0,
            exclusive=command.exclusive,
            arguments=_args(command.arguments),
        )
    except AccessRefused as exc:
        raise _locked(exc) from None
    queue, consumer = sub.queue, sub.consumer
    if consumer is None:
        return True
    pending = queue.answer(consumer)
    if pending is None:
        return True

    # Led by another node: completed once its leader took the consume, so its refusal is
    # the execution exception one node gives (before, the subscription just got nothing).
    def answered(done: Completion[None]) -> None:
        if ssn.closed:
            return
        try:
            done.result()
        except AMQPError as exc:
            if ssn.subscriptions.get(sub.destination) is sub:
                ssn.cancel(sub.destination)
            conn.fail_command(ssn, ev, _locked(exc) if isinstance(exc, AccessRefused) else exc)
            return
        queue.release(consumer)
        conn.complete(ev.channel, ev.command_id)

    conn.defer(pending, answered)
    return False


def _locked(exc: AccessRefused) -> ExecutionError:
    """The core's "in exclusive use" (403) is 0-10's resource-locked."""
    return _fail(ExecutionErrorCode.RESOURCE_LOCKED, exc.reply_text)


def message_cancel(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    assert isinstance(ev.command, c.MessageCancel)
    sub = ssn.subscription(ev.command.destination or "")
    consumer = sub.consumer
    ssn.cancel(sub.destination)
    # A queue led by another node lets the subscription go when its leader has: completed
    # then (as 0-9-1's cancel-ok), so that a subscribe reaching the leader another way
    # right after it is not refused for this one.
    gone = consumer.queue.withdrawn(consumer) if consumer is not None else None
    if gone is None:
        return True

    def withdrawn(_done: Completion[None]) -> None:
        if not ssn.closed:
            conn.complete(ev.channel, ev.command_id)

    conn.defer(gone, withdrawn)
    return False


def message_set_flow_mode(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    assert isinstance(ev.command, c.MessageSetFlowMode)
    ssn.set_flow_mode(ev.command.destination or "", ev.command.flow_mode or 0)
    return True


def message_flow(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.MessageFlow)
    ssn.flow(command.destination or "", command.unit or 0, command.value or 0)
    return True


def message_flush(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    assert isinstance(ev.command, c.MessageFlush)
    pending = ssn.flush(ev.command.destination or "")
    if pending is None:
        return True

    # A queue led by another node: complete once its leader handed what it held (its
    # transfers go out first), the connection's input waiting meanwhile.
    def flushed(_done: Completion[None]) -> None:
        if not ssn.closed:
            conn.complete(ev.channel, ev.command_id)

    conn.defer(pending, flushed)
    return False


def message_stop(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    assert isinstance(ev.command, c.MessageStop)
    ssn.stop(ev.command.destination or "")
    return True


# -- tx ------------------------------------------------------------------------------------


def tx_select(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    ssn.select_tx()
    return True


def tx_commit(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command_id = ev.command_id

    def done(ok: bool) -> None:
        if ssn.closed:
            return
        if not ok:
            conn.fail_command(
                ssn,
                ev,
                _fail(
                    ExecutionErrorCode.INTERNAL_ERROR,
                    "tx.commit failed: the store could not write to disk",
                ),
            )
            return
        ssn.complete(command_id)

    ssn.commit(done)
    return False


def tx_rollback(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    ssn.rollback()
    return True


# -- dtx -----------------------------------------------------------------------------------


def _xid(xid: Xid | None) -> CoreXid:
    if xid is None:
        raise _fail(ExecutionErrorCode.ILLEGAL_ARGUMENT, "dtx: no xid given")
    return (xid.format or 0, xid.global_id or b"", xid.branch_id or b"")


def _wire_xid(xid: CoreXid) -> Xid:
    return Xid(format=xid[0], global_id=xid[1], branch_id=xid[2])


def _need_dtx(ssn: Session) -> None:
    if not ssn.dtx_selected:
        raise _fail(ExecutionErrorCode.COMMAND_INVALID, "session is not selected for dtx")


def dtx_select(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    ssn.select_dtx()
    return True


def dtx_start(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.DtxStart)
    _need_dtx(ssn)
    if ssn.branch is not None:
        raise _fail(ExecutionErrorCode.ILLEGAL_STATE, "session is already associated")
    branch = ssn.coordinator.start(
        ssn, _xid(command.xid), ssn.vhost, join=command.join, resume=command.resume
    )
    ssn.branch = branch
    ssn.branches.add(branch)
    conn.result(ev, XaResult(status=XA_OK))
    return True


def dtx_end(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.DtxEnd)
    _need_dtx(ssn)
    xid = _xid(command.xid)
    status = ssn.coordinator.end(ssn, xid, fail=command.fail, suspend=command.suspend)
    branch = ssn.branch
    if branch is not None and branch.xid == xid:
        ssn.branch = None
        if not command.suspend:
            ssn.branches.discard(branch)
    conn.result(ev, XaResult(status=status))
    return True


def _deferred_status(conn: Commands, ssn: Session, ev: CommandReceived) -> Any:
    def done(status: int | None) -> None:
        if ssn.closed or ssn.link is None:
            return
        if status is None:
            error = _fail(
                ExecutionErrorCode.INTERNAL_ERROR,
                "dtx.commit failed: the decision could not be written to disk "
                "(the branch is still prepared)",
            )
            conn.fail_command(ssn, ev, error)
            return
        conn.result(ev, XaResult(status=status))
        ssn.complete(ev.command_id)

    return done


def dtx_prepare(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.DtxPrepare)
    ssn.coordinator.prepare(_xid(command.xid), _deferred_status(conn, ssn, ev))
    return False


def dtx_commit(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.DtxCommit)
    ssn.coordinator.commit(
        _xid(command.xid), one_phase=command.one_phase, done=_deferred_status(conn, ssn, ev)
    )
    return False


def dtx_rollback(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.DtxRollback)
    status = ssn.coordinator.rollback(_xid(command.xid))
    conn.result(ev, XaResult(status=status))
    return True


def dtx_forget(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.DtxForget)
    ssn.coordinator.forget(_xid(command.xid))
    return True


def dtx_get_timeout(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.DtxGetTimeout)
    timeout = ssn.coordinator.get_timeout(_xid(command.xid))
    conn.result(ev, GetTimeoutResult(timeout=timeout))
    return True


def dtx_set_timeout(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.DtxSetTimeout)
    ssn.coordinator.set_timeout(_xid(command.xid), command.timeout or 0)
    return True


def dtx_recover(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    xids = [_wire_xid(xid) for xid in ssn.coordinator.recover()]
    conn.result(ev, RecoverResult(in_doubt=list(xids)))
    return True


# -- exchange ------------------------------------------------------------------------------


def exchange_declare(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.ExchangeDeclare)
    name = command.exchange or ""
    type_name = command.type or ""
    arguments = _args(command.arguments)
    vhost = ssn.vhost
    if command.passive:
        vhost.exchange(name)
        return True
    if name.startswith(("amq.", "qpid.")) and name not in vhost.exchanges:
        raise _fail(ExecutionErrorCode.NOT_ALLOWED, f"exchange name '{name}' is reserved")
    if type_name not in TYPES:
        raise _fail(ExecutionErrorCode.NOT_FOUND, f"exchange type '{type_name}' not known")
    alternate = command.alternate_exchange
    if alternate:
        arguments["alternate-exchange"] = alternate
    if name:
        _guard(conn).exchange_declare(name, type_name, passive=False, arguments=arguments)
    if alternate:
        vhost.exchange(alternate)
    shared = vhost.shared
    written = None
    if shared is not None and name and name not in vhost.exchanges:
        written = shared.declare_exchange(
            name,
            type_name,
            durable=command.durable,
            auto_delete=command.auto_delete,
            internal=False,
            arguments=arguments,
        )
    return _shared_first(conn, ssn, ev, written, lambda: _declare_exchange(ssn, command, arguments))


def _declare_exchange(
    ssn: Session, command: c.ExchangeDeclare, arguments: dict[str, object]
) -> bool:
    vhost = ssn.vhost
    name = command.exchange or ""
    type_name = command.type or ""
    alternate = command.alternate_exchange
    existing = vhost.exchanges.get(name)
    if existing is not None and (name.startswith("amq.") or name == ""):
        if existing.type_name != type_name:
            raise _fail(
                ExecutionErrorCode.NOT_ALLOWED,
                f"exchange '{name}' exists with type '{existing.type_name}'",
            )
        return True
    if existing is not None:
        if existing.type_name != type_name:
            raise _fail(
                ExecutionErrorCode.NOT_ALLOWED,
                f"exchange '{name}' exists with type '{existing.type_name}'",
            )
        if alternate is not None and existing.alternate != (alternate or None):
            raise _fail(
                ExecutionErrorCode.NOT_ALLOWED,
                f"exchange '{name}' exists with another alternate exchange",
            )
        return True  # Qpid: a redeclaration of the same name and type succeeds
    vhost.declare_exchange(
        name,
        type_name,
        durable=command.durable,
        auto_delete=command.auto_delete,
        arguments=arguments,
    )
    return True


def _used_as_alternate(ssn: Session, name: str) -> bool:
    vhost = ssn.vhost
    return any(x.alternate == name for x in vhost.exchanges.values() if x.name != name) or any(
        q.arguments.get(DLX) == name for q in vhost.queues.values()
    )


def exchange_delete(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.ExchangeDelete)
    name = command.exchange or ""
    if name == "":
        raise _fail(ExecutionErrorCode.INVALID_ARGUMENT, "the default exchange cannot be deleted")
    _guard(conn).exchange_delete(name)
    if name not in ssn.vhost.exchanges:
        raise NotFound(f"no exchange '{name}' in vhost '{ssn.vhost.name}'")
    if _used_as_alternate(ssn, name):
        raise _fail(ExecutionErrorCode.NOT_ALLOWED, f"exchange '{name}' is an alternate exchange")
    shared = ssn.vhost.shared
    written = None
    if shared is not None:
        # On a cluster node, out of etcd first (its bindings, and auto-delete exchanges
        # left bare, with it), so every node has lost it once the command completes.
        written = shared.delete_exchange(name, if_unused=command.if_unused)
    return _shared_first(
        conn, ssn, ev, written, lambda: _delete_exchange(ssn, name, command.if_unused)
    )


def _delete_exchange(ssn: Session, name: str, if_unused: bool) -> bool:
    # (Gone already when etcd's deletion was applied here: then this is a no-op.)
    ssn.vhost.delete_exchange(name, if_unused=if_unused)
    return True


def exchange_query(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.ExchangeQuery)
    exchange = ssn.vhost.exchanges.get(command.name or "")
    if exchange is None:
        result = ExchangeQueryResult(not_found=True)
    else:
        args: dict[str, Any] = dict(exchange.arguments)
        result = ExchangeQueryResult(
            type=exchange.type_name, durable=exchange.durable, arguments=args
        )
    conn.result(ev, result)
    return True


def _binding(ssn: Session, command: c.ExchangeBind | c.ExchangeUnbind) -> tuple[str, str, str]:
    queue = command.queue or ""
    exchange = command.exchange or ""
    if not queue:
        raise _fail(ExecutionErrorCode.ILLEGAL_ARGUMENT, "no queue given")
    if exchange == "":
        raise _fail(
            ExecutionErrorCode.INVALID_ARGUMENT, "bindings to the default exchange are implicit"
        )
    return queue, exchange, command.binding_key or ""


def exchange_bind(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.ExchangeBind)
    queue, exchange, key = _binding(ssn, command)
    arguments = _args(command.arguments)
    _guard(conn).queue_bind(queue, exchange, key)
    target = ssn.vhost.exchange(exchange)
    if target.type_name == "headers" and "x-match" not in arguments and arguments:
        raise _fail(ExecutionErrorCode.INTERNAL_ERROR, "headers binding needs x-match")
    vhost = ssn.vhost
    shared = vhost.shared
    written = None
    if shared is not None:
        # (The store refuses another's exclusive queue, the session naming its own.)
        written = shared.bind(exchange, "queue", queue, key, arguments, owner=ssn.record_owner)
    return _shared_first(
        conn,
        ssn,
        ev,
        written,
        lambda: _bind(ssn, queue, exchange, key, arguments),
    )


def _bind(ssn: Session, queue: str, exchange: str, key: str, arguments: dict[str, object]) -> bool:
    ssn.vhost.bind_queue(queue, exchange, key, arguments, owner=ssn)
    return True


def exchange_unbind(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.ExchangeUnbind)
    queue, exchange, key = _binding(ssn, command)
    _guard(conn).queue_unbind(queue, exchange, key)
    vhost = ssn.vhost
    source = vhost.exchange(exchange)
    destination = vhost.queue(queue, ssn)
    # 0-10 names a binding by its key alone: every binding of that key goes, whatever
    # its arguments.
    matched = [a for dest, k, a in source.kind.bindings() if dest is destination and k == key]
    if not matched:
        raise NotFound(f"no binding of '{queue}' to '{exchange}' with key '{key}'")
    shared = vhost.shared
    written = None
    if shared is not None:
        # On a cluster node, out of etcd first, so no node routes by it once the command
        # completes (a binding only this node's model has is not in etcd: nothing to wait).
        written = every(shared.unbind(exchange, "queue", queue, key, a) for a in matched)
    return _shared_first(conn, ssn, ev, written, lambda: _unbind(ssn, queue, exchange, key))


def _unbind(ssn: Session, queue: str, exchange: str, key: str) -> bool:
    # (What etcd's unbinding removed here already is not found again: only the rest goes.)
    vhost = ssn.vhost
    source = vhost.exchanges.get(exchange)
    destination = vhost.find_queue(queue)
    if source is None or destination is None:
        return True
    for dest, k, a in list(source.kind.bindings()):
        if dest is destination and k == key:
            vhost.unbind_queue(queue, exchange, key, a, owner=ssn)
    return True


def exchange_bound(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.ExchangeBound)
    vhost = ssn.vhost
    exchange = vhost.exchanges.get(command.exchange or "")
    queue = vhost.find_queue(command.queue or "") if command.queue else None
    result = ExchangeBoundResult(
        exchange_not_found=exchange is None,
        queue_not_found=bool(command.queue) and queue is None,
    )
    if exchange is not None:
        bindings = list(exchange.kind.bindings())
        if queue is not None:
            to_queue = [b for b in bindings if b[0] is queue]
            result.queue_not_matched = not to_queue
            if to_queue:
                bindings = to_queue
        if command.binding_key is not None:
            result.key_not_matched = not any(k == command.binding_key for _d, k, _a in bindings)
            if not result.key_not_matched:
                bindings = [b for b in bindings if b[1] == command.binding_key]
        if command.arguments:
            wanted = freeze(command.arguments)
            result.args_not_matched = not any(freeze(dict(a)) == wanted for _d, _k, a in bindings)
    conn.result(ev, result)
    return True


# -- queue ---------------------------------------------------------------------------------


def queue_declare(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.QueueDeclare)
    arguments = _args(command.arguments)
    alternate = command.alternate_exchange
    if alternate:
        arguments.setdefault(DLX, alternate)
    name = command.queue or ""
    if not name:
        raise _fail(ExecutionErrorCode.ILLEGAL_ARGUMENT, "queue.declare: no queue name")
    _guard(conn).queue_declare(name, passive=command.passive, arguments=arguments)
    if alternate:
        ssn.vhost.exchange(alternate)
    if command.passive:
        # Qpid: any session may passively declare an exclusive queue (request/reply), but
        # not claim it exclusively.
        queue = ssn.vhost.find_queue(name)
        if queue is None:
            raise NotFound(f"no queue '{name}' in vhost '{ssn.vhost.name}'")
        if command.exclusive and queue.exclusive_owner is not ssn:
            raise _fail(ExecutionErrorCode.RESOURCE_LOCKED, f"queue '{name}' is not exclusive here")
        return True
    shared = ssn.vhost.shared
    written = None
    if shared is not None and ssn.vhost.find_queue(name) is None:
        # On a cluster node, into etcd first (its leader chosen by its locator, every node
        # knowing it, transient or durable). An exclusive queue's record names its owner,
        # this session (not its connection: a session outlives a connection it is detached
        # from), and it is led here, where the session lives; the other nodes' proxies of
        # it refuse every session and channel, as this node refuses the other sessions.
        written = shared.declare_queue(
            name,
            generated_name=name,
            owner=ssn.record_owner,
            durable=command.durable,
            exclusive=command.exclusive,
            auto_delete=_auto_delete(command),
            arguments=arguments,
        )
    return _shared_first(
        conn, ssn, ev, written, lambda: _declare_queue(ssn, command, name, arguments)
    )


def _declare_queue(
    ssn: Session, command: c.QueueDeclare, name: str, arguments: dict[str, object]
) -> bool:
    existing = ssn.vhost.find_queue(name)
    if existing is not None:
        # Qpid: a redeclaration succeeds whatever its other fields, unless exclusivity says no.
        if existing.exclusive_owner is not None and existing.exclusive_owner is not ssn:
            raise _fail(
                ExecutionErrorCode.RESOURCE_LOCKED,
                f"cannot obtain exclusive access to locked queue '{name}'",
            )
        if command.exclusive and existing.exclusive_owner is not ssn:
            raise _fail(ExecutionErrorCode.RESOURCE_LOCKED, f"queue '{name}' is in use")
        return True
    ssn.vhost.declare_queue(
        name,
        owner=ssn,
        durable=command.durable,
        exclusive=command.exclusive,
        auto_delete=_auto_delete(command),
        arguments=arguments,
    )
    if command.exclusive and command.auto_delete:
        ssn.auto_delete_exclusive.add(name)
    return True


def _auto_delete(command: c.QueueDeclare) -> bool:
    # Qpid: an exclusive auto-delete queue goes with its session, not with its last
    # subscriber (the session deletes its exclusive queues when it ends).
    return command.auto_delete and not command.exclusive


def queue_delete(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.QueueDelete)
    name = command.queue or ""
    if not name:
        raise _fail(ExecutionErrorCode.ILLEGAL_ARGUMENT, "queue.delete: no queue name")
    _guard(conn).queue_delete(name)
    vhost = ssn.vhost
    queue = vhost.queue(name, ssn)  # 404 when missing (0-10), 405 when locked
    counts = None
    if isinstance(queue, RemoteQueue) and (command.if_unused or command.if_empty):
        # Led by another node: if-unused and if-empty are about its leader's consumers and
        # messages, asked first, as 0-9-1's queue.delete does.
        counts = queue.deletion_counts()
    return _shared_first(
        conn, ssn, ev, counts, lambda: _delete_queue(conn, ssn, ev, command, name, counts)
    )


def _delete_queue(
    conn: Commands,
    ssn: Session,
    ev: CommandReceived,
    command: c.QueueDelete,
    name: str,
    counts: Completion[tuple[int, int]] | None,
) -> bool:
    vhost = ssn.vhost
    queue = vhost.queue(name, ssn)
    leader_counts = counts.result() if counts is not None else None
    shared = vhost.shared
    if shared is not None:
        vhost.check_delete(
            name,
            owner=ssn,
            if_unused=command.if_unused,
            if_empty=command.if_empty,
            leader_counts=leader_counts,
        )
        written = shared.delete_queue(queue)
        if written is not None:
            # In etcd first: this node's model loses it when etcd has; what it held goes
            # to its alternate exchange then, as below (whether the session waits or not).
            reroute = rerouting(vhost, queue)
            written.on_done(lambda done: None if done.error else reroute())
            return _shared_first(conn, ssn, ev, written, lambda: True)
    # Qpid: what a deleted queue still held goes to its alternate exchange.
    delete_rerouting(
        vhost,
        queue,
        lambda: vhost.delete_queue(
            name,
            owner=ssn,
            if_unused=command.if_unused,
            if_empty=command.if_empty,
            leader_counts=leader_counts,
        ),
    )
    return True


def queue_purge(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.QueuePurge)
    name = command.queue or ""
    if not name:
        raise _fail(ExecutionErrorCode.ILLEGAL_ARGUMENT, "queue.purge: no queue name")
    _guard(conn).queue_purge(name)
    queue = ssn.vhost.queue(name, ssn)
    if not queue.type.purges:
        raise queue.unsupported("queue.purge")
    queue.purge()
    return True


def queue_query(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    command = ev.command
    assert isinstance(command, c.QueueQuery)
    queue = ssn.vhost.find_queue(command.queue or "")
    if queue is None:
        conn.result(ev, QueueQueryResult())
        return True
    arguments: dict[str, Any] = {k: v for k, v in queue.arguments.items() if k != DLX}
    alternate = queue.arguments.get(DLX)
    conn.result(
        ev,
        QueueQueryResult(
            queue=queue.name,
            alternate_exchange=alternate if isinstance(alternate, str) else None,
            durable=queue.durable,
            exclusive=queue.exclusive,
            auto_delete=queue.auto_delete or queue.name in ssn.auto_delete_exclusive,
            arguments=arguments,
            message_count=queue.message_count,
            subscriber_count=queue.consumer_count + len(queue.browsers),
        ),
    )
    return True


def not_implemented(conn: Commands, ssn: Session, ev: CommandReceived) -> bool:
    raise _fail(
        ExecutionErrorCode.NOT_IMPLEMENTED, f"{ev.command.NAME} is not implemented by Leveret"
    )


HANDLERS: dict[type[Any], Callable[[Commands, Session, CommandReceived], bool]] = {
    c.MessageTransfer: message_transfer,
    c.MessageAccept: message_accept,
    c.MessageReject: message_reject,
    c.MessageRelease: message_release,
    c.MessageAcquire: message_acquire,
    c.MessageResume: message_resume,
    c.MessageSubscribe: message_subscribe,
    c.MessageCancel: message_cancel,
    c.MessageSetFlowMode: message_set_flow_mode,
    c.MessageFlow: message_flow,
    c.MessageFlush: message_flush,
    c.MessageStop: message_stop,
    c.TxSelect: tx_select,
    c.TxCommit: tx_commit,
    c.TxRollback: tx_rollback,
    c.DtxSelect: dtx_select,
    c.DtxStart: dtx_start,
    c.DtxEnd: dtx_end,
    c.DtxCommit: dtx_commit,
    c.DtxForget: dtx_forget,
    c.DtxGetTimeout: dtx_get_timeout,
    c.DtxPrepare: dtx_prepare,
    c.DtxRecover: dtx_recover,
    c.DtxRollback: dtx_rollback,
    c.DtxSetTimeout: dtx_set_timeout,
    c.ExchangeDeclare: exchange_declare,
    c.ExchangeDelete: exchange_delete,
    c.ExchangeQuery: exchange_query,
    c.ExchangeBind: exchange_bind,
    c.ExchangeUnbind: exchange_unbind,
    c.ExchangeBound: exchange_bound,
    c.QueueDeclare: queue_declare,
    c.QueueDelete: queue_delete,
    c.QueuePurge: queue_purge,
    c.QueueQuery: queue_query,
}

__all__ = ["HANDLERS", "AMQPError", "not_implemented"]
