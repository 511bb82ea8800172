"""Users, vhosts, permissions and limits for access-control tests, on either broker: a
Leveret process of the test's own, set up with ``leveret ctl import_definitions`` and
``set_*_limits``, or, when ``LEVERET_TEST_AMQP_URL`` points at another broker, that broker
set up through RabbitMQ's management HTTP API (``LEVERET_TEST_RABBITMQ_API``, by default
``http://guest:guest@<host>:15672``). The same cases then run against both, so the texts
they expect are shown to be RabbitMQ's; what a target made is deleted when it closes.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import pytest

from tests.integration.conftest import URL_ENV, Broker
from tests.integration.ctl_support import new_data_dir, ok, start

if TYPE_CHECKING:
    from collections.abc import Iterator

API_ENV = "LEVERET_TEST_RABBITMQ_API"


@dataclass
class Definitions:
    """The auth part of a RabbitMQ definitions document, built up by a test."""

    vhosts: list[str] = field(default_factory=list)
    # name -> (password, tags)
    users: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    # (user, vhost, configure, write, read)
    permissions: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    # (user, vhost, exchange, write, read)
    topic_permissions: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {
            "vhosts": [{"name": v} for v in self.vhosts],
            "users": [
                {"name": name, "password": password, "tags": list(tags)}
                for name, (password, tags) in self.users.items()
            ],
            "permissions": [
                {"user": u, "vhost": v, "configure": c, "write": w, "read": r}
                for u, v, c, w, r in self.permissions
            ],
            "topic_permissions": [
                {"user": u, "vhost": v, "exchange": x, "write": w, "read": r}
                for u, v, x, w, r in self.topic_permissions
            ],
        }


class Target:
    """A broker and the way to set up its users."""

    broker: Broker

    def apply(self, definitions: Definitions) -> None:
        raise NotImplementedError

    def set_vhost_limits(self, vhost: str, limits: dict[str, int]) -> None:
        raise NotImplementedError

    def set_user_limits(self, user: str, limits: dict[str, int]) -> None:
        raise NotImplementedError

    def clear_permissions(self, user: str, vhost: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class LeveretTarget(Target):
    """A Leveret process of the test's own, set up with ``leveret ctl``."""

    def __init__(self, *args: str) -> None:
        self.data = new_data_dir()
        self.broker = start(self.data, *args)

    def apply(self, definitions: Definitions) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(definitions.document(), f)
        try:
            ok(self.data, "import_definitions", f.name)
        finally:
            Path(f.name).unlink()

    def set_vhost_limits(self, vhost: str, limits: dict[str, int]) -> None:
        ok(self.data, "set_vhost_limits", "-p", vhost, json.dumps(limits))

    def set_user_limits(self, user: str, limits: dict[str, int]) -> None:
        ok(self.data, "set_user_limits", user, json.dumps(limits))

    def clear_permissions(self, user: str, vhost: str) -> None:
        ok(self.data, "clear_permissions", "-p", vhost, user)

    def close(self) -> None:
        self.broker.stop()


class RabbitTarget(Target):
    """The external broker, set up through RabbitMQ's management HTTP API."""

    def __init__(self, url: str, api: str) -> None:
        parts = urlsplit(url)
        self.broker = Broker(host=parts.hostname or "127.0.0.1", port=parts.port or 5672)
        api_parts = urlsplit(api)
        self.base = f"{api_parts.scheme}://{api_parts.hostname}:{api_parts.port or 15672}/api"
        token = f"{api_parts.username or 'guest'}:{api_parts.password or 'guest'}"
        self.auth = "Basic " + base64.b64encode(token.encode()).decode()
        self.vhosts: list[str] = []
        self.users: list[str] = []

    def _call(self, method: str, path: str, body: object = None) -> None:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - the test's own http URL
            self.base + path,
            data=data,
            method=method,
            headers={"Authorization": self.auth, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass

    def apply(self, definitions: Definitions) -> None:
        for vhost in definitions.vhosts:
            self._call("PUT", f"/vhosts/{quote(vhost, safe='')}", {})
            self.vhosts.append(vhost)
        for name, (password, tags) in definitions.users.items():
            body = {"password": password, "tags": ",".join(tags)}
            self._call("PUT", f"/users/{quote(name, safe='')}", body)
            self.users.append(name)
        for user, vhost, configure, write, read in definitions.permissions:
            body = {"configure": configure, "write": write, "read": read}
            self._call("PUT", f"/permissions/{quote(vhost, safe='')}/{quote(user, safe='')}", body)
        for user, vhost, exchange, write, read in definitions.topic_permissions:
            body = {"exchange": exchange, "write": write, "read": read}
            path = f"/topic-permissions/{quote(vhost, safe='')}/{quote(user, safe='')}"
            self._call("PUT", path, body)

    def set_vhost_limits(self, vhost: str, limits: dict[str, int]) -> None:
        for name, value in limits.items():
            self._call("PUT", f"/vhost-limits/{quote(vhost, safe='')}/{name}", {"value": value})

    def set_user_limits(self, user: str, limits: dict[str, int]) -> None:
        for name, value in limits.items():
            self._call("PUT", f"/user-limits/{quote(user, safe='')}/{name}", {"value": value})

    def clear_permissions(self, user: str, vhost: str) -> None:
        self._call("DELETE", f"/permissions/{quote(vhost, safe='')}/{quote(user, safe='')}")

    def close(self) -> None:
        for vhost in self.vhosts:
            self._call("DELETE", f"/vhosts/{quote(vhost, safe='')}")
        for user in self.users:
            self._call("DELETE", f"/users/{quote(user, safe='')}")


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    """Leveret (a process of the module's own), or the external broker of URL_ENV."""
    url = os.environ.get(URL_ENV)
    made: Target
    if url:
        host = urlsplit(url).hostname or "127.0.0.1"
        api = os.environ.get(API_ENV, f"http://guest:guest@{host}:15672")
        made = RabbitTarget(url, api)
        try:
            made._call("GET", "/overview")
        except (OSError, urllib.error.URLError) as exc:
            pytest.skip(f"no management API at {api} to set up users: {exc}")
    else:
        made = LeveretTarget()
    try:
        yield made
    finally:
        made.close()
