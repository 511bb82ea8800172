"""A delayed exchange's store against a reference: a list of (due, id, body) pending
messages. Any mix of publishes (any delay), cancels (by message id, by id, everything),
reschedules and clock moves: every message is routed exactly once, not before its due time,
in due order (ties in publishing order), unless it was cancelled; the store's listing and
counts match the reference throughout, and the broker-wide timer heap stays small."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.convert.amqp091 import wire_message
from leveret.model.queues.delayed import Selector
from leveret.model.timers import Timers
from leveret.model.vhost import VirtualHost
from leveret.protocol.amqp091._generated.properties import BasicProperties
from tests.queue_support import classic

WALL = 1_700_000_000.0

publish = st.tuples(st.just("publish"), st.integers(0, 5000), st.integers(0, 4))
cancel_mid = st.tuples(st.just("cancel_mid"), st.integers(0, 4), st.just(0))
cancel_id = st.tuples(st.just("cancel_id"), st.integers(0, 40), st.just(0))
cancel_all = st.tuples(st.just("cancel_all"), st.just(0), st.just(0))
reschedule = st.tuples(st.just("reschedule"), st.integers(0, 4), st.integers(0, 3000))
advance = st.tuples(st.just("advance"), st.integers(0, 2500), st.just(0))
steps = st.lists(
    st.one_of(publish, publish, cancel_mid, cancel_id, cancel_all, reschedule, advance, advance),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_store_against_a_reference(program: list[tuple[str, int, int]]) -> None:
    timers = Timers()
    timers.wall_offset = WALL
    vhost = VirtualHost("/", timers=timers)
    vhost.declare_exchange("d", "x-delayed-message", arguments={"x-delayed-type": "fanout"})
    queue = classic(vhost.declare_queue("q", owner=None))
    vhost.bind_queue("q", "d", "", {}, owner=None)
    store = vhost.delay_store(vhost.exchanges["d"])
    assert store is not None
    now_ms = int(WALL * 1000)
    # body -> (due ms, store id, message-id group)
    pending: dict[bytes, tuple[int, int, int]] = {}
    routed: list[tuple[bytes, int]] = []  # (body, the wall ms it was routed at)
    order: dict[bytes, int] = {}
    seen = 0

    def collect() -> None:
        while queue.ready:
            entry = queue.ready.popleft()
            routed.append((entry.message.body, round(timers.wall * 1000)))

    for op, a, b in program:
        if op == "publish":
            seen += 1
            body = b"m%d" % seen
            props = BasicProperties(headers={"x-delay": a}, message_id=f"g{b}").encode()
            message = wire_message("d", "", props, body)
            queues, message = vhost.router.route_publish(vhost.exchanges["d"], "", message)
            for target in queues:
                target.enqueue(message)
            order[body] = seen
            if a > 0:
                entry = store.entries()[-1] if store.pending else None
                ident = max(e.id for e in store.entries()) if entry is not None else 0
                pending[body] = (now_ms + a, ident, b)
        elif op == "cancel_mid":
            gone = {k for k, v in pending.items() if v[2] == a}
            assert store.cancel(Selector(message_id=f"g{a}")) == len(gone)
            for k in gone:
                del pending[k]
        elif op == "cancel_id":
            gone = {k for k, v in pending.items() if v[1] == a}
            assert store.cancel(Selector(ids=[a])) == len(gone)
            for k in gone:
                del pending[k]
        elif op == "cancel_all":
            assert store.cancel(Selector(everything=True)) == len(pending)
            pending.clear()
        elif op == "reschedule":
            chosen = sorted((v[0], v[1], k) for k, v in pending.items() if v[2] == a)
            moved = store.reschedule(Selector(message_id=f"g{a}"), delay=b)
            assert len(moved) == len(chosen)
            for (_due, _old, body), entry in zip(chosen, moved, strict=True):
                pending[body] = (now_ms + b, entry.id, a)
        else:
            timers.expire(timers.now + a / 1000)
            # Several wakes: at most RELEASE_BATCH per wake, the rest a moment later.
            for _ in range(3):
                timers.expire(timers.now + 0.002)
            now_ms = round(timers.wall * 1000)
            due_now = sorted(
                (due, ident, body) for body, (due, ident, _g) in pending.items() if due <= now_ms
            )
            for _due, _ident, body in due_now:
                del pending[body]
            before = len(routed)
            collect()
            # Exactly the due ones (none early, none left behind), in due order.
            assert [body for body, _ in routed[before:]] == [body for _, _, body in due_now]
        collect()
        listed = store.entries()
        assert store.pending == len(pending) == len(listed)
        assert [e.message.body for e in listed] == [
            body for body, _ in sorted(pending.items(), key=lambda kv: (kv[1][0], kv[1][1]))
        ]
        assert len(timers) <= 2 * len(program) + 2
    # Everything that was routed: once each, never early, in due order.
    bodies = [body for body, _ in routed]
    assert len(bodies) == len(set(bodies))
    assert not set(bodies) & set(pending)
