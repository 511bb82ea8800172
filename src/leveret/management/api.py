"""The ``/api`` endpoints, RabbitMQ 3.10's paths, fields, status codes and error bodies:
the routes. The handlers are in ``api_objects.py`` (what is in the vhosts),
``api_admin.py`` (vhosts, users, permissions, limits), ``api_runtime.py`` (policies,
parameters, definitions) and ``api_messages.py`` (Leveret's own: delayed messages, browse,
move, replay); ``api_base.py`` holds what they share.

Reads go straight to the model (synchronous, on the loop); changes go through the same
calls as ``leveret ctl`` (``server/ctl/admin.py``'s verbs for users, vhosts, permissions and
limits, written to ``auth.json``; ``server/parameters.py`` for policies and parameters,
written to ``runtime.json``) or the model's declare/delete calls (journalled by the store).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.management.api_admin import AdminApi
from leveret.management.api_messages import MessagesApi, add_message_routes
from leveret.management.api_objects import ObjectsApi
from leveret.management.api_runtime import RuntimeApi

if TYPE_CHECKING:
    from aiohttp import web

    from leveret.management.plane import Plane


class Api(ObjectsApi, AdminApi, RuntimeApi, MessagesApi):
    """Every endpoint, bound to one ``Plane``."""


def add_routes(app: web.Application, server: Plane) -> None:
    api = Api(server)
    r = app.router
    get, put, delete, post = r.add_get, r.add_put, r.add_delete, r.add_post
    get("/api/overview", api.overview)
    get("/api/cluster-name", api.get_cluster_name)
    put("/api/cluster-name", api.put_cluster_name)
    get("/api/nodes", api.nodes)
    get("/api/nodes/{node}", api.node)
    get("/api/extensions", api.extensions)
    get("/api/auth", api.auth)
    get("/api/whoami", api.whoami)
    get("/api/definitions", api.get_definitions)
    post("/api/definitions", api.post_definitions)
    get("/api/definitions/{vhost}", api.get_definitions)
    post("/api/definitions/{vhost}", api.post_definitions)
    get("/api/connections", api.list_connections)
    get("/api/vhosts/{vhost}/connections", api.list_connections)
    get("/api/connections/{name}", api.get_connection)
    delete("/api/connections/{name}", api.delete_connection)
    get("/api/connections/{name}/channels", api.list_channels)
    get("/api/channels", api.list_channels)
    get("/api/vhosts/{vhost}/channels", api.list_channels)
    get("/api/channels/{channel}", api.get_channel)
    get("/api/consumers", api.list_consumers)
    get("/api/consumers/{vhost}", api.list_consumers)
    get("/api/exchanges", api.list_exchanges)
    get("/api/exchanges/{vhost}", api.list_exchanges)
    get("/api/exchanges/{vhost}/{name}", api.get_exchange)
    put("/api/exchanges/{vhost}/{name}", api.put_exchange)
    delete("/api/exchanges/{vhost}/{name}", api.delete_exchange)
    get("/api/exchanges/{vhost}/{name}/bindings/{side:source|destination}", api.exchange_bindings)
    add_message_routes(app, api)  # Leveret's own: delayed messages, browse, move, replay
    post("/api/exchanges/{vhost}/{name}/publish", api.publish)
    get("/api/queues", api.list_queues)
    get("/api/queues/{vhost}", api.list_queues)
    get("/api/queues/{vhost}/{name}", api.get_queue)
    put("/api/queues/{vhost}/{name}", api.put_queue)
    delete("/api/queues/{vhost}/{name}", api.delete_queue)
    delete("/api/queues/{vhost}/{name}/contents", api.purge_queue)
    post("/api/queues/{vhost}/{name}/actions", api.queue_actions)
    get("/api/queues/{vhost}/{name}/bindings", api.queue_bindings)
    post("/api/queues/{vhost}/{name}/get", api.get_messages)
    get("/api/bindings", api.list_bindings)
    get("/api/bindings/{vhost}", api.list_bindings)
    between = "/api/bindings/{vhost}/e/{source}/{kind:q|e}/{dest}"
    get(between, api.bindings_between)
    post(between, api.add_binding)
    get(between + "/{props}", api.get_binding)
    delete(between + "/{props}", api.delete_binding)
    get("/api/vhosts", api.list_vhosts)
    get("/api/vhosts/{vhost}", api.get_vhost)
    put("/api/vhosts/{vhost}", api.put_vhost)
    delete("/api/vhosts/{vhost}", api.delete_vhost)
    get("/api/vhosts/{vhost}/permissions", api.list_permissions)
    get("/api/vhosts/{vhost}/topic-permissions", api.list_permissions)
    get("/api/users", api.list_users)
    get("/api/users/without-permissions", api.users_without_permissions)
    post("/api/users/bulk-delete", api.bulk_delete_users)
    get("/api/users/{user}", api.get_user)
    put("/api/users/{user}", api.put_user)
    delete("/api/users/{user}", api.delete_user)
    get("/api/users/{user}/permissions", api.list_permissions)
    get("/api/users/{user}/topic-permissions", api.list_permissions)
    for kind in ("permissions", "topic-permissions"):
        get(f"/api/{kind}", api.list_permissions)
        get(f"/api/{kind}/{{vhost}}/{{user}}", api.get_permission)
        put(f"/api/{kind}/{{vhost}}/{{user}}", api.put_permission)
        delete(f"/api/{kind}/{{vhost}}/{{user}}", api.delete_permission)
    for kind in ("policies", "operator-policies"):
        get(f"/api/{kind}", api.list_policies)
        get(f"/api/{kind}/{{vhost}}", api.list_policies)
        get(f"/api/{kind}/{{vhost}}/{{name}}", api.get_policy)
        put(f"/api/{kind}/{{vhost}}/{{name}}", api.put_policy)
        delete(f"/api/{kind}/{{vhost}}/{{name}}", api.delete_policy)
    get("/api/parameters", api.list_parameters)
    get("/api/parameters/{component}", api.list_parameters)
    get("/api/parameters/{component}/{vhost}", api.list_parameters)
    get("/api/parameters/{component}/{vhost}/{name}", api.get_parameter)
    put("/api/parameters/{component}/{vhost}/{name}", api.put_parameter)
    delete("/api/parameters/{component}/{vhost}/{name}", api.delete_parameter)
    get("/api/global-parameters", api.list_global_parameters)
    get("/api/global-parameters/{name}", api.get_global_parameter)
    put("/api/global-parameters/{name}", api.put_global_parameter)
    delete("/api/global-parameters/{name}", api.delete_global_parameter)
    get("/api/vhost-limits", api.list_vhost_limits)
    get("/api/vhost-limits/{vhost}", api.list_vhost_limits)
    put("/api/vhost-limits/{vhost}/{name}", api.put_vhost_limit)
    delete("/api/vhost-limits/{vhost}/{name}", api.delete_vhost_limit)
    get("/api/user-limits", api.list_user_limits)
    get("/api/user-limits/{user}", api.list_user_limits)
    put("/api/user-limits/{user}/{name}", api.put_user_limit)
    delete("/api/user-limits/{user}/{name}", api.delete_user_limit)
    get("/api/aliveness-test/{vhost}", api.aliveness)
    # The pre-3.8 health check that clients still call (amqpstorm's healthchecks.get).
    get("/api/healthchecks/node", api.health_alarms)
    get("/api/healthchecks/node/{node}", api.health_alarms)
    get("/api/health/checks/alarms", api.health_alarms)
    get("/api/health/checks/local-alarms", api.health_alarms)
    get("/api/health/checks/virtual-hosts", api.health_ok)
    get("/api/health/checks/node-is-mirror-sync-critical", api.health_ok)
    get("/api/health/checks/node-is-quorum-critical", api.health_ok)
    get("/api/health/checks/certificate-expiration/{within}/{unit}", api.health_ok)
    get("/api/health/checks/port-listener/{port}", api.health_port)
    get("/api/health/checks/protocol-listener/{protocol}", api.health_protocol)
