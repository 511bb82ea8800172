"""Runtime parameters of the running broker: policies, operator policies, vhost-scoped
parameters and global parameters, and their file.

Policies and operator policies live in the model (``VirtualHost.policies``, applied live by
``VirtualHost.apply_policies``); other parameters (``federation-upstream``, ``shovel``, ...
kept as given, for definitions round trips) and global parameters live here. All of it is
written to ``data_dir/runtime.json`` (``store/parameters_file.py``) before a change is
answered and loaded at boot (``boot_runtime``). The whole definitions document, which
carries these too, is ``definitions.py``'s.

Used by ``server/ctl/`` (``leveret ctl``), ``definitions.py``, ``management/`` and
``server/server.py``.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from leveret.auth.definitions import VHOST_LIMITS_COMPONENT
from leveret.auth.users import AdminError, InvalidArgument
from leveret.model.policies import PolicyError, make_policy
from leveret.store import parameters_file

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping
    from pathlib import Path

    from leveret.model.broker import Broker
    from leveret.model.vhost import VirtualHost

T = TypeVar("T")

OPERATOR_POLICY_COMPONENT = "operator_policy"


class NoSuchPolicy(AdminError):
    exit_code = 69

    def __init__(self, vhost: str, name: str) -> None:
        super().__init__(f"Parameter does not exist: policy '{name}' in vhost '{vhost}'")


@dataclass
class Runtime:
    """Parameters and policies of a broker, and their file."""

    broker: Broker
    path: Path | None = None
    # (vhost, component, name) -> value
    parameters: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    global_parameters: dict[str, Any] = field(default_factory=dict)
    # Where changes go instead of runtime.json on a cluster node (cluster/node.py).
    changer: Callable[[Callable[[Runtime], Any]], Awaitable[Any]] | None = None

    async def change(self, change: Callable[[Runtime], T]) -> T:
        """Make ``change`` (set or clear policies and parameters) and save it; on a
        cluster node it is made in etcd, which every node applies (this one first)."""
        if self.changer is not None:
            return await self.changer(change)  # type: ignore[no-any-return]
        result = change(self)
        await self.save()
        return result

    # -- policies -------------------------------------------------------------------------

    def _vhost(self, name: str) -> VirtualHost:
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise AdminError(f"Virtual host '{name}' does not exist")
        return vhost

    def set_policy(
        self,
        vhost: str,
        name: str,
        pattern: object,
        definition: object,
        priority: object = 0,
        apply_to: object = "all",
        *,
        operator: bool = False,
    ) -> None:
        target = self._vhost(vhost)
        try:
            policy = make_policy(
                vhost, name, pattern, definition, priority, apply_to, operator=operator
            )
        except PolicyError as exc:
            raise InvalidArgument(f"Validation failed\n\n{exc}\n") from None
        table = target.operator_policies if operator else target.policies
        table[name] = policy
        target.apply_policies()

    def clear_policy(self, vhost: str, name: str, *, operator: bool = False) -> None:
        target = self._vhost(vhost)
        table = target.operator_policies if operator else target.policies
        if name not in table:
            raise NoSuchPolicy(vhost, name)
        del table[name]
        target.apply_policies()

    def policies(self, vhost: str | None = None, *, operator: bool = False) -> list[dict[str, Any]]:
        out = []
        for vname, target in sorted(self.broker.vhosts.items()):
            if vhost is not None and vname != vhost:
                continue
            table = target.operator_policies if operator else target.policies
            out += [p.to_json() for _n, p in sorted(table.items())]
        return out

    # -- parameters ----------------------------------------------------------------------

    def set_parameter(self, vhost: str, component: str, name: str, value: object) -> None:
        self._vhost(vhost)
        if component == VHOST_LIMITS_COMPONENT:
            raise InvalidArgument("vhost limits are set through /api/vhost-limits")
        self.parameters[(vhost, component, name)] = value

    def clear_parameter(self, vhost: str, component: str, name: str) -> None:
        if self.parameters.pop((vhost, component, name), None) is None:
            raise AdminError(f"Parameter does not exist: {component} '{name}' in '{vhost}'")

    def parameter_rows(self) -> list[dict[str, Any]]:
        return [
            {"vhost": v, "component": c, "name": n, "value": value}
            for (v, c, n), value in sorted(self.parameters.items())
            if v in self.broker.vhosts
        ]

    def global_rows(self) -> list[dict[str, Any]]:
        rows = [{"name": n, "value": v} for n, v in sorted(self.global_parameters.items())]
        if "cluster_name" not in self.global_parameters:
            rows.insert(0, {"name": "cluster_name", "value": cluster_name(self)})
        return rows

    # -- persistence ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "policies": self.policies(),
            "operator_policies": self.policies(operator=True),
            "parameters": self.parameter_rows(),
            "global_parameters": [
                {"name": n, "value": v} for n, v in sorted(self.global_parameters.items())
            ],
        }

    def load(self, doc: Mapping[str, Any]) -> None:
        """Apply a runtime document (boot) or the runtime part of definitions."""
        for entry in doc_entries(doc, "global_parameters"):
            if isinstance(entry.get("name"), str):
                self.global_parameters[entry["name"]] = entry.get("value")
        for entry in doc_entries(doc, "parameters"):
            component = entry.get("component")
            vhost, name = entry.get("vhost"), entry.get("name")
            if not (isinstance(vhost, str) and isinstance(name, str)):
                raise InvalidArgument("definitions: a parameter needs a vhost and a name")
            if component == VHOST_LIMITS_COMPONENT:
                continue  # the auth registry's (auth/definitions.py)
            if component == OPERATOR_POLICY_COMPONENT and isinstance(entry.get("value"), dict):
                value = entry["value"]
                self.broker.add_vhost(vhost)
                self.set_policy(
                    vhost,
                    name,
                    value.get("pattern"),
                    value.get("definition"),
                    value.get("priority", 0),
                    value.get("apply-to", "all"),
                    operator=True,
                )
                continue
            if isinstance(component, str):
                self.broker.add_vhost(vhost)
                self.parameters[(vhost, component, name)] = entry.get("value")
        for key, operator in (("policies", False), ("operator_policies", True)):
            for entry in doc_entries(doc, key):
                vhost, name = entry.get("vhost"), entry.get("name")
                if not (isinstance(vhost, str) and isinstance(name, str)):
                    raise InvalidArgument(f"definitions: {key}: a vhost and a name are needed")
                self.broker.add_vhost(vhost)
                self.set_policy(
                    vhost,
                    name,
                    entry.get("pattern"),
                    entry.get("definition"),
                    entry.get("priority", 0),
                    entry.get("apply-to", "all"),
                    operator=operator,
                )

    async def save(self) -> None:
        """Write the file (in a thread: the loop keeps serving meanwhile)."""
        if self.path is None:
            return
        try:
            await asyncio.to_thread(parameters_file.save, self.path, self.snapshot())
        except OSError as exc:
            raise AdminError(f"change made but not saved: {exc.strerror}") from None


def doc_entries(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The objects listed under ``key`` of a definitions document."""
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise InvalidArgument(f"definitions: '{key}' must be a list of objects")
    return value


def runtime_of(host: object) -> Runtime:
    """The parameters of a running server (``server.server.Server.runtime``); an embedding
    host may have none."""
    runtime = getattr(host, "runtime", None)
    if runtime is None:
        raise AdminError("this broker has no runtime parameters")
    return runtime  # type: ignore[no-any-return]


def cluster_name(runtime: Runtime) -> str:
    name = runtime.global_parameters.get("cluster_name")
    return name if isinstance(name, str) else f"leveret@{socket.gethostname()}"


def boot_runtime(runtime: Runtime, data_dir: Path) -> None:
    """Load ``runtime.json`` (policies apply to the recovered queues at once)."""
    path = data_dir / parameters_file.RUNTIME_FILE
    runtime.path = path
    doc = parameters_file.load(path)
    if doc is not None:
        runtime.load(doc)
