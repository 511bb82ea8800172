"""The ``leveret ctl`` entity verbs as functions of an ``Admin`` over a model broker, no
socket: rabbitmqctl's columns in its order, policies through the runtime parameters, the
refusals, and which verbs a host gets."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from leveret.auth.users import AdminError, UserStore
from leveret.config import Settings
from leveret.model.broker import Broker
from leveret.server.ctl import entities
from leveret.server.ctl.admin import Admin
from leveret.server.parameters import Runtime

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from leveret.server.connection import ConnectionProtocol
    from leveret.server.listeners import Reloadable, TlsContexts


@dataclass
class Host:
    """What ``Admin`` needs of a server (``AdminHost``), plus its runtime parameters."""

    broker: Broker = field(default_factory=Broker)
    settings: Settings = field(default_factory=Settings)
    users: UserStore = field(default_factory=UserStore)
    connections: set[ConnectionProtocol] = field(default_factory=set)
    tls: TlsContexts | None = None
    link_tls: Reloadable | None = None
    listening: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    data_path: Path = Path("/nonexistent")
    runtime: Runtime | None = None
    admin: Admin | None = None


def run(awaitable: Awaitable[Any]) -> Any:
    async def wait() -> Any:
        return await awaitable

    return asyncio.run(wait())


@pytest.fixture
def admin() -> Admin:
    host = Host()
    host.broker.add_vhost("/")
    host.runtime = Runtime(host.broker)
    host.admin = Admin(host)
    return host.admin


def test_list_queues_has_rabbitmqctls_columns_in_order_then_the_node(admin: Admin) -> None:
    vhost = admin.host.broker.vhosts["/"]
    vhost.declare_queue("q", owner=None, durable=True, arguments={"x-max-length": 10})
    rows = run(entities.list_queues(admin, {}))
    # The table's columns, in this order (leveret ctl prints a row's keys as its header).
    assert [list(row) for row in rows] == [
        [
            "name",
            "messages",
            "messages_ready",
            "messages_unacknowledged",
            "consumers",
            "durable",
            "auto_delete",
            "exclusive",
            "arguments",
            "policy",
            "operator_policy",
            "effective_policy_definition",
            "type",
            "state",
            "vhost",
            "node",  # the leader: a cluster's list_queues shows every node's queues
        ]
    ]
    row = rows[0]
    assert row["name"] == "q"
    assert row["durable"] is True
    assert row["arguments"] == {"x-max-length": 10}
    assert (row["policy"], row["operator_policy"]) == ("", "")
    assert (row["type"], row["state"], row["vhost"]) == ("classic", "running", "/")


def test_a_policy_shows_in_list_queues_and_list_policies(admin: Admin) -> None:
    admin.host.broker.vhosts["/"].declare_queue("cq", owner=None)
    args = {"name": "p", "pattern": "^c", "definition": {"max-length": 5}, "priority": 2}
    run(entities.set_policy(admin, args))
    run(entities.set_policy(admin, {**args, "name": "op"}, operator=True))
    [row] = run(entities.list_queues(admin, {}))
    assert (row["policy"], row["operator_policy"]) == ("p", "op")
    [policy] = run(entities.list_policies(admin, {}))
    assert list(policy) == ["vhost", "name", "pattern", "apply-to", "definition", "priority"]
    assert (policy["name"], policy["priority"], policy["apply-to"]) == ("p", 2, "all")
    run(entities.clear_policy(admin, {"name": "p"}))
    assert run(entities.list_policies(admin, {})) == []
    assert [p["name"] for p in run(entities.list_policies(admin, {}, operator=True))] == ["op"]


def test_list_exchanges_and_bindings(admin: Admin) -> None:
    vhost = admin.host.broker.vhosts["/"]
    vhost.declare_exchange("x", "topic")
    vhost.declare_queue("q", owner=None)
    vhost.bind_queue("q", "x", "a.#", {}, owner=None)
    exchanges = {row["name"]: row for row in run(entities.list_exchanges(admin, {}))}
    assert list(exchanges["x"]) == [
        "name",
        "type",
        "durable",
        "auto_delete",
        "internal",
        "arguments",
        "policy",
        "vhost",
    ]
    assert (exchanges["x"]["type"], exchanges["x"]["policy"]) == ("topic", "")
    assert "" in exchanges  # the default exchange, as rabbitmqctl lists it
    bindings = run(entities.list_bindings(admin, {}))
    assert [(b["source_name"], b["destination_name"], b["routing_key"]) for b in bindings] == [
        ("", "q", "q"),
        ("x", "q", "a.#"),
    ]


def test_refusals(admin: Admin) -> None:
    vhost = admin.host.broker.vhosts["/"]
    vhost.declare_queue("s", owner=None, durable=True, arguments={"x-queue-type": "stream"})
    vhost.declare_queue("q", owner=None)
    with pytest.raises(AdminError, match="Virtual host 'nope' does not exist"):
        run(entities.list_queues(admin, {"vhost": "nope"}))
    with pytest.raises(AdminError, match="not supported by stream queues"):
        run(entities.purge_queue(admin, {"queue": "s"}))
    with pytest.raises(AdminError, match="Queue 'gone' in vhost '/' does not exist"):
        run(entities.delete_queue(admin, {"queue": "gone"}))
    with pytest.raises(AdminError, match="Connection 'c' does not exist"):
        run(entities.close_connection(admin, {"connection": "c"}))
    assert run(entities.delete_queue(admin, {"queue": "q"})) == 0
    assert "q" not in vhost.queues


def test_the_definitions_verbs_need_a_host_whose_admin_it_is(admin: Admin) -> None:
    verbs = entities.entity_verbs(admin)
    assert {"export_definitions", "import_definitions", "set_operator_policy"} <= set(verbs)
    other = Admin(admin.host)
    assert "export_definitions" not in entities.entity_verbs(other)
    exported = run(verbs["export_definitions"]({}))
    assert exported["queues"] == []
    assert exported["product_name"] == "Leveret"
