"""``leveret serve --workers N``: N nodes of one broker on this machine, in one command (as
``gunicorn -w`` and ``uvicorn --workers``).

The supervisor (this process) serves no client. It

- keeps ``data_dir/workers.json``: the workers' node names, chosen once and kept, so a
  restart brings back every node with the queues it leads (``node-K`` is the K-th
  worker's own data directory), and the ports of its etcd;
- starts an etcd from the ``etcd`` binary (data in ``data_dir/etcd``) unless ``etcd`` is
  given, and restarts it if it dies;
- reserves the shared ports (AMQP, amqps, stream, the management API): it binds each with
  ``SO_REUSEPORT`` without listening, so the port is held for the workers while they
  restart, and port 0 becomes one port for all; every worker listens on it with
  ``SO_REUSEPORT`` too, and the kernel spreads connections over them. Per worker:
  ``prometheus_port`` and ``cluster_port`` + K - 1 (each node its own metrics, as
  RabbitMQ's per-node endpoint), and a management listener of its own that the other
  nodes ask (``ManagementServer.node_urls``);
- starts the first worker, then the others once it is ready; restarts a worker that
  dies (after a pause that doubles while it keeps failing); forwards SIGHUP (TLS reload);
  on SIGINT or SIGTERM stops the workers (each drains as a single node does), then etcd.

A worker that fails while the broker starts stops the whole command (as gunicorn's boot
error does): the cause is in its log lines, each prefixed with its node's name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.cluster.etcd_process import EtcdFailed, EtcdMissing, EtcdProcess
from leveret.config import WORKERS_FILE, default_data_dir, node_name, to_document
from leveret.store.files import replace_durably

if TYPE_CHECKING:
    from leveret.config import Settings

log = logging.getLogger("leveret.supervisor")

NODE_DIR = "node-{}"
ETCD_DIR = "etcd"
LOCK_FILE = "workers.lock"
# A single node's store holds this file (store/disk.py): its directory is not ours.
SINGLE_NODE_LOCK = "LOCK"
# Seconds a worker gets to drain and stop before it is killed.
STOP_TIMEOUT = 30.0
# Pause before restarting a worker that died: doubles while it keeps dying soon after its
# start, up to the maximum; a worker that ran this long is healthy again.
RESTART_PAUSE = 0.5
RESTART_PAUSE_MAX = 30.0
HEALTHY_AFTER = 30.0
WORKER_MODULE = "leveret.cli.worker"


class SupervisorError(Exception):
    """The workers cannot be started; the CLI prints it and exits with status 1."""


def node_names(base: str, count: int, known: list[str]) -> list[str]:
    """``count`` node names: those ``workers.json`` already has, then ``base``'s with the
    worker's number after its local part (``leveret@host`` -> ``leveret-3@host``)."""
    local, at, host = base.partition("@")
    names = list(known[:count])
    for index in range(len(names) + 1, count + 1):
        name = f"{local}-{index}{at}{host}"
        while name in names:
            name = f"{local}-{index}x{at}{host}"
            index += count
        names.append(name)
    return names


def read_workers_file(data_dir: Path) -> dict[str, Any]:
    """``data_dir/workers.json``, or {} when there is none (or it cannot be read)."""
    try:
        doc = json.loads((data_dir / WORKERS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def worker_dirs(data_dir: Path) -> list[Path]:
    """The workers' data directories in their order (``leveret ctl`` tries them so)."""
    nodes = read_workers_file(data_dir).get("nodes")
    if not isinstance(nodes, list):
        return []
    return [data_dir / str(node.get("dir")) for node in nodes if isinstance(node, dict)]


def reserve_port(host: str, port: int) -> tuple[socket.socket, int]:
    """Hold ``host:port`` for the workers: bound with ``SO_REUSEPORT``, not listening (it
    takes no connection). Port 0 becomes a free port. A port another program listens on
    is refused (``OSError``), rather than shared by accident."""
    family, _type, _proto, _name, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    if port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    bound: int = sock.getsockname()[1]
    return sock, bound


@dataclass
class Worker:
    """One worker process and what the supervisor knows of it."""

    index: int
    name: str
    settings: Settings
    process: subprocess.Popen[bytes] | None = None
    channel: socket.socket | None = None
    ready: bool = False
    started_at: float = 0.0
    # When a restart is due (None: none is).
    restart_at: float | None = None
    failures: int = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


@dataclass
class Supervisor:
    settings: Settings
    data_dir: Path = field(init=False)
    workers: list[Worker] = field(default_factory=list)
    etcd: EtcdProcess | None = None
    etcd_urls: tuple[str, ...] = ()
    ports: dict[str, int] = field(default_factory=dict)
    _reserved: list[socket.socket] = field(default_factory=list)
    _lock_fd: int | None = None
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    _wakeup: tuple[socket.socket, socket.socket] | None = None
    _stop: int | None = None  # the signal that asked to stop
    _booting: bool = True

    def __post_init__(self) -> None:
        self.data_dir = Path(self.settings.data_dir or default_data_dir())

    # -- the command -------------------------------------------------------------------

    def run(self) -> int:
        try:
            self._prepare()
            self._install_signals()
            self._boot()
            if self._stop is None:
                self._booting = False
                self._write_state()
                log.info(
                    "%d workers ready: %s (ctl reaches %s)",
                    len(self.workers),
                    ", ".join(w.name for w in self.workers),
                    self.workers[0].settings.data_dir,
                )
                self._watch()
        except SupervisorError as exc:
            print(f"leveret: {exc}", file=sys.stderr)
            self._shutdown()
            return 1
        self._shutdown()
        return 0

    def _prepare(self) -> None:
        settings = self.settings
        data_dir = self.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        if (data_dir / SINGLE_NODE_LOCK).exists():
            raise SupervisorError(
                f"{data_dir} holds a single node's data: --workers keeps each worker's data "
                f"in {data_dir}/node-K (move it to {data_dir}/node-1, or use another directory)"
            )
        self._lock_fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SupervisorError(f"{data_dir} is in use by another 'leveret serve'") from None
        known = read_workers_file(data_dir)
        names = node_names(
            node_name(settings),
            settings.workers,
            [str(n.get("name")) for n in known.get("nodes") or [] if isinstance(n, dict)],
        )
        self._reserve_ports()
        if settings.etcd:
            self.etcd_urls = settings.etcd
        else:
            previous = known.get("etcd")
            if not isinstance(previous, dict):
                previous = {}
            self.etcd = EtcdProcess(
                data_dir / ETCD_DIR,
                client_port=int(previous.get("client_port", 0) or 0),
                peer_port=int(previous.get("peer_port", 0) or 0),
                with_parent=True,
            )
            self._start_etcd()
            self.etcd_urls = (self.etcd.url,)
        self.workers = [
            Worker(index, name, self._worker_settings(index, name))
            for index, name in enumerate(names, start=1)
        ]
        self._write_state()

    def _reserve_ports(self) -> None:
        settings = self.settings
        shared: list[tuple[str, str, int, bool]] = [("port", settings.host, settings.port, True)]
        if settings.tls_certfile:
            shared.append(("tls_port", settings.tls_host or settings.host, settings.tls_port, True))
        # A single node runs without a stream or management listener it cannot have
        # (logged); so do the workers.
        shared.append(("stream_port", settings.host, settings.stream_port, False))
        if settings.tls_certfile:
            host = settings.tls_host or settings.host
            shared.append(("stream_tls_port", host, settings.stream_tls_port, False))
        if settings.management:
            shared.append(
                ("management_port", settings.management_host, settings.management_port, False)
            )
        for name, host, port, required in shared:
            try:
                sock, bound = reserve_port(host, port)
            except OSError as exc:
                if required:
                    raise SupervisorError(
                        f"cannot listen on {host}:{port}: {exc.strerror or exc}"
                    ) from None
                log.warning("%s %s:%d cannot be had: %s", name, host, port, exc)
                bound = port
            else:
                self._reserved.append(sock)
            self.ports[name] = bound
        count = settings.workers
        for name in ("prometheus_port", "cluster_port"):
            base = int(getattr(settings, name))
            if base and base + count - 1 > 65535:
                raise SupervisorError(f"{name} {base} + {count} workers is past port 65535")

    def _worker_settings(self, index: int, name: str) -> Settings:
        settings = self.settings

        def own(base: int) -> int:
            return base + index - 1 if base else 0

        return dataclasses.replace(
            settings,
            **self.ports,  # type: ignore[arg-type]
            workers=1,
            reuse_port=True,
            data_dir=str(self.data_dir / NODE_DIR.format(index)),
            node_name=name,
            etcd=self.etcd_urls,
            prometheus_port=own(settings.prometheus_port),
            cluster_port=own(settings.cluster_port),
            # Imported once, by the first worker, through etcd: the others see it there.
            load_definitions=settings.load_definitions if index == 1 else "",
        )

    def _start_etcd(self) -> None:
        assert self.etcd is not None
        try:
            self.etcd.start()
        except EtcdMissing as exc:
            raise SupervisorError(str(exc)) from None
        except (EtcdFailed, OSError) as exc:
            raise SupervisorError(f"etcd did not start ({self.etcd.log_path}): {exc}") from None
        log.info("etcd %s, data in %s", self.etcd.url, self.etcd.data_dir)

    def _write_state(self) -> None:
        doc: dict[str, Any] = {
            "nodes": [
                {
                    "name": w.name,
                    "dir": NODE_DIR.format(w.index),
                    "pid": w.pid,
                    "ready": w.ready,
                    "prometheus_port": w.settings.prometheus_port,
                }
                for w in self.workers
            ],
            "supervisor_pid": os.getpid(),
            "ready": not self._booting,
            "ports": self.ports,
            "etcd_urls": list(self.etcd_urls),
        }
        if self.etcd is not None:
            doc["etcd"] = {
                "client_port": self.etcd.client_port,
                "peer_port": self.etcd.peer_port,
                "pid": self.etcd.process.pid if self.etcd.process is not None else None,
            }
        replace_durably(self.data_dir / WORKERS_FILE, (json.dumps(doc, indent=1) + "\n").encode())

    # -- signals -----------------------------------------------------------------------

    def _install_signals(self) -> None:
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._wakeup = (reader, writer)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._selector.register(reader, selectors.EVENT_READ, None)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        # Only to wake the loop when a worker dies (its channel's end-of-file does too).
        signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)

    def _on_stop(self, sig: int, _frame: object) -> None:
        if self._stop is not None:
            # Asked twice: stop waiting for the workers to drain.
            for worker in self.workers:
                if worker.process is not None and worker.process.poll() is None:
                    worker.process.kill()
            return
        self._stop = sig

    def _on_hup(self, _sig: int, _frame: object) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.send_signal(signal.SIGHUP)

    # -- workers -----------------------------------------------------------------------

    def _spawn(self, worker: Worker) -> None:
        mine, theirs = socket.socketpair()
        env = {**os.environ, "LEVERET_WORKER_FD": str(theirs.fileno())}
        try:
            worker.process = subprocess.Popen(  # noqa: S603 - this Python, our own module
                [sys.executable, "-m", WORKER_MODULE, worker.name],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            theirs.close()
        line = (json.dumps(to_document(worker.settings)) + "\n").encode()
        mine.sendall(line)
        mine.setblocking(False)
        worker.channel = mine
        worker.ready = False
        worker.started_at = time.monotonic()
        worker.restart_at = None
        self._selector.register(mine, selectors.EVENT_READ, worker)
        log.info("worker %s started (pid %d)", worker.name, worker.process.pid)

    def _boot(self) -> None:
        first, *rest = self.workers
        self._spawn(first)
        self._wait(lambda: first.ready)
        for worker in rest:
            if self._stop is None:
                self._spawn(worker)
        self._wait(lambda: all(w.ready for w in self.workers))

    def _wait(self, done: Any) -> None:
        while self._stop is None and not done():
            self._step(1.0)

    def _watch(self) -> None:
        while self._stop is None:
            due = [w.restart_at for w in self.workers if w.restart_at is not None]
            timeout = 1.0 if not due else max(0.0, min(min(due) - time.monotonic(), 1.0))
            self._step(timeout)
            now = time.monotonic()
            for worker in self.workers:
                if worker.restart_at is not None and worker.restart_at <= now:
                    self._spawn(worker)
            if self.etcd is not None and not self.etcd.running() and self._stop is None:
                log.warning("etcd stopped (its log: %s): starting it again", self.etcd.log_path)
                try:
                    self._start_etcd()
                except SupervisorError as exc:
                    log.error("%s", exc)

    def _step(self, timeout: float) -> None:
        for key, _events in self._selector.select(timeout):
            if key.data is None:
                with contextlib.suppress(OSError):
                    key.fileobj.recv(4096)  # type: ignore[union-attr]
                continue
            self._heard(key.data)
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is not None:
                self._exited(worker)

    def _heard(self, worker: Worker) -> None:
        assert worker.channel is not None
        try:
            data = worker.channel.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if b"ready" in data and not worker.ready:
            worker.ready = True
            log.info("worker %s ready", worker.name)
            if not self._booting:
                self._write_state()
        if not data:
            self._close_channel(worker)

    def _close_channel(self, worker: Worker) -> None:
        if worker.channel is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(worker.channel)
            worker.channel.close()
            worker.channel = None

    def _exited(self, worker: Worker) -> None:
        assert worker.process is not None
        code = worker.process.returncode
        self._close_channel(worker)
        worker.process = None
        if self._stop is not None:
            return
        if self._booting:
            raise SupervisorError(
                f"worker {worker.name} exited with status {code} while the broker started "
                "(its log lines above say why)"
            )
        ran = time.monotonic() - worker.started_at
        worker.failures = 0 if ran >= HEALTHY_AFTER else worker.failures + 1
        pause = min(RESTART_PAUSE * 2 ** max(worker.failures - 1, 0), RESTART_PAUSE_MAX)
        worker.ready = False
        worker.restart_at = time.monotonic() + pause
        log.warning(
            "worker %s exited with status %s after %.1f s: starting it again in %.1f s",
            worker.name,
            code,
            ran,
            pause,
        )

    # -- stop --------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Stop every worker (SIGTERM: each drains), then etcd; release the ports."""
        live = [w for w in self.workers if w.process is not None and w.process.poll() is None]
        for worker in live:
            assert worker.process is not None
            worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for worker in live:
            assert worker.process is not None
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker %s did not stop in %g s: killed", worker.name, STOP_TIMEOUT)
                worker.process.kill()
                worker.process.wait(5)
        for worker in self.workers:
            self._close_channel(worker)
            worker.process = None
        if self.etcd is not None:
            self.etcd.stop()
        for sock in self._reserved:
            sock.close()
        self._reserved.clear()
        if self._wakeup is not None:
            signal.set_wakeup_fd(-1)
            for sock in self._wakeup:
                sock.close()
            self._wakeup = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._stop is not None:
            log.info("stopped (%s)", signal.Signals(self._stop).name)


def supervise(settings: Settings) -> int:
    """Run ``settings.workers`` workers until a signal stops them; the exit status."""
    return Supervisor(settings).run()


__all__ = ["Supervisor", "SupervisorError", "node_names", "supervise", "worker_dirs"]
