"""What the harness needs of a cluster under test, and the node processes it runs.

A :class:`Target` starts its nodes (and etcd, proxies...), says which faults it supports,
who leads a queue, and whether it is healthy; it injects the network and etcd faults
(each target wires its own paths through :class:`~tools.faults.proxy.FaultProxy`). A
:class:`Node` is one broker process: killed, paused and restarted by signal.

Every process is started from the thread that created the target's spawner (one thread
kept for the run), with ``PR_SET_PDEATHSIG``: if the harness itself is killed, the kernel
ends them (a Ctrl-C or a timeout goes through :meth:`Target.stop`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tools.faults.proxy import FaultProxy, Mode
from tools.faults.targets.http import queue_replicas

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from pathlib import Path

    from tools.faults import slowdisk

_PR_SET_PDEATHSIG = 1
STOP_TIMEOUT = 15.0


def die_with_parent() -> None:
    """Run between fork and exec: the child gets SIGKILL when the harness's thread that
    started it ends (kill -9 of the harness included)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(eq=False)
class Node(abc.ABC):
    """One broker process. ``amqp_port`` stays the same across restarts (clients come
    back to it); ``log_path`` collects its output across them."""

    name: str
    amqp_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0
    disk: slowdisk.SlowDisk | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/%2F"

    @property
    def pid(self) -> int | None:
        """The broker's own process (what a kill -9 and a SIGSTOP hit)."""
        return self.process.pid if self.process is not None else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def stream_address(self) -> tuple[str, int] | None:
        """Its stream-protocol listener (None: it has none)."""
        return None

    @abc.abstractmethod
    def command(self) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of the broker process."""

    @abc.abstractmethod
    async def wait_ready(self, limit: float) -> None:
        """Return once the node serves clients, or raise ``TimeoutError``."""

    def spawn(self, *, user: str | None = None, cwd: Path | None = None) -> None:
        argv, env = self.command()
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts + 1} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=cwd,
                user=user,
                start_new_session=True,  # a terminal's Ctrl-C reaches the harness only
                preexec_fn=die_with_parent,
            )
        self.starts += 1
        self.paused = False
        if self.disk is not None:
            self.disk.add(self.process.pid)

    def kill(self) -> None:
        """``kill -9``, and wait for it to be gone."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT)
        self.paused = False

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.process is not None and self.paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT` seconds)."""
        if self.process is None:
            return
        self.resume()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass(eq=False)
class Target(abc.ABC):
    """A cluster under test. Subclasses fill :attr:`nodes` in :meth:`start`."""

    workdir: Path
    nodes: list[Node] = field(default_factory=list)
    # Directed paths between nodes, (from, to) -> the proxy the first dials the second by.
    paths: dict[tuple[str, str], FaultProxy] = field(default_factory=dict)
    partition_mode: Mode = Mode.BLACKHOLE
    _spawner: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="faults-spawn")
    )

    kind: str = "target"
    # The faults this target can inject.
    faults: frozenset[str] = frozenset()
    # Whether a client of any node reaches every queue (else only the queue's leader).
    any_node_serves: bool = True

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    async def in_spawner(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` on the thread that starts every process (see the module's doc)."""
        return await asyncio.get_running_loop().run_in_executor(self._spawner, call)

    async def start_node(self, node: Node, limit: float = 120.0) -> None:
        await self.in_spawner(node.spawn)
        await node.wait_ready(limit)

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def leader(self, queue: str) -> str | None:
        """The node leading ``queue`` now (None if no node answers for it)."""

    @abc.abstractmethod
    def api_urls(self) -> list[str]:
        """The management API of each node that runs and is not paused."""

    async def whole(self, queue: str) -> bool:
        """Whether every member of ``queue`` is online (True for a queue that has no
        members: one that is not replicated)."""
        for api in self.api_urls():
            try:
                replicas = await queue_replicas(api, queue)
            except Exception:  # noqa: S112 - the next node may answer
                continue
            return replicas is None or (bool(replicas[0]) and replicas[0] == replicas[1])
        return False

    @abc.abstractmethod
    async def healthy(self) -> bool:
        """Whether every node runs and sees every other one (one quick probe)."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Versions and settings, for the report."""

    def queue_arguments(self, queue_type: str) -> dict[str, Any]:
        return {} if queue_type == "classic" else {"x-queue-type": queue_type}

    async def wait_healthy(self, limit: float) -> bool:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if await self.healthy():
                    return True
            await asyncio.sleep(0.5)
        return False

    # -- network faults ---------------------------------------------------------------------

    def partition(self, groups: Sequence[Iterable[str]]) -> None:
        """Cut every path between nodes of different ``groups``."""
        side = {name: n for n, group in enumerate(groups) for name in group}
        for (a, b), proxy in self.paths.items():
            if side.get(a, -1) != side.get(b, -2):
                proxy.set(self.partition_mode)
                if self.partition_mode is Mode.REFUSE:
                    proxy.cut()

    def heal_partition(self) -> None:
        for proxy in self.paths.values():
            proxy.heal()

    # etcd faults: only targets that use etcd override these.
    def cut_etcd(self, node: str) -> None:
        raise NotImplementedError

    def heal_etcd(self, node: str) -> None:
        raise NotImplementedError

    async def etcd_down(self) -> None:
        raise NotImplementedError

    async def etcd_up(self) -> None:
        raise NotImplementedError

    # -- teardown ---------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop everything this target started; safe to call at any point, twice."""
        for node in self.nodes:
            node.resume()
            if node.disk is not None:
                with contextlib.suppress(OSError):
                    node.disk.heal()
        await asyncio.gather(
            *(asyncio.to_thread(node.stop) for node in self.nodes), return_exceptions=True
        )
        for node in self.nodes:
            if node.disk is not None:
                node.disk.remove()
        for proxy in self.paths.values():
            await proxy.close()
        await self.stop_extras()
        self._spawner.shutdown(wait=False)

    async def stop_extras(self) -> None:  # noqa: B027 - most targets start nothing else
        """What a subclass started besides the nodes (etcd, an epmd hub)."""


__all__ = ["Node", "Target", "die_with_parent"]
