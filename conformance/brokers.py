"""The brokers the harness compares: RabbitMQ (already running) and Leveret (started here).

Owned by the conformance harness; the scenario tests start Leveret through
:func:`start_leveret` too. RabbitMQ is not started: the harness uses a node that listens
already (by default the one on 127.0.0.1:5672 with its management API on 15672; any other
node can be named with ``--rabbitmq-url`` / ``--rabbitmq-http``). Leveret is started from
this checkout (``python -m leveret serve``, the interpreter running the harness) on a free
port with a fresh data directory, and stopped afterwards; or, for tests that can only reach
``localhost:5672`` (Proton's examples), in a network namespace of its own (``unshare``, root)
where it listens on that port, the tests entering the namespace with ``nsenter``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import unquote, urlsplit

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
RABBITMQ_HTTP = "http://127.0.0.1:15672"
_LISTENING = re.compile(r"listening on amqp://\[?([0-9a-fA-F:.]+)\]?:(\d+)")
_MANAGEMENT = re.compile(r"management API and web UI listening on (http://\S+)")
_NO_MANAGEMENT = "management API and web UI not started"
START_TIMEOUT = 30.0


@dataclass
class Target:
    """Where one broker listens. ``http_url`` is its management API (a closed port if none)."""

    name: str
    host: str
    port: int
    vhost: str = "/"
    http_url: str = ""
    process: subprocess.Popen[str] | None = None
    data_dir: Path | None = None
    log: list[str] = field(default_factory=list)
    _drain: threading.Thread | None = None
    netns: bool = False
    """The broker runs in a network namespace of its own (its process's)."""

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def enter(self) -> list[str]:
        """The command prefix that runs a client where the broker can be reached: in its
        network namespace (``nsenter``, root) if it has one."""
        if not self.netns or self.process is None:
            return []
        return ["nsenter", f"--net=/proc/{self.process.pid}/ns/net", "--"]

    def stop(self, timeout: float = 15.0) -> None:
        """Stop a broker this module started (SIGTERM, then SIGKILL) and remove its data."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            if self._drain is not None:
                self._drain.join(5)
            if self.process.stderr is not None:
                self.process.stderr.close()
            self.process = None
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None


def rabbitmq(url: str = RABBITMQ_URL, http_url: str = RABBITMQ_HTTP) -> Target:
    """The RabbitMQ node named by ``url`` (it must be running)."""
    parts = urlsplit(url)
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    return Target(
        name="rabbitmq",
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5672,
        vhost=vhost,
        http_url=http_url,
    )


def closed_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on (bound and released: refused on connect)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_leveret(
    *extra_args: str,
    log_file: IO[str] | None = None,
    management: bool = True,
    env: dict[str, str] | None = None,
    netns: bool = False,
) -> Target:
    """Start ``python -m leveret serve`` on 127.0.0.1 port 0 with a fresh data directory.

    Every listener takes a free port (several Leverets run at once, next to RabbitMQ's
    5552/15672/15692); with ``management`` the HTTP API is up before this returns and is the
    target's ``http_url`` (amqpstorm's and rabbitpy's tests call it), otherwise that is a
    closed port. ``env``: more variables for the broker (``LEVERET_*`` settings).

    ``netns``: in a new network namespace (root), on ``localhost:5672`` as a fresh
    ``leveret serve`` listens; clients get there through :meth:`Target.enter`.
    """
    if netns and os.geteuid() != 0:
        raise RuntimeError("a broker in a network namespace of its own needs root (unshare)")
    data_dir = Path(tempfile.mkdtemp(prefix="leveret-conformance-"))
    cmd = [
        *(
            # The namespace's loopback starts down; the shell brings it up, then becomes
            # the broker (exec), so the process is the broker and its pid names the namespace.
            ("unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$0" "$@"')
            if netns
            else ()
        ),
        sys.executable,
        "-m",
        "leveret",
        "serve",
        "--host",
        "localhost" if netns else "127.0.0.1",
        "--port",
        "5672" if netns else "0",
        "--data-dir",
        str(data_dir),
        "--stream-port",
        "0",
        *(
            ("--management-port", "0", "--prometheus-port", "0")
            if management
            else ("--no-management",)
        ),
        *extra_args,
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {}), "XDG_DATA_HOME": str(data_dir)},
    )
    assert proc.stderr is not None
    log: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT
    host, port = "127.0.0.1", 0
    http_url = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line.rstrip("\n"))
        match = _LISTENING.search(line)
        if match:
            host, port = match.group(1), int(match.group(2))
        match = _MANAGEMENT.search(line)
        if match:
            http_url = match.group(1)
        elif _NO_MANAGEMENT in line:
            break
        if port and (http_url or not management):
            break
    if not port or (management and not http_url):
        proc.kill()
        proc.wait(5)
        shutil.rmtree(data_dir, ignore_errors=True)
        raise RuntimeError("leveret did not start:\n" + "\n".join(log))
    stream = proc.stderr

    def drain() -> None:
        for line in stream:
            if log_file is not None:
                log_file.write(line)
            else:
                log.append(line.rstrip("\n"))

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return Target(
        name="leveret",
        host=host,
        port=port,
        http_url=http_url or f"http://127.0.0.1:{closed_port()}",
        process=proc,
        data_dir=data_dir,
        log=log,
        _drain=thread,
        netns=netns,
    )


def reachable(target: Target, timeout: float = 3.0) -> bool:
    """Whether the broker answers a TCP connect."""
    try:
        with socket.create_connection((target.host, target.port), timeout=timeout):
            return True
    except OSError:
        return False
