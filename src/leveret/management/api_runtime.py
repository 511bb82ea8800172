"""Policies, operator policies, parameters, global parameters (``server/parameters.py``,
runtime.json) and the definitions document (``server/definitions.py``)."""

from __future__ import annotations

import json
import time

from aiohttp import web

from leveret.management.api_base import (
    ApiBase,
    as_bool,
    json_reply,
    no_content,
    read_body,
)
from leveret.management.errors import not_found
from leveret.server.definitions import export_all, import_document


class RuntimeApi(ApiBase):
    """Policies, operator policies, parameters, global parameters and definitions."""

    # -- policies and parameters -------------------------------------------------------------

    def _operator(self, request: web.Request) -> bool:
        return request.path.startswith("/api/operator-policies")

    async def list_policies(self, request: web.Request) -> web.Response:
        who = self.who(request)
        only = request.match_info.get("vhost")
        if only is not None:
            self.visible_vhosts(who, only)
        operator = self._operator(request)
        if operator:
            who.require_admin()
        rows = [
            p
            for p in self.runtime.policies(only, operator=operator)
            if who.sees_vhost(str(p["vhost"]))
        ]
        return self.listing(request, rows)

    async def get_policy(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        who.require_vhost(vhost)
        for row in self.runtime.policies(vhost, operator=self._operator(request)):
            if row["name"] == name:
                return json_reply(row)
        raise not_found()

    async def put_policy(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        operator = self._operator(request)
        if operator:
            who.require_admin()
        else:
            who.require_policymaker(vhost)
        self.vhost(vhost)
        body = await read_body(request)
        target = self.broker.vhosts[vhost]
        existed = name in (target.operator_policies if operator else target.policies)
        await self.runtime.change(
            lambda r: r.set_policy(
                vhost,
                name,
                body.get("pattern"),
                body.get("definition"),
                body.get("priority", 0),
                body.get("apply-to", "all"),
                operator=operator,
            )
        )
        return no_content() if existed else web.Response(status=201)

    async def delete_policy(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost, name = request.match_info["vhost"], request.match_info["name"]
        operator = self._operator(request)
        if operator:
            who.require_admin()
        else:
            who.require_policymaker(vhost)
        target = self.vhost(vhost)
        if name not in (target.operator_policies if operator else target.policies):
            raise not_found()
        await self.runtime.change(lambda r: r.clear_policy(vhost, name, operator=operator))
        return no_content()

    async def list_parameters(self, request: web.Request) -> web.Response:
        who = self.who(request)
        component = request.match_info.get("component")
        vhost = request.match_info.get("vhost")
        rows = [
            p
            for p in self.runtime.parameter_rows()
            if (component is None or p["component"] == component)
            and (vhost is None or p["vhost"] == vhost)
            and who.sees_vhost(p["vhost"])
            and who.is_policymaker
        ]
        return self.listing(request, rows)

    async def get_parameter(self, request: web.Request) -> web.Response:
        who = self.who(request)
        m = request.match_info
        who.require_policymaker(m["vhost"])
        key = (m["vhost"], m["component"], m["name"])
        if key not in self.runtime.parameters:
            raise not_found()
        return json_reply(
            {
                "vhost": key[0],
                "component": key[1],
                "name": key[2],
                "value": self.runtime.parameters[key],
            }
        )

    async def put_parameter(self, request: web.Request) -> web.Response:
        who = self.who(request)
        m = request.match_info
        who.require_policymaker(m["vhost"])
        self.vhost(m["vhost"])
        body = await read_body(request)
        existed = (m["vhost"], m["component"], m["name"]) in self.runtime.parameters
        value = body.get("value")
        await self.runtime.change(
            lambda r: r.set_parameter(m["vhost"], m["component"], m["name"], value)
        )
        return no_content() if existed else web.Response(status=201)

    async def delete_parameter(self, request: web.Request) -> web.Response:
        who = self.who(request)
        m = request.match_info
        who.require_policymaker(m["vhost"])
        if (m["vhost"], m["component"], m["name"]) not in self.runtime.parameters:
            raise not_found()
        await self.runtime.change(
            lambda r: r.clear_parameter(m["vhost"], m["component"], m["name"])
        )
        return no_content()

    async def list_global_parameters(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        return self.listing(request, self.runtime.global_rows())

    async def get_global_parameter(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["name"]
        for row in self.runtime.global_rows():
            if row["name"] == name:
                return json_reply(row)
        raise not_found()

    async def put_global_parameter(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["name"]
        body = await read_body(request)
        existed = name in self.runtime.global_parameters
        value = body.get("value")
        await self.runtime.change(lambda r: r.global_parameters.__setitem__(name, value))
        return no_content() if existed else web.Response(status=201)

    async def delete_global_parameter(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        name = request.match_info["name"]
        if name not in self.runtime.global_parameters:
            raise not_found()
        await self.runtime.change(lambda r: r.global_parameters.pop(name, None))
        return no_content()

    # -- definitions ----------------------------------------------------------------------------

    async def get_definitions(self, request: web.Request) -> web.Response:
        who = self.who(request)
        vhost = request.match_info.get("vhost")
        if vhost is not None:
            self.vhost(vhost)
        who.require_admin()
        doc = export_all(self.users, self.runtime, vhost)
        response = json_reply(doc)
        if as_bool(request.query.get("download")) or "download" in request.query:
            stamp = time.strftime("%Y-%m-%d")
            response.headers["Content-Disposition"] = (
                f'attachment; filename="leveret_definitions_{stamp}.json"'
            )
        return response

    async def post_definitions(self, request: web.Request) -> web.Response:
        self.who(request).require_admin()
        vhost = request.match_info.get("vhost")
        if vhost is not None:
            self.vhost(vhost)
        if request.content_type == "multipart/form-data":
            form = await request.post()
            field = form.get("file")
            raw = (
                field.file.read() if isinstance(field, web.FileField) else str(field or "").encode()
            )
            doc = json.loads(raw)
        else:
            doc = await read_body(request)
        async with self.host.admin.lock:
            await import_document(self.host, doc, vhost)
        return no_content()
