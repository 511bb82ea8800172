"""The access API at every check point, against RabbitMQ 3.10.8's answers.

Each refused case's reply code and text was recorded from the RabbitMQ running next to the
project (pika against 127.0.0.1:5672, 2026-11) with the same users, patterns and names as
below: user ``lvprobe`` with configure/write/read ``^cfg`` / ``^wr`` / ``^rd``, user
``lvprobe2`` with ``.*`` / ``^(amq\\.topic|okw.*)`` / ``^(amq\\.topic|okr.*)``, both in vhost
``lvprobe`` with topic permissions on ``amq.topic``: write ``^w\\.{username}``, read
``^r\\.{vhost}``. The RabbitMQ operation that gave each text is in the case's comment.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from leveret.auth.access import Access
from leveret.auth.users import IMPERSONATOR, UserStore
from leveret.errors import AccessRefused, AMQPError, PreconditionFailed

# Left out of the compiled pass (scripts/test): auth/ is not compiled.
pytestmark = pytest.mark.pure_only

V = "lvprobe"


def _store() -> UserStore:
    store = UserStore()
    store.add_vhost(V)
    store.add_user("lvprobe", "probepw")
    store.add_user("lvprobe2", "probepw2")
    store.set_permissions("lvprobe", V, "^cfg", "^wr", "^rd")
    store.set_permissions("lvprobe2", V, ".*", r"^(amq\.topic|okw.*)", r"^(amq\.topic|okr.*)")
    for user in ("lvprobe", "lvprobe2"):
        store.set_topic_permissions(user, V, "amq.topic", r"^w\.{username}", r"^r\.{vhost}")
    return store


def _access(user: str = "lvprobe") -> Access:
    store = _store()
    return Access(store, store.users[user], V)


def refused(user: str, what: str) -> str:
    return f"access to {what} in vhost '{V}' refused for user '{user}'"


Check = Callable[[Access], None]

# (case id, user, the check the front end makes, RabbitMQ's reply code, RabbitMQ's text)
REFUSED: list[tuple[str, str, Check, int, str]] = [
    # channel.exchange_declare("x1", "direct")
    (
        "exchange.declare",
        "lvprobe",
        lambda a: a.exchange_declare("x1"),
        403,
        refused("lvprobe", "exchange 'x1'"),
    ),
    # exchange_declare("amq.foo") without configure: the permission check comes first
    (
        "exchange.declare amq. no configure",
        "lvprobe",
        lambda a: a.exchange_declare("amq.foo"),
        403,
        refused("lvprobe", "exchange 'amq.foo'"),
    ),
    # exchange_declare("amq.foo") with configure on everything
    (
        "exchange.declare amq. prefix",
        "lvprobe2",
        lambda a: a.exchange_declare("amq.foo"),
        403,
        "exchange name 'amq.foo' contains reserved prefix 'amq.*'",
    ),
    # exchange_declare("", ...)
    (
        "exchange.declare default",
        "lvprobe",
        lambda a: a.exchange_declare(""),
        403,
        "operation not permitted on the default exchange",
    ),
    # exchange_declare("cfgae", arguments={"alternate-exchange": "zz"}): read on the exchange
    (
        "exchange.declare ae read",
        "lvprobe",
        lambda a: a.exchange_declare("cfgae", alternate_exchange="zz"),
        403,
        refused("lvprobe", "exchange 'cfgae'"),
    ),
    # exchange_declare("okrx", arguments={"alternate-exchange": "nope"}): write on the AE
    (
        "exchange.declare ae write",
        "lvprobe2",
        lambda a: a.exchange_declare("okrx", alternate_exchange="nope"),
        403,
        refused("lvprobe2", "exchange 'nope'"),
    ),
    # exchange_delete("amq.direct")
    (
        "exchange.delete amq.",
        "lvprobe",
        lambda a: a.exchange_delete("amq.direct"),
        403,
        f"deletion of system exchange 'amq.direct' in vhost '{V}' not allowed",
    ),
    # exchange_delete("")
    (
        "exchange.delete default",
        "lvprobe2",
        lambda a: a.exchange_delete(""),
        403,
        "operation not permitted on the default exchange",
    ),
    # exchange_delete("x-nonexist"): checked whether or not it exists
    (
        "exchange.delete",
        "lvprobe",
        lambda a: a.exchange_delete("x-nonexist"),
        403,
        refused("lvprobe", "exchange 'x-nonexist'"),
    ),
    # queue_declare("q1")
    (
        "queue.declare",
        "lvprobe",
        lambda a: a.queue_declare("q1"),
        403,
        refused("lvprobe", "queue 'q1'"),
    ),
    # queue_declare("", exclusive=True): the generated name is checked
    (
        "queue.declare server-named",
        "lvprobe",
        lambda a: a.queue_declare("amq.gen-5G59QuAz9VeCkY_2OsvuBA", server_named=True),
        403,
        refused("lvprobe", "queue 'amq.gen-5G59QuAz9VeCkY_2OsvuBA'"),
    ),
    # queue_declare("amq.x"): the name check comes before the permission check
    (
        "queue.declare amq.",
        "lvprobe",
        lambda a: a.queue_declare("amq.x"),
        403,
        "queue name 'amq.x' contains reserved prefix 'amq.*'",
    ),
    # queue_declare("cfgdlx", arguments={"x-dead-letter-exchange": "dl"}): read on the queue
    (
        "queue.declare dlx read",
        "lvprobe",
        lambda a: a.queue_declare("cfgdlx", dead_letter_exchange="dl"),
        403,
        refused("lvprobe", "queue 'cfgdlx'"),
    ),
    # queue_declare("okrq", arguments={"x-dead-letter-exchange": "nope"}): write on the DLX
    (
        "queue.declare dlx write",
        "lvprobe2",
        lambda a: a.queue_declare("okrq", dead_letter_exchange="nope"),
        403,
        refused("lvprobe2", "exchange 'nope'"),
    ),
    # queue_declare("okrq2", arguments={"x-dead-letter-exchange": ""})
    (
        "queue.declare dlx default",
        "lvprobe2",
        lambda a: a.queue_declare("okrq2", dead_letter_exchange=""),
        403,
        refused("lvprobe2", "exchange 'amq.default'"),
    ),
    # queue_delete("q1")
    (
        "queue.delete",
        "lvprobe",
        lambda a: a.queue_delete("q1"),
        403,
        refused("lvprobe", "queue 'q1'"),
    ),
    # queue_purge("cfgq")
    (
        "queue.purge",
        "lvprobe",
        lambda a: a.queue_purge("cfgq"),
        403,
        refused("lvprobe", "queue 'cfgq'"),
    ),
    # queue_bind("cfgq", "amq.direct", "k"): write on the queue
    (
        "queue.bind write",
        "lvprobe",
        lambda a: a.queue_bind("cfgq", "amq.direct", "k", exchange_type="direct"),
        403,
        refused("lvprobe", "queue 'cfgq'"),
    ),
    # queue_bind("wrq", "", "k")
    (
        "queue.bind default",
        "lvprobe",
        lambda a: a.queue_bind("wrq", "", "k", exchange_type="direct"),
        403,
        "operation not permitted on the default exchange",
    ),
    # queue_bind("wrq", "amq.direct", "k"): read on the exchange
    (
        "queue.bind read",
        "lvprobe",
        lambda a: a.queue_bind("wrq", "amq.direct", "k", exchange_type="direct"),
        403,
        refused("lvprobe", "exchange 'amq.direct'"),
    ),
    # queue_unbind("cfgq", "amq.direct", "k")
    (
        "queue.unbind write",
        "lvprobe",
        lambda a: a.queue_unbind("cfgq", "amq.direct", "k", exchange_type="direct"),
        403,
        refused("lvprobe", "queue 'cfgq'"),
    ),
    # exchange_bind("cfgx", "amq.direct", "k"): write on the destination
    (
        "exchange.bind write",
        "lvprobe",
        lambda a: a.exchange_bind("cfgx", "amq.direct", "k", source_type="direct"),
        403,
        refused("lvprobe", "exchange 'cfgx'"),
    ),
    # exchange_bind("wrx", "amq.direct", "k"): read on the source
    (
        "exchange.bind read",
        "lvprobe",
        lambda a: a.exchange_bind("wrx", "amq.direct", "k", source_type="direct"),
        403,
        refused("lvprobe", "exchange 'amq.direct'"),
    ),
    # exchange_unbind("cfgx", "amq.direct", "k")
    (
        "exchange.unbind write",
        "lvprobe",
        lambda a: a.exchange_unbind("cfgx", "amq.direct", "k", source_type="direct"),
        403,
        refused("lvprobe", "exchange 'cfgx'"),
    ),
    # basic_get("cfgq")
    (
        "basic.get",
        "lvprobe",
        lambda a: a.basic_get("cfgq"),
        403,
        refused("lvprobe", "queue 'cfgq'"),
    ),
    # basic_consume("cfgq")
    (
        "basic.consume",
        "lvprobe",
        lambda a: a.basic_consume("cfgq"),
        403,
        refused("lvprobe", "queue 'cfgq'"),
    ),
    # basic_publish("", "cfgq")
    (
        "basic.publish default",
        "lvprobe",
        lambda a: a.basic_publish("", "cfgq", exchange_type="direct"),
        403,
        refused("lvprobe", "exchange 'amq.default'"),
    ),
    # basic_publish("amq.direct", "cfgq")
    (
        "basic.publish",
        "lvprobe",
        lambda a: a.basic_publish("amq.direct", "cfgq", exchange_type="direct"),
        403,
        refused("lvprobe", "exchange 'amq.direct'"),
    ),
    # basic_publish("nope", "k"): checked before the exchange is looked up
    (
        "basic.publish unknown",
        "lvprobe",
        lambda a: a.basic_publish("nope", "k", exchange_type=None),
        403,
        refused("lvprobe", "exchange 'nope'"),
    ),
    # basic_publish("amq.topic", "x.y")
    (
        "topic write",
        "lvprobe2",
        lambda a: a.basic_publish("amq.topic", "x.y", exchange_type="topic"),
        403,
        f"access to topic 'x.y' in exchange 'amq.topic' in vhost '{V}' refused for user 'lvprobe2'",
    ),
    # basic_publish("amq.topic", "w.lvprobe.y"): {username} is lvprobe2 here
    (
        "topic write other user",
        "lvprobe2",
        lambda a: a.basic_publish("amq.topic", "w.lvprobe.y", exchange_type="topic"),
        403,
        f"access to topic 'w.lvprobe.y' in exchange 'amq.topic' in vhost '{V}' refused for "
        "user 'lvprobe2'",
    ),
    # queue_bind("okwq", "amq.topic", "zzz")
    (
        "topic read bind",
        "lvprobe2",
        lambda a: a.queue_bind("okwq", "amq.topic", "zzz", exchange_type="topic"),
        403,
        f"access to topic 'zzz' in exchange 'amq.topic' in vhost '{V}' refused for user 'lvprobe2'",
    ),
    # queue_unbind("okwq", "amq.topic", "zzz")
    (
        "topic read unbind",
        "lvprobe2",
        lambda a: a.queue_unbind("okwq", "amq.topic", "zzz", exchange_type="topic"),
        403,
        f"access to topic 'zzz' in exchange 'amq.topic' in vhost '{V}' refused for user 'lvprobe2'",
    ),
    # exchange_bind("okwx", "amq.topic", "zzz")
    (
        "topic read exchange.bind",
        "lvprobe2",
        lambda a: a.exchange_bind("okwx", "amq.topic", "zzz", source_type="topic"),
        403,
        f"access to topic 'zzz' in exchange 'amq.topic' in vhost '{V}' refused for user 'lvprobe2'",
    ),
    # basic_publish(..., properties=BasicProperties(user_id="bob"))
    (
        "user_id",
        "lvprobe2",
        lambda a: a.check_user_id("bob"),
        406,
        "user_id property set to 'bob' but authenticated user was 'lvprobe2'",
    ),
]

ALLOWED: list[tuple[str, str, Check]] = [
    # exchange_declare("cfgx", "direct")
    ("exchange.declare", "lvprobe", lambda a: a.exchange_declare("cfgx")),
    # exchange_declare("cfgx", passive=True) with no read or write on it: never checked
    ("exchange.declare passive", "lvprobe", lambda a: a.exchange_declare("x1", passive=True)),
    # queue_declare("cfgq")
    ("queue.declare", "lvprobe", lambda a: a.queue_declare("cfgq")),
    # queue_declare("q1", passive=True): never checked
    ("queue.declare passive", "lvprobe", lambda a: a.queue_declare("q1", passive=True)),
    # queue_declare("cfgamq"): an existing queue is not asked for its DLX again
    (
        "queue.declare exists",
        "lvprobe",
        lambda a: a.queue_declare("cfgdlx", exists=True, dead_letter_exchange="dl"),
    ),
    # basic_consume("amq.rabbitmq.reply-to", auto_ack=True)
    ("basic.consume reply-to", "lvprobe", lambda a: a.basic_consume("amq.rabbitmq.reply-to")),
    ("queue.declare reply-to", "lvprobe", lambda a: a.queue_declare("amq.rabbitmq.reply-to.abc")),
    # basic_publish("amq.topic", "w.lvprobe2.y")
    (
        "topic write",
        "lvprobe2",
        lambda a: a.basic_publish("amq.topic", "w.lvprobe2.y", exchange_type="topic"),
    ),
    # queue_bind("okwq", "amq.topic", "r.lvprobe.#")
    (
        "topic read",
        "lvprobe2",
        lambda a: a.queue_bind("okwq", "amq.topic", "r.lvprobe.#", exchange_type="topic"),
    ),
    # A topic exchange without topic permissions: any routing key.
    (
        "topic no permissions",
        "lvprobe2",
        lambda a: a.basic_publish("okwtopic", "anything", exchange_type="topic"),
    ),
    # A direct exchange: routing keys are not topic-checked even on amq.topic's patterns.
    (
        "not topic",
        "lvprobe2",
        lambda a: a.basic_publish("okwdirect", "x.y", exchange_type="direct"),
    ),
    # A binding from a missing exchange: no topic check (the model answers 404).
    (
        "bind missing exchange",
        "lvprobe2",
        lambda a: a.queue_bind("okwq", "amq.topic", "zzz", exchange_type=None),
    ),
    ("user_id own", "lvprobe2", lambda a: a.check_user_id("lvprobe2")),
    ("user_id absent", "lvprobe2", lambda a: a.check_user_id(None)),
]


@pytest.mark.parametrize(
    ("user", "check", "code", "text"),
    [pytest.param(*case[1:], id=case[0]) for case in REFUSED],
)
def test_refused_as_rabbitmq(user: str, check: Check, code: int, text: str) -> None:
    access = _access(user)
    with pytest.raises(AMQPError) as info:
        check(access)
    assert (info.value.reply_code, info.value.reply_text) == (code, text)
    assert not info.value.hard  # a channel error, as RabbitMQ's 403/406 here


@pytest.mark.parametrize(
    ("user", "check"), [pytest.param(*case[1:], id=case[0]) for case in ALLOWED]
)
def test_allowed_as_rabbitmq(user: str, check: Check) -> None:
    check(_access(user))


def test_full_text_is_rabbitmqs() -> None:
    with pytest.raises(AccessRefused) as info:
        _access().basic_get("q1")
    assert info.value.full_text() == (
        "ACCESS_REFUSED - access to queue 'q1' in vhost 'lvprobe' refused for user 'lvprobe'"
    )


def test_single_check_points() -> None:
    access = _access()
    access.configure_queue("cfgq")
    access.configure_exchange("cfgx")
    access.write_exchange("wrx")
    access.write_queue("wrq")
    access.read_queue("rdq")
    access.read_exchange("rdx")
    for check, name in [
        (access.configure_queue, "wrq"),
        (access.configure_exchange, "rdx"),
        (access.write_exchange, "cfgx"),
        (access.write_queue, "rdq"),
        (access.read_queue, "cfgq"),
        (access.read_exchange, "wrx"),
    ]:
        with pytest.raises(AccessRefused):
            check(name)


def test_no_permissions_in_the_vhost_means_nothing() -> None:
    store = _store()
    store.add_vhost("other")
    access = Access(store, store.users["lvprobe2"], "other")
    with pytest.raises(AccessRefused, match="in vhost 'other'"):
        access.basic_get("okrq")


def test_empty_pattern_means_only_the_empty_name() -> None:
    store = _store()
    store.set_permissions("lvprobe", V, "", "", "")
    access = Access(store, store.users["lvprobe"], V)
    with pytest.raises(AccessRefused):
        access.configure_queue("cfgq")
    # RabbitMQ matches the default exchange as "amq.default", which ^$ does not match.
    with pytest.raises(AccessRefused, match=r"amq\.default"):
        access.write_exchange("")


def test_changes_apply_to_open_connections_at_once() -> None:
    store = _store()
    access = Access(store, store.users["lvprobe"], V)
    access.basic_get("rdq")
    store.set_permissions("lvprobe", V, "^cfg", "^wr", "^nothing")
    with pytest.raises(AccessRefused):
        access.basic_get("rdq")
    store.clear_permissions("lvprobe", V)
    with pytest.raises(AccessRefused):
        access.configure_queue("cfgq")


def test_topic_variables_are_not_escaped() -> None:
    store = UserStore()
    store.add_vhost("v.x")
    store.add_user("a.b", "pw")
    store.set_permissions("a.b", "v.x", ".*", ".*", ".*")
    store.set_topic_permissions("a.b", "v.x", "t", "^{username}$", "^{vhost}$")
    access = Access(store, store.users["a.b"], "v.x")
    access.topic_write("t", "a.b")
    access.topic_write("t", "aXb")  # '.' stays a regex wildcard, as in RabbitMQ
    access.topic_read("t", "v.x")
    with pytest.raises(AccessRefused):
        access.topic_read("t", "other")


def test_a_user_name_that_breaks_the_pattern_grants_nothing() -> None:
    store = UserStore()
    store.add_vhost("v")
    store.add_user("a(", "pw")
    store.set_permissions("a(", "v", ".*", ".*", ".*")
    store.set_topic_permissions("a(", "v", "t", "^{username}", ".*")
    with pytest.raises(AccessRefused):
        Access(store, store.users["a("], "v").topic_write("t", "a(")


def test_impersonator_may_set_any_user_id() -> None:
    store = _store()
    store.set_user_tags("lvprobe2", [IMPERSONATOR])
    Access(store, store.users["lvprobe2"], V).check_user_id("bob")


def test_queue_limit() -> None:
    store = _store()
    store.set_vhost_limits(V, '{"max-queues": 1}')
    access = Access(store, store.users["lvprobe2"], V)
    access.queue_declare("okr_limit_q0", queue_count=0)
    # queue_declare("okr_limit_q1") with the vhost's one queue there already
    with pytest.raises(PreconditionFailed) as info:
        access.queue_declare("okr_limit_q1", queue_count=3)
    assert info.value.reply_text == (
        "cannot declare queue 'okr_limit_q1': queue limit in vhost 'lvprobe' (1) is reached"
    )
    access.queue_declare("okr_limit_q1", exists=True, queue_count=3)  # redeclaring is fine
