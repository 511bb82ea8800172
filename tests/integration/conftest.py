"""Fixtures that start a real Leveret broker process on port 0 and stop it afterwards.

Set ``LEVERET_TEST_AMQP_URL`` (for example ``amqp://guest:guest@127.0.0.1:5672/%2F``) to run
the same tests against another broker, such as RabbitMQ, to check that they describe the
reference behaviour; tests marked ``leveret_only`` are skipped then.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
from tools.qpid import Py2, ensure

from tests.integration.pika_support import Opened, connect
from tests.integration.rabbitmq_support import links_rabbitmq  # noqa: F401 - a fixture

if TYPE_CHECKING:
    from collections.abc import Iterator

URL_ENV = "LEVERET_TEST_AMQP_URL"
_LISTENING = re.compile(r"listening on amqp://\[?([0-9a-fA-F:.]+)\]?:(\d+)")
START_TIMEOUT = 20.0

# Brokers started by the tests keep their durable state under a temporary directory, never
# in the user's own ~/.local/share/leveret: each start_broker() gets a directory of its own
# unless it passes --data-dir, and brokers launched otherwise (test_cli, test_robustness)
# find their default through XDG_DATA_HOME.
_DATA_ROOT = tempfile.mkdtemp(prefix="leveret-tests-")
atexit.register(shutil.rmtree, _DATA_ROOT, True)
os.environ["XDG_DATA_HOME"] = _DATA_ROOT
# The management API and Prometheus listeners of every broker the tests start take a free
# port too (their defaults, 15672 and 15692, are fixed ports; RabbitMQ here has 15672).
os.environ.setdefault("LEVERET_MANAGEMENT_PORT", "0")
os.environ.setdefault("LEVERET_PROMETHEUS_PORT", "0")


@dataclass
class Broker:
    """Where a broker listens; ``process`` is None for an external broker."""

    host: str
    port: int
    process: subprocess.Popen[str] | None = None
    log: list[str] = field(default_factory=list)
    _drain: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Signal the process and wait for it; returns its exit code."""
        assert self.process is not None, "an external broker is not ours to stop"
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            raise
        finally:
            if self._drain is not None:
                self._drain.join(5)
            if self.process.stderr is not None:
                self.process.stderr.close()

    def log_text(self) -> str:
        return "\n".join(self.log)


def start_broker(*extra_args: str, env: dict[str, str] | None = None) -> Broker:
    """Start ``python -m leveret serve`` on 127.0.0.1 port 0 and wait for its listener line."""
    cmd = [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0"]
    if "--stream-port" not in extra_args:
        cmd += ["--stream-port", "0"]  # never the fixed 5552 (RabbitMQ's, on this machine)
    if "--data-dir" not in extra_args and "LEVERET_DATA_DIR" not in (env or {}):
        cmd += ["--data-dir", tempfile.mkdtemp(dir=_DATA_ROOT)]
    proc = subprocess.Popen(
        [*cmd, *extra_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    log: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT
    port = None
    host = "127.0.0.1"
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line.rstrip("\n"))
        match = _LISTENING.search(line)
        if match:
            host, port = match.group(1), int(match.group(2))
            break
    if port is None:
        proc.kill()
        proc.wait(5)
        raise RuntimeError("broker did not start:\n" + "\n".join(log))

    stream = proc.stderr

    def drain() -> None:
        log.extend(line.rstrip("\n") for line in stream)

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return Broker(host=host, port=port, process=proc, log=log, _drain=thread)


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    """One broker shared by the session; tests keep apart by using unique names."""
    external = os.environ.get(URL_ENV)
    if external:
        parts = urlsplit(external)
        yield Broker(host=parts.hostname or "127.0.0.1", port=parts.port or 5672)
        return
    b = start_broker()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def fresh_broker() -> Iterator[Broker]:
    """A broker of the test's own, for tests that restart, signal or exhaust it."""
    if os.environ.get(URL_ENV):
        pytest.skip("needs a broker process the test controls")
    b = start_broker()
    try:
        yield b
    finally:
        if b.process is not None:
            b.stop()


@pytest.fixture
def name() -> str:
    """A unique name for queues and exchanges of one test."""
    return f"t.{uuid.uuid4().hex[:12]}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not os.environ.get(URL_ENV):
        return
    skip = pytest.mark.skip(reason=f"leveret_only: {URL_ENV} points at another broker")
    for item in items:
        if item.get_closest_marker("leveret_only"):
            item.add_marker(skip)


@pytest.fixture
def conn(broker: Broker) -> Iterator[Any]:
    """A pika BlockingConnection to the session broker, closed afterwards if still open."""
    with Opened(connect(broker)) as c:
        yield c


@pytest.fixture
def ch(conn: Any) -> Any:
    """A channel on ``conn``."""
    return conn.channel()


@pytest.fixture(scope="module")
def py2() -> Py2:
    """Python 2.7 with the Qpid project's Python client (0-10 tests), or a skip."""
    found = ensure()
    if found is None:
        pytest.skip("Python 2.7 with qpid-python is not available")
    return found
