"""An etcd server run by Leveret: Debian's ``etcd`` binary (package ``etcd-server``) as a
one-member cluster on loopback ports, with a data directory of its own.

``leveret serve --workers N`` starts one when no ``--etcd`` is given (``cli/workers.py``);
the test helper ``leveret.testing.etcd`` starts throwaway ones. Synchronous on purpose:
both use it before (or outside) any event loop.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from pathlib import Path

START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
# Debian's package of the etcd server binary (its client is etcd-client).
DEBIAN_PACKAGE = "etcd-server"
# PR_SET_PDEATHSIG (linux/prctl.h): the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


class EtcdMissing(RuntimeError):
    """There is no etcd binary on this machine."""


class EtcdFailed(RuntimeError):
    """etcd exited at start or did not become healthy in time."""


def etcd_binary() -> str:
    """The ``etcd`` binary on PATH, or :class:`EtcdMissing` naming the package."""
    found = shutil.which("etcd")
    if found is None:
        raise EtcdMissing(
            f"no etcd binary on PATH: install Debian's {DEBIAN_PACKAGE} package "
            f"(apt-get install {DEBIAN_PACKAGE}), or give --etcd the URL of a running etcd"
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (another process may take it before it is used)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a listener could bind ``port`` (etcd's, which reuses an address whose last
    connections wait in TIME_WAIT after a restart, as this check does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:
    # Run in the child between fork and exec: if the process that started etcd dies
    # without stopping it (kill -9), the kernel sends etcd SIGTERM, so no etcd is left.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class EtcdProcess:
    """One etcd member. :meth:`start` takes ``client_port`` and ``peer_port`` when they
    are given and free, else picks free ones; its data stays in ``data_dir`` across
    restarts (a one-member cluster keeps its identity in it)."""

    data_dir: Path
    client_port: int = 0
    peer_port: int = 0
    name: str = "leveret"
    # Whether etcd ends when the process that started it dies (a supervisor's).
    with_parent: bool = False
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "etcd.log"

    def start(self, timeout: float = START_TIMEOUT) -> Self:
        binary = etcd_binary()
        if not self.client_port or not port_is_free(self.client_port):
            self.client_port = free_port()
        if not self.peer_port or not port_is_free(self.peer_port):
            self.peer_port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client, peer = self.url, f"http://127.0.0.1:{self.peer_port}"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - Debian's etcd, arguments of our own
                [
                    binary,
                    "--name",
                    self.name,
                    "--data-dir",
                    str(self.data_dir / "member"),
                    "--listen-client-urls",
                    client,
                    "--advertise-client-urls",
                    client,
                    "--listen-peer-urls",
                    peer,
                    "--initial-advertise-peer-urls",
                    peer,
                    "--initial-cluster",
                    f"{self.name}={peer}",
                    # Old revisions go after an hour: a node that fell further behind
                    # reads everything again (cluster/metadata.py).
                    "--auto-compaction-mode",
                    "periodic",
                    "--auto-compaction-retention",
                    "1h",
                    "--log-level",
                    "warn",
                    "--logger",
                    "zap",
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                # Its own session: a terminal's Ctrl-C reaches the workers, and etcd stays
                # up until they have stopped (the supervisor stops it last).
                start_new_session=True,
                preexec_fn=_die_with_parent if self.with_parent else None,
            )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise EtcdFailed(f"etcd exited at start: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as response:  # noqa: S310 - our own loopback etcd
                    if b'"true"' in response.read():
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        self.kill()
        raise EtcdFailed(f"etcd did not become healthy in {timeout:g} s: {self.log()}")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        """The end of etcd's log."""
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL, timeout: float = STOP_TIMEOUT) -> None:
        """End the process with ``sig`` (by default at once, as a crash would) and wait
        for it, keeping its data."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def stop(self) -> None:
        """Stop it cleanly (SIGTERM), keeping its data."""
        self.kill(signal.SIGTERM)


__all__ = [
    "DEBIAN_PACKAGE",
    "EtcdFailed",
    "EtcdMissing",
    "EtcdProcess",
    "etcd_binary",
    "free_port",
    "port_is_free",
]
