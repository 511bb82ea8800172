"""pytest plugin for aio-pika's and aiormq's suites: their "containers" are the harness's broker.

Both suites start RabbitMQ in Docker through ``tests/docker_client.py``. This plugin, loaded
before their conftest (``-p conformance_docker``), imports that module and replaces Docker
with the broker the harness chose: ``ContainerInfo.ports`` maps 5672/tcp to
``CONFORMANCE_AMQP_PORT`` and 5671/tcp (TLS) to ``CONFORMANCE_AMQPS_PORT`` (a closed port
when the target has no TLS listener). The suites' test files are not changed.

aiormq's sdist ships tests that use the ``rabbitmq_container`` and ``amqp_direct_url``
fixtures without the conftest that defines them; this plugin defines both (a conftest that
does define them, as aio-pika's does, takes precedence over a plugin's).
"""

from __future__ import annotations

import importlib
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest


def _host() -> str:
    return os.environ.get("CONFORMANCE_AMQP_HOST", "127.0.0.1")


def _ports() -> dict[str, int]:
    return {
        "5672/tcp": int(os.environ["CONFORMANCE_AMQP_PORT"]),
        "5671/tcp": int(os.environ.get("CONFORMANCE_AMQPS_PORT", "1")),
    }


def _patch(module: Any) -> None:
    host = _host()
    ports = _ports()
    info_cls = module.ContainerInfo

    class HarnessBroker:
        """Stands in for ``DockerClient``: every image is the harness's broker."""

        def __init__(self, *_args: Any, **_kwargs: Any) -> None:
            pass

        def run(self, image: str, ports: list[str], **_kwargs: Any) -> Any:
            return info_cls(id=uuid.uuid4().hex, host=host, ports=dict(ports_map(ports)))

        def kill(self, container_id: str) -> None:
            pass

        def remove(self, container_id: str) -> None:
            pass

    def ports_map(wanted: list[str]) -> list[tuple[str, int]]:
        return [(p, ports[p]) for p in wanted if p in ports]

    module.DockerClient = HarnessBroker
    module.check_docker_available = lambda: None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list[str]) -> None:
    # Before the suite's conftest.py is imported: it binds DockerClient by name. The harness
    # runs pytest from the suite's root, which holds the ``tests`` package.
    root = str(Path.cwd())
    if root not in sys.path:
        sys.path.insert(0, root)
    _patch(importlib.import_module("tests.docker_client"))


@pytest.fixture(scope="session")
def rabbitmq_container() -> Any:
    module = importlib.import_module("tests.docker_client")
    return module.ContainerInfo(id="harness", host=_host(), ports=_ports())


@pytest.fixture(scope="session")
def amqp_direct_url(rabbitmq_container: Any) -> Any:
    from yarl import URL

    return URL.build(
        scheme="amqp",
        user="guest",
        password="guest",
        path="//",
        host=rabbitmq_container.host,
        port=rabbitmq_container.ports["5672/tcp"],
    )
