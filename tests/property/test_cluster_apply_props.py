"""The watch-apply invariant of ``cluster/apply.py``: whatever order etcd's changes reach a
node's copy in (a node applies its own writes before its watch reports them, a watch
resumed after a break reports some again, a full read lands between changes), the copy
ends the same as one that applied them in revision order, and as one that read the final
state at once.

The changes come from a model of what the cluster's writers do to etcd (one transaction
per operation, each keeping etcd consistent: a queue's deletion takes its bindings, a
vhost's deletion everything in it), drawn by hypothesis; each copy is an ``Applier`` over
its own broker, as a node named ``me`` (queues led by ``other`` stay in its view)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.auth.users import UserStore
from leveret.cluster.apply import Applier
from leveret.cluster.etcd import KeyValue
from leveret.cluster.keys import Layout, binding_digest, encode, encode_arguments
from leveret.model.broker import Broker
from leveret.model.exchange import Exchange
from leveret.server.parameters import Runtime

LAYOUT = Layout("/t/")
VHOSTS = ("/", "v")
EXCHANGES = ("x1", "x2")
QUEUES = ("q1", "q2")
ME, OTHER = "me", "other"


class Etcd:
    """Keys with their revisions, as etcd keeps them, and the events each change made."""

    def __init__(self) -> None:
        self.revision = 1
        self.kvs: dict[bytes, KeyValue] = {}
        self.events: list[tuple[bool, KeyValue]] = []

    def txn(self, changes: list[tuple[bytes, Any]]) -> None:
        self.revision += 1
        for key, value in changes:
            old = self.kvs.get(key)
            if value is None:
                if old is not None:
                    del self.kvs[key]
                    self.events.append((True, KeyValue(key, b"", 0, self.revision, 0, 0)))
                continue
            create = old.create_revision if old is not None else self.revision
            version = old.version + 1 if old is not None else 1
            kv = KeyValue(key, encode(value), create, self.revision, version, 0)
            self.kvs[key] = kv
            self.events.append((False, kv))

    def under(self, prefix: bytes) -> list[bytes]:
        return [k for k in self.kvs if k.startswith(prefix)]


def vhost_value(name: str) -> dict[str, Any]:
    return {"name": name, "limits": [], "metadata": {"description": "", "tags": []}}


def binding_key(vhost: str, source: str, kind: str, dest: str, routing_key: str) -> bytes:
    digest = binding_digest(routing_key, {})
    return LAYOUT.binding(vhost, "e" if kind == "exchange" else "q", dest, source, digest)


def exists(etcd: Etcd, key: bytes) -> bool:
    return key in etcd.kvs


def operate(etcd: Etcd, op: tuple[Any, ...]) -> None:
    """One writer's transaction, made only when etcd's state allows it (as the store's
    comparisons ensure)."""
    kind, vhost = op[0], op[1]
    vkey = LAYOUT.key("auth", "vhosts", vhost)
    if kind == "add_vhost":
        if not exists(etcd, vkey):
            etcd.txn([(vkey, vhost_value(vhost))])
        return
    if not exists(etcd, vkey):
        return
    if kind == "delete_vhost":
        if vhost != "/":
            inside = [
                *etcd.under(LAYOUT.under("entities", "exchanges", vhost)),
                *etcd.under(LAYOUT.under("entities", "queues", vhost)),
                *etcd.under(LAYOUT.under("entities", "bindings", vhost)),
                *etcd.under(LAYOUT.under("runtime", "policies", vhost)),
            ]
            etcd.txn([(vkey, None)] + [(k, None) for k in inside])
    elif kind == "declare_exchange":
        _, _, name, type_name = op
        key = LAYOUT.exchange(vhost, name)
        if not exists(etcd, key):
            value = {"type": type_name, "durable": True, "auto_delete": False}
            etcd.txn([(key, {**value, "internal": False, "arguments": encode_arguments({})})])
    elif kind == "delete_exchange":
        name = op[2]
        key = LAYOUT.exchange(vhost, name)
        if exists(etcd, key):
            mine = [
                k
                for k in etcd.under(LAYOUT.under("entities", "bindings", vhost))
                if _binding(etcd, k)["source"] == name
            ]
            mine += etcd.under(LAYOUT.bindings_to(vhost, "e", name))
            etcd.txn([(key, None)] + [(k, None) for k in mine])
    elif kind == "declare_queue":
        _, _, name, leader, ttl = op
        key = LAYOUT.queue(vhost, name)
        if not exists(etcd, key):
            arguments = {"x-message-ttl": ttl} if ttl is not None else {}
            value = {
                "durable": True,
                "auto_delete": False,
                "exclusive": False,
                "arguments": encode_arguments(arguments),
                "leader": leader,
            }
            etcd.txn([(key, value)])
    elif kind == "delete_queue":
        name = op[2]
        key = LAYOUT.queue(vhost, name)
        if exists(etcd, key):
            bindings = etcd.under(LAYOUT.bindings_to(vhost, "q", name))
            etcd.txn([(key, None)] + [(k, None) for k in bindings])
    elif kind in ("bind", "unbind"):
        _, _, source, dest_kind, dest, routing_key = op
        dest_key = (
            LAYOUT.exchange(vhost, dest) if dest_kind == "exchange" else LAYOUT.queue(vhost, dest)
        )
        key = binding_key(vhost, source, dest_kind, dest, routing_key)
        if kind == "unbind":
            if exists(etcd, key):
                etcd.txn([(key, None)])
        elif exists(etcd, LAYOUT.exchange(vhost, source)) and exists(etcd, dest_key):
            value = {
                "source": source,
                "destination": dest,
                "kind": dest_kind,
                "routing_key": routing_key,
                "arguments": encode_arguments({}),
            }
            etcd.txn([(key, value)])
    elif kind == "set_policy":
        _, _, name, ttl = op
        key = LAYOUT.key("runtime", "policies", vhost, name)
        value = {
            "vhost": vhost,
            "name": name,
            "pattern": "^q",
            "apply-to": "queues",
            "definition": {"message-ttl": ttl},
            "priority": 0,
        }
        etcd.txn([(key, value)])
    elif kind == "clear_policy":
        key = LAYOUT.key("runtime", "policies", vhost, op[2])
        if exists(etcd, key):
            etcd.txn([(key, None)])


def _binding(etcd: Etcd, key: bytes) -> dict[str, Any]:
    import json

    value: dict[str, Any] = json.loads(etcd.kvs[key].value)
    return value


vhosts = st.sampled_from(VHOSTS)
ops = st.one_of(
    st.tuples(st.just("add_vhost"), vhosts),
    st.tuples(st.just("delete_vhost"), vhosts),
    st.tuples(
        st.just("declare_exchange"),
        vhosts,
        st.sampled_from(EXCHANGES),
        st.sampled_from(["direct", "fanout"]),
    ),
    st.tuples(st.just("delete_exchange"), vhosts, st.sampled_from(EXCHANGES)),
    st.tuples(
        st.just("declare_queue"),
        vhosts,
        st.sampled_from(QUEUES),
        st.sampled_from([ME, OTHER]),
        st.sampled_from([None, 1000, 2000]),
    ),
    st.tuples(st.just("delete_queue"), vhosts, st.sampled_from(QUEUES)),
    st.tuples(
        st.sampled_from(["bind", "unbind"]),
        vhosts,
        st.sampled_from(EXCHANGES),
        st.sampled_from(["queue", "exchange"]),
        st.sampled_from(EXCHANGES + QUEUES),
        st.sampled_from(["", "k"]),
    ),
    st.tuples(st.just("set_policy"), vhosts, st.sampled_from(["p1", "p2"]), st.integers(1, 3)),
    st.tuples(st.just("clear_policy"), vhosts, st.sampled_from(["p1", "p2"])),
)


def new_copy() -> Applier:
    broker = Broker(consumer_timeout=None)
    applier = Applier(LAYOUT, ME, broker, UserStore(), Runtime(broker))
    applier.prepare = lambda vhost: setattr(vhost, "auto_delete_exchanges", False)
    for vhost in broker.vhosts.values():
        applier.prepare(vhost)
    return applier


def dump(applier: Applier) -> dict[str, Any]:
    """Everything a copy holds that etcd decides, in a comparable form."""
    out: dict[str, Any] = {"users_vhosts": sorted(applier.users.vhosts)}
    for name, vhost in sorted(applier.broker.vhosts.items()):
        out[name] = {
            "exchanges": sorted((n, x.type_name) for n, x in vhost.exchanges.items()),
            "queues": sorted((n, q.config.message_ttl, q.policy) for n, q in vhost.queues.items()),
            "bindings": sorted(
                (n, type(d).__name__, getattr(d, "name", ""), key)
                for n, x in vhost.exchanges.items()
                for d, key, _args in x.kind.bindings()
            ),
            "policies": sorted(vhost.policies),
        }
    out["view"] = sorted((k, r.leader) for k, r in applier.view.queues.items())
    out["remote_bindings"] = sorted(applier.view.remote_bindings)
    return out


@settings(max_examples=150)
@given(st.lists(ops, max_size=40), st.data())
def test_any_delivery_order_gives_the_copy_revision_order_gives(
    script: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    etcd = Etcd()
    etcd.txn([(LAYOUT.key("auth", "vhosts", "/"), vhost_value("/"))])
    start = list(etcd.kvs.values())
    start_revision = etcd.revision
    etcd.events.clear()
    for op in script:
        operate(etcd, op)
    events = list(etcd.events)

    in_order = new_copy()
    in_order.load_snapshot(start, start_revision)
    for deleted, kv in events:
        in_order.apply_events([(deleted, kv)], kv.mod_revision)

    final = new_copy()
    final.load_snapshot(list(etcd.kvs.values()), etcd.revision)

    shuffled = new_copy()
    shuffled.load_snapshot(start, start_revision)
    order = data.draw(st.permutations(events))
    again = data.draw(st.lists(st.sampled_from(events), max_size=10)) if events else []
    mixed = order + again
    # A full read of the final state may land anywhere in between.
    cut = data.draw(st.integers(0, len(mixed)))
    for deleted, kv in mixed[:cut]:
        shuffled.apply_events([(deleted, kv)], 0)
    if data.draw(st.booleans()):
        shuffled.load_snapshot(list(etcd.kvs.values()), etcd.revision)
    for deleted, kv in mixed[cut:]:
        shuffled.apply_events([(deleted, kv)], 0)

    expected = dump(final)
    assert dump(in_order) == expected
    assert dump(shuffled) == expected
    # Nothing the final state holds is left waiting.
    assert not (in_order.pending & set(etcd.kvs))
    assert not (shuffled.pending & set(etcd.kvs))


def test_predeclared_exchanges_are_in_every_copy() -> None:
    applier = new_copy()
    assert isinstance(applier.broker.vhosts["/"].exchanges["amq.topic"], Exchange)
