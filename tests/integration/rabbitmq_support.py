"""A RabbitMQ 3.10.8 node of a test's own (Debian's ``rabbitmq-server``): its own node
name, ports on 127.0.0.1 and directories, the plugins the test asks for; stopped (and its
directories removed) by the test. Other helpers may run nodes at the same time, so nothing
is fixed: the node name is random and the ports are free ones.

Skipped (``pytest.skip``) where ``rabbitmq-server`` is missing and cannot be installed, as
``scripts/test`` installs it on a fresh machine when it runs as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

if TYPE_CHECKING:
    from collections.abc import Iterator

AUTH = ("guest", "guest")
START_TIMEOUT = 180.0
LINK_PLUGINS = (
    "rabbitmq_management",
    "rabbitmq_shovel",
    "rabbitmq_shovel_management",
    "rabbitmq_federation",
    "rabbitmq_federation_management",
    "rabbitmq_amqp1_0",
)


def port_bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class RabbitMQ:
    """One node: where it listens and how to manage it."""

    node: str
    port: int
    mgmt_port: int
    dist_port: int
    workdir: Path
    env: dict[str, str] = field(repr=False)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def uri(self, vhost: str = "/") -> str:
        from urllib.parse import quote

        return f"amqp://guest:guest@127.0.0.1:{self.port}/{quote(vhost, safe='')}"

    def api(self, path: str) -> str:
        return f"http://127.0.0.1:{self.mgmt_port}/api/{path}"

    def get(self, path: str) -> Any:
        r = requests.get(self.api(path), auth=AUTH, timeout=30)
        r.raise_for_status()
        return r.json()

    def put(self, path: str, body: Any) -> requests.Response:
        return requests.put(self.api(path), auth=AUTH, json=body, timeout=30)

    def ctl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["rabbitmqctl", "-n", self.node, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **self.env},
            check=False,
        )

    def start(self) -> None:
        log = open(self.workdir / "out.log", "ab")  # noqa: SIM115 - the node's lifetime
        self.process = subprocess.Popen(
            ["rabbitmq-server"],
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
        )
        log.close()
        # The management API answers once the node has booted with its plugins (polling it
        # costs far less than rabbitmqctl, which starts an Erlang VM each time).
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited:\n{self.log_tail()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.api("overview"), auth=AUTH, timeout=5).status_code == 200:
                    return
            time.sleep(0.3)
        self.kill()
        raise RuntimeError(f"RabbitMQ did not start in {START_TIMEOUT:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        texts = []
        for path in [self.workdir / "out.log", *sorted((self.workdir / "log").glob("*.log"))]:
            with contextlib.suppress(OSError):
                texts += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(texts)

    def stop(self) -> None:
        """A clean stop (the node's data stays: ``start`` brings it back): SIGTERM, which
        RabbitMQ takes as ``rabbitmqctl stop``."""
        try:
            os.kill(int((self.workdir / "pid").read_text().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            self.ctl("stop", timeout=120)
        if self.process is not None:
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None
        self._wait_released()

    def _wait_released(self, timeout: float = 30.0) -> None:
        """The wrapper script can exit while the Erlang VM is still closing its listeners: a
        ``start`` right after would find its own ports taken (eaddrinuse on the management
        port). Wait for the VM's pid to go and for every port to bind again."""
        deadline = time.monotonic() + timeout
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.workdir / "pid").read_text().strip())
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.1)
        for port in (self.port, self.mgmt_port):
            while time.monotonic() < deadline and not port_bindable(port):
                time.sleep(0.1)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(30)
        # The Erlang VM (under su, as the rabbitmq user) wrote its pid: make sure it is gone.
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.workdir / "pid").read_text().strip())
            os.kill(pid, signal.SIGKILL)
        self.process = None


def ensure_installed() -> None:
    if shutil.which("rabbitmq-server") is not None:
        return
    if os.geteuid() == 0 and shutil.which("apt-get") is not None:
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "rabbitmq-server"],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            capture_output=True,
            check=False,
            timeout=600,
        )
    if shutil.which("rabbitmq-server") is None:
        pytest.skip("rabbitmq-server is not installed")


def make_rabbitmq(plugins: tuple[str, ...] = LINK_PLUGINS) -> RabbitMQ:
    """A node, configured, not started."""
    ensure_installed()
    name = f"lv-links-{uuid.uuid4().hex[:8]}@localhost"
    workdir = Path(tempfile.mkdtemp(prefix="lv-rabbitmq-"))
    port, mgmt, dist = free_port(), free_port(), free_port()
    (workdir / "mnesia").mkdir()
    (workdir / "log").mkdir()
    (workdir / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")
    (workdir / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = 127.0.0.1:{port}\n"
        f"management.tcp.ip = 127.0.0.1\n"
        f"management.tcp.port = {mgmt}\n"
        "collect_statistics_interval = 500\n"
    )
    os.chmod(workdir, 0o755)  # noqa: S103 - the node runs as the rabbitmq user
    shutil.chown(workdir, "rabbitmq", "rabbitmq")
    for path in workdir.rglob("*"):
        shutil.chown(path, "rabbitmq", "rabbitmq")
    env = {
        "RABBITMQ_NODENAME": name,
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(dist),
        "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
        "RABBITMQ_LOG_BASE": str(workdir / "log"),
        "RABBITMQ_PID_FILE": str(workdir / "pid"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
        "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq.conf"),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
    }
    return RabbitMQ(name, port, mgmt, dist, workdir, env)


def start_rabbitmq(plugins: tuple[str, ...] = LINK_PLUGINS) -> RabbitMQ:
    node = make_rabbitmq(plugins)
    try:
        node.start()
    except BaseException:
        remove(node)
        raise
    return node


def remove(node: RabbitMQ) -> None:
    """Kill the node and remove its directories."""
    node.kill()
    shutil.rmtree(node.workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def links_rabbitmq() -> Iterator[RabbitMQ]:
    """One RabbitMQ node with the link plugins for the session's link tests (shovels,
    federation, the migration), removed at the end. Registered by conftest.py."""
    node = start_rabbitmq()
    try:
        yield node
    finally:
        remove(node)
