"""A throwaway etcd for tests and benchmarks: Debian's ``etcd`` binary (package
``etcd-server``) on free loopback ports with a temporary data directory, stopped and
removed by :meth:`EtcdServer.stop`. The cluster tests, ``bench/etcd_client.py`` and
the pytest fixture ``etcd`` (``tests/conftest.py``) use it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT = 20.0


class EtcdMissing(RuntimeError):
    """There is no etcd binary on this machine."""


def etcd_binary() -> str:
    found = shutil.which("etcd")
    if found is None:
        raise EtcdMissing("etcd is not installed (Debian: apt-get install etcd-server)")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class EtcdServer:
    """One etcd member. ``start()`` picks free ports; ``restart()`` keeps them and the
    data (what an operator's restart does); ``stop()`` ends it and removes the data."""

    data_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="leveret-etcd-")))
    client_port: int = 0
    peer_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> EtcdServer:
        binary = etcd_binary()
        if not self.client_port:
            self.client_port, self.peer_port = _free_port(), _free_port()
        client, peer = self.url, f"http://127.0.0.1:{self.peer_port}"
        self.log_path = self.data_dir / "etcd.log"
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(  # noqa: S603 - Debian's etcd, arguments of our own
            [
                binary,
                "--name",
                "leveret-test",
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
                f"leveret-test={peer}",
                "--log-level",
                "warn",
                "--logger",
                "zap",
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env={
                **os.environ,
                "ETCD_UNSUPPORTED_ARCH": os.environ.get("ETCD_UNSUPPORTED_ARCH", ""),
            },
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited at start: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as response:  # noqa: S310 - our own loopback etcd
                    if b'"true"' in response.read():
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"etcd did not become healthy in {START_TIMEOUT} s: {self.log()}")

    def log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """End the process (by default at once, as a crash would), keeping its data."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def restart(self) -> None:
        self.kill(signal.SIGTERM)
        self.start()

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        shutil.rmtree(self.data_dir, ignore_errors=True)
