"""The client libraries whose own integration suites the harness runs, pinned, and their wiring.

Owned by the conformance harness (``python -m conformance``); nothing in ``leveret`` imports it.
Each :class:`Suite` names the source distribution on PyPI that carries the tests, or the
Debian package where no PyPI release does (the libraries and test tools themselves are
pinned in ``conformance/requirements.txt``), which test paths to run, and how to point the
suite at a broker without editing its files (environment variables, a pytest plugin from
``conformance/plugins``, or, for tests that know only ``localhost:5672``, a network
namespace of their own where Leveret listens there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from conformance.brokers import Target

# Build back ends the sdists below declare: ``pip download`` prepares each sdist's metadata,
# so they are installed into the harness venv first (uv_build needs its binary on PATH).
BUILD_BACKENDS = ("setuptools>=77", "wheel", "poetry-core>=2", "hatchling", "uv_build")


@dataclass(frozen=True)
class Suite:
    """One client library's integration suite."""

    name: str
    sdist: str
    """``name==version`` of the source distribution that holds the tests ("" with ``deb``)."""
    tests: tuple[str, ...]
    """Paths, relative to the unpacked sdist (or Debian package), given to pytest."""
    env: Callable[[Target], dict[str, str]]
    deb: str = ""
    """``name==version`` of a Debian package holding the tests, unpacked (not installed)."""
    localhost_5672: bool = False
    """The tests connect to ``localhost:5672`` and nothing else: on Leveret they run in a
    network namespace where it listens there; on RabbitMQ only if its node is on 5672."""
    plugins: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()
    test_timeout: int = 60
    """Seconds per test (pytest-timeout); the suites wait on brokers that may not answer."""
    suite_timeout: int = 1800
    """Seconds for the whole run against one broker before it is stopped."""
    notes: str = ""


def _url(target: Target) -> str:
    return f"amqp://guest:guest@{target.host}:{target.port}/%2F"


def _kombu_env(target: Target) -> dict[str, str]:
    return {"RABBITMQ_HOST": target.host, "RABBITMQ_5672_TCP": str(target.port)}


def _docker_env(target: Target) -> dict[str, str]:
    # 5671 (TLS) is a closed port on both targets here: the amqps variants fail on both.
    return {"CONFORMANCE_AMQP_HOST": target.host, "CONFORMANCE_AMQP_PORT": str(target.port)}


def _rabbitpy_env(target: Target) -> dict[str, str]:
    return {"RABBITMQ_URL": _url(target), "MANAGEMENT_URL": f"{target.http_url}/%2f"}


def _amqpstorm_env(target: Target) -> dict[str, str]:
    return {
        "AMQP_HOST": target.host,
        "AMQP_USERNAME": "guest",
        "AMQP_PASSWORD": "guest",
        "AMQP_URI": _url(target),
        "AMQP_HTTP_URL": target.http_url,
        "CONFORMANCE_AMQP_PORT": str(target.port),
    }


def _no_env(target: Target) -> dict[str, str]:
    return {}


def _celery_env(target: Target) -> dict[str, str]:
    # The rpc:// result backend keeps the whole suite on AMQP (no Redis server needed); the
    # tests that need another backend skip themselves on both brokers alike.
    return {
        "TEST_BROKER": f"pyamqp://guest:guest@{target.host}:{target.port}//",
        "TEST_BACKEND": "rpc://",
    }


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            name="py-amqp",
            sdist="amqp==5.4.2",
            # t/integration/test_integration.py drives mocks, not a broker.
            tests=("t/integration/test_rmq.py",),
            env=_kombu_env,
        ),
        Suite(
            name="kombu",
            sdist="kombu==5.7.0",
            tests=("t/integration/test_py_amqp.py",),
            env=_kombu_env,
        ),
        Suite(
            name="aiormq",
            sdist="aiormq==7.2.4",
            tests=("tests",),
            env=_docker_env,
            plugins=("conformance_docker",),
            suite_timeout=3600,
        ),
        Suite(
            name="aio-pika",
            sdist="aio-pika==10.2.1",
            tests=("tests",),
            env=_docker_env,
            plugins=("conformance_docker",),
            suite_timeout=3600,
        ),
        Suite(
            name="rabbitpy",
            sdist="rabbitpy==3.0.2",
            # The rest of tests/ are unit tests on mocks.
            tests=("tests/test_integration.py", "tests/integration"),
            env=_rabbitpy_env,
        ),
        Suite(
            name="amqpstorm",
            sdist="amqpstorm==3.1.4",
            # ssl/ needs a TLS listener with the project's certificates (neither target has one).
            tests=("amqpstorm/tests/functional",),
            env=_amqpstorm_env,
            plugins=("conformance_amqpstorm",),
            pytest_args=("--ignore=amqpstorm/tests/functional/ssl",),
        ),
        Suite(
            name="celery",
            sdist="celery==5.7.0",
            tests=("t/integration",),
            env=_celery_env,
            # Celery's fixtures (celery_parameters, celery_config...) come from its pytest
            # plugin, which the pytest-celery package registers; load it by name instead.
            pytest_args=("-p", "celery.contrib.pytest"),
            test_timeout=120,
            suite_timeout=2700,
        ),
        Suite(
            name="proton-examples",
            sdist="",
            # Qpid Proton's Python examples and their test (test_examples.py): not in the
            # PyPI sdist of python-qpid-proton; Debian ships them. The library is the
            # harness venv's python-qpid-proton (the examples run with its python3).
            deb="libqpid-proton11-dev-examples==0.37.0-2",
            tests=("usr/share/proton/examples/python/test_examples.py",),
            env=_no_env,
            # The eleven that need a broker; the "direct" ones are their own server.
            pytest_args=("-k", "not direct"),
            localhost_5672=True,
            suite_timeout=900,
            notes="anonymous logins (no user name in the URL), the address 'examples'",
        ),
    )
}

PIKA_NOTE = (
    "pika: no release on PyPI carries its tests (sdists 0.13.1 to 1.4.4 hold the package "
    "only), so it has no suite here; Leveret's own tests/integration drive pika throughout."
)
