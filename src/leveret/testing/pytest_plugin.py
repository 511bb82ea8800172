"""Leveret's pytest plugin: a real broker inside the test run, with a clock the test moves.

Installing Leveret registers this module with pytest (the ``pytest11`` entry point in
``pyproject.toml``), so any test suite can ask for:

- ``leveret_broker`` (one per test module): an :class:`~leveret.testing.embedded.EmbeddedBroker`
  listening on 127.0.0.1 port 0; ``leveret_broker.advance(seconds)`` moves its clock;
- ``leveret_vhost`` (one per test): a fresh virtual host, deleted after the test (its
  connections closed, its queues and messages gone), so tests never see each other's state;
- ``amqp_url`` (one per test): ``amqp://guest:guest@127.0.0.1:<port>/<fresh vhost>?heartbeat=0``;
- ``leveret_settings`` (one per test module, ``{}``): override it in a module or conftest to
  start the module's broker with other settings (``{"consumer_timeout": 5000}``).

Importing this module costs nothing: the broker is imported when a test first asks for it.
How to use it, with pika, aio-pika, kombu and Celery: ``docs/testing.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.embedded import EmbeddedBroker

__all__ = ["amqp_url", "leveret_broker", "leveret_settings", "leveret_vhost"]


def pytest_configure(config: pytest.Config) -> None:
    # pytest rewrites the asserts of every module of a distribution that registers a
    # plugin, which here would be the whole broker: its imports would cost twice the CPU
    # (measured: 1.5 s against 0.8 s) and the broker under test would not be the code
    # that runs in production. Only the test files' asserts are pytest's to rewrite. (A
    # private attribute, read defensively: if pytest moves it, the broker is rewritten,
    # which is slower but harmless.)
    hook = getattr(config.pluginmanager, "rewrite_hook", None)
    marked = getattr(hook, "_must_rewrite", None)
    if isinstance(marked, set):
        marked.discard("leveret")


@pytest.fixture(scope="module")
def leveret_settings() -> dict[str, object]:
    """Settings of the module's broker, by ``leveret serve``'s names; ``{}`` keeps the
    embedded broker's defaults (``leveret.testing.embedded.DEFAULT_SETTINGS``)."""
    return {}


@pytest.fixture(scope="module")
def leveret_broker(leveret_settings: dict[str, object]) -> Iterator[EmbeddedBroker]:
    """A broker for this test module, in this process, stopped after the module's tests."""
    from leveret.testing.embedded import EmbeddedBroker

    broker = EmbeddedBroker(**leveret_settings)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(autouse=True)
def _leveret_broker_checked(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a test that uses the module's broker: the broker is running when it starts
    (a test before may have stopped it), and an exception the broker did not catch while
    the test ran (a bug in the broker, logged by asyncio) fails the test."""
    if "leveret_broker" not in request.fixturenames:
        yield
        return
    broker: EmbeddedBroker = request.getfixturevalue("leveret_broker")
    if not broker.running:
        broker.start()
    seen = len(broker.errors)
    yield
    if len(broker.errors) > seen:
        pytest.fail(
            "the broker raised an uncaught exception during the test:\n"
            + "\n".join(broker.errors[seen:]),
            pytrace=False,
        )


@pytest.fixture
def leveret_vhost(leveret_broker: EmbeddedBroker, request: pytest.FixtureRequest) -> Iterator[str]:
    """A virtual host of this test's own (``guest`` may do anything in it), deleted after
    with everything in it; connections still open to it are closed."""
    name = leveret_broker.new_vhost(request.node.name)
    yield name
    if not leveret_broker.running:
        leveret_broker.start()
    leveret_broker.delete_vhost(name)


@pytest.fixture
def amqp_url(leveret_broker: EmbeddedBroker, leveret_vhost: str) -> str:
    """The URL of this test's virtual host; heartbeats off (``heartbeat=0``), so advancing
    the clock never drops a client for silence."""
    return leveret_broker.url(leveret_vhost)
