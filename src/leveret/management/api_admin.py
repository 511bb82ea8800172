"""Vhosts, users, permissions, topic permissions and limits, through ``server/ctl/admin.py``'s
verbs (written to auth.json before the answer)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret.management.api_base import (
    ApiBase,
    json_reply,
    no_content,
    rates_of,
    read_body,
)
from leveret.management.errors import HttpError, bad_request, not_found
from leveret.management.stats import CHANNEL_COUNTERS, message_stats
from leveret.server.rows import permission_rows, topic_permission_rows, user_row, vhost_row

if TYPE_CHECKING:
    from leveret.management.shapes import Rates


class AdminApi(ApiBase):
    """Vhosts, users, permissions, topic permissions and limits, through the admin verbs
    (``server/ctl/admin.py``)."""

    # -- vhosts, users, permissions, limits (the admin verbs) ---------------------------------

    async def _verb(self, verb: str, args: dict[str, Any]) -> Any:
        reply = await self.host.admin.handle(verb, args)
        if not reply.ok:
            if reply.exit_code in (67, 69) and "does not exist" in reply.error:
                raise not_found()
            raise HttpError(400, "bad_request", reply.error)
        return reply.result

    def _vhost_row(self, name: str, rates: Rates) -> dict[str, Any]:
        info = self.users.vhosts[name]
        vhost = self.broker.vhosts.get(name)
        queues = list(vhost.queues.values()) if vhost is not None else []
        ready = sum(q.message_count for q in queues)
        unacked = sum(q.unacked_count for q in queues)
        series = self.sampler.vhost_series.get(name)
        samples = series.samples if series is not None else None
        running = self.sampler.vhost_totals.get(name)
        octets = self.sampler.vhost_octets.get(name, [0, 0])
        from leveret.management.stats import details

        n = len(CHANNEL_COUNTERS)
        return {
            **vhost_row(info),
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
            "recv_oct": octets[0],
            "send_oct": octets[1],
            "recv_oct_details": details(samples, n, rates.age, rates.incr),
            "send_oct_details": details(samples, n + 1, rates.age, rates.incr),
            "messages_ready_details": details(
                samples, n + 2, rates.lengths_age, rates.lengths_incr
            ),
            "messages_unacknowledged_details": details(
                samples, n + 3, rates.lengths_age, rates.lengths_incr
            ),
            "messages_details": details(samples, n + 4, rates.lengths_age, rates.lengths_incr),
            "message_stats": message_stats(
                CHANNEL_COUNTERS,
                tuple(running) if running is not None else (0,) * n,
                samples,
                rates.age,
                rates.incr,
            ),
        }

    async def list_vhosts(self, request: web.Request) -> web.Response:
        who = self.who(request)
        rates = rates_of(request)
        rows = [self._vhost_row(n, rates) for n in sorted(self.users.vhosts) if who.sees_vhost(n)]
        return self.listing(request, rows)

    async def get_vhost(self, request: web.Request) -> web.Response:
        who = self.who(request)
        name = request.match_info["vhost"]
        if name not in self.users.vhosts:
            raise not_found()
        if not who.sees_vhost(name):
            who.require_vhost(name)
        return json_reply(self._vhost_row(name, rates_of(request)))

    async def put_vhost(self, request: web.Request) -> web.Response:
        who = self.who(request)
        who.require_admin()
        name = request.match_info["vhost"]
        body = await read_body(request)
        existed = name in self.users.vhosts
        tags = body.get("tags", [])
        if isinstance(tags, str):
            tags = [t for t in tags.split(",") if t.strip()]
        await self._verb(
            "add_vhost",
            {
                "vhost": name,
                "description": str(body.get("description", "")),
                "tags": tags,
                "default_queue_type": body.get("default_queue_type"),
            },
        )
        if not existed:
            # RabbitMQ gives the user who created a vhost full permissions in it.
            await self._verb(
                "set_permissions",
                {"user": who.name, "vhost": name, "configure": ".*", "write": ".*", "read": ".*"},
            )
        return no_content() if existed else web.Response(status=201)

    async def delete_vhost(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["vhost"]
        if name not in self.users.vhosts:
            raise not_found()
        await self._verb("delete_vhost", {"vhost": name})
        if self.runtime.changer is None:
            await self.runtime.save()  # its policies and parameters went with it
        return no_content()

    def _user_row(self, name: str) -> dict[str, Any]:
        return user_row(self.users.users[name])

    async def list_users(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        return self.listing(request, [self._user_row(n) for n in sorted(self.users.users)])

    async def users_without_permissions(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        rows = [
            self._user_row(n)
            for n in sorted(self.users.users)
            if not any(u == n for (u, _v) in self.users.permissions)
        ]
        return self.listing(request, rows)

    async def get_user(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["user"]
        if name not in self.users.users:
            raise not_found()
        return json_reply(self._user_row(name))

    async def put_user(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["user"]
        body = await read_body(request)
        existed = name in self.users.users
        tags = body.get("tags", [])
        if isinstance(tags, str):
            tags = [t for t in tags.split(",") if t.strip()]
        if not isinstance(tags, list):
            raise bad_request("tags must be a list or a comma-separated string")
        entry: dict[str, Any] = {"name": name, "tags": tags}
        if "password_hash" in body:
            entry["password_hash"] = body["password_hash"]
            entry["hashing_algorithm"] = body.get(
                "hashing_algorithm", "rabbit_password_hashing_sha256"
            )
        elif "password" in body:
            entry["password"] = body["password"]
        elif existed:
            user = self.users.users[name]
            from leveret.auth import passwords

            entry["password_hash"] = passwords.encode_hash(user.password_hash)
            entry["hashing_algorithm"] = user.hashing_algorithm
        else:
            raise bad_request("password or password_hash must be set")
        if existed:
            entry["limits"] = dict(self.users.users[name].limits)
        await self._verb("import_definitions", {"definitions": {"users": [entry]}})
        return no_content() if existed else web.Response(status=201)

    async def delete_user(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["user"]
        if name not in self.users.users:
            raise not_found()
        await self._verb("delete_user", {"user": name})
        return no_content()

    async def bulk_delete_users(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        body = await read_body(request)
        for name in body.get("users") or []:
            if name in self.users.users:
                await self._verb("delete_user", {"user": name})
        return no_content()

    def _permission_rows(self, user: str | None = None, vhost: str | None = None) -> list[Any]:
        return permission_rows(self.users, user, vhost)

    def _topic_rows(self, user: str | None = None, vhost: str | None = None) -> list[Any]:
        return topic_permission_rows(self.users, user, vhost)

    async def list_permissions(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        topic = request.path.rstrip("/").endswith("topic-permissions")
        user = request.match_info.get("user")
        vhost = request.match_info.get("vhost")
        if user is not None and user not in self.users.users:
            raise not_found()
        if vhost is not None and vhost not in self.users.vhosts:
            raise not_found()
        rows = self._topic_rows(user, vhost) if topic else self._permission_rows(user, vhost)
        return self.listing(request, rows)

    async def get_permission(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, vhost = request.match_info["user"], request.match_info["vhost"]
        topic = "/topic-permissions/" in request.path
        rows = self._topic_rows(user, vhost) if topic else self._permission_rows(user, vhost)
        if not rows:
            raise not_found()
        return json_reply(rows if topic else rows[0])

    async def put_permission(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, vhost = request.match_info["user"], request.match_info["vhost"]
        if user not in self.users.users or vhost not in self.users.vhosts:
            raise bad_request("user or vhost does not exist")
        body = await read_body(request)
        if "/topic-permissions/" in request.path:
            existed = bool(self._topic_rows(user, vhost))
            await self._verb(
                "set_topic_permissions",
                {
                    "user": user,
                    "vhost": vhost,
                    "exchange": str(body.get("exchange", "amq.topic")),
                    "write": str(body.get("write", "")),
                    "read": str(body.get("read", "")),
                },
            )
        else:
            existed = (user, vhost) in self.users.permissions
            await self._verb(
                "set_permissions",
                {
                    "user": user,
                    "vhost": vhost,
                    "configure": str(body.get("configure", "")),
                    "write": str(body.get("write", "")),
                    "read": str(body.get("read", "")),
                },
            )
        return no_content() if existed else web.Response(status=201)

    async def delete_permission(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, vhost = request.match_info["user"], request.match_info["vhost"]
        topic = "/topic-permissions/" in request.path
        rows = self._topic_rows(user, vhost) if topic else self._permission_rows(user, vhost)
        if not rows:
            raise not_found()
        verb = "clear_topic_permissions" if topic else "clear_permissions"
        await self._verb(verb, {"user": user, "vhost": vhost})
        return no_content()

    async def list_vhost_limits(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("vhost")
        if only is not None and only not in self.users.vhosts:
            raise not_found()
        rows = [
            {"vhost": v.name, "value": dict(v.limits)}
            for v in sorted(self.users.vhosts.values(), key=lambda v: v.name)
            if v.limits and (only is None or v.name == only) and who.sees_vhost(v.name)
        ]
        return json_reply(rows)

    async def put_vhost_limit(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        info = self.users.vhosts.get(vhost)
        if info is None:
            raise not_found()
        body = await read_body(request)
        limits = {**info.limits, name: body.get("value")}
        await self._verb("set_vhost_limits", {"vhost": vhost, "limits": json.dumps(limits)})
        return no_content()

    async def delete_vhost_limit(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        info = self.users.vhosts.get(vhost)
        if info is None or name not in info.limits:
            raise not_found()
        limits = {k: v for k, v in info.limits.items() if k != name}
        if limits:
            await self._verb("set_vhost_limits", {"vhost": vhost, "limits": json.dumps(limits)})
        else:
            await self._verb("clear_vhost_limits", {"vhost": vhost})
        return no_content()

    async def list_user_limits(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("user")
        if only is not None and only not in self.users.users:
            raise not_found()
        rows = [
            {"user": u.name, "value": dict(u.limits)}
            for u in sorted(self.users.users.values(), key=lambda u: u.name)
            if u.limits and (only is None or u.name == only) and who.sees_user(u.name)
        ]
        return json_reply(rows)

    async def put_user_limit(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, name = request.match_info["user"], request.match_info["name"]
        if user not in self.users.users:
            raise not_found()
        body = await read_body(request)
        await self._verb(
            "set_user_limits", {"user": user, "limits": json.dumps({name: body.get("value")})}
        )
        return no_content()

    async def delete_user_limit(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        user, name = request.match_info["user"], request.match_info["name"]
        if user not in self.users.users:
            raise not_found()
        await self._verb("clear_user_limits", {"user": user, "limit": name})
        return no_content()
