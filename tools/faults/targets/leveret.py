"""Leveret as the cluster under test: ``leveret serve`` nodes on an etcd of the run's own
(``leveret.testing.etcd``), or one node without etcd (``size=1``).

Every path a node takes to etcd or to a peer goes through a :class:`FaultProxy`: a node
is given ``--etcd`` as its own proxy to etcd, and ``cluster_peer_addresses`` naming, for
each peer, the proxy on the path from it to that peer (``View.cluster_address`` reads
it). The inter-node link dials peers through those proxies, so a partition between
Leveret nodes cuts the link and replication (``docs/faults.md``).

Any node serves any queue (the inter-node link): the workload's clients sit on every
node (:attr:`any_node_serves`).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret import __version__
from leveret.testing.etcd import EtcdServer
from tools.faults import slowdisk
from tools.faults.ports import kept_port
from tools.faults.proxy import FaultProxy, Mode
from tools.faults.targets.base import Node, Target
from tools.faults.targets.http import get_json, queue_leader, running_nodes

if TYPE_CHECKING:
    from pathlib import Path

_REGISTERED = "registered as cluster node '{name}'"
_LISTENING = re.compile(r"listening on amqp://")
_BUILD = re.compile(r"listening on amqp://\S+ \(([^)]*)\)")


@dataclass(eq=False)
class LeveretNode(Node):
    management_port: int = 0
    stream_port: int = 0
    cluster_port: int = 0
    etcd_url: str | None = None
    prefix: str = ""
    lease_ttl: int = 5
    # Peer node -> "host:port" of the proxy on the path to it.
    peers: dict[str, str] = field(default_factory=dict)
    _log_offset: int = 0

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.management_port}"

    @property
    def stream_address(self) -> tuple[str, int] | None:
        return ("127.0.0.1", self.stream_port)

    def command(self) -> tuple[list[str], dict[str, str]]:
        argv = [
            sys.executable, "-m", "leveret", "serve",
            "--host", "127.0.0.1",
            "--port", str(self.amqp_port),
            "--stream-port", str(self.stream_port),
            "--management-port", str(self.management_port),
            "--prometheus-port", "0",
            "--data-dir", str(self.data_dir),
        ]  # fmt: skip
        env = {**os.environ, "LEVERET_COLLECT_STATISTICS_INTERVAL": "500"}
        if self.etcd_url is not None:
            argv += ["--etcd", self.etcd_url, "--node-name", self.name]
            argv += ["--cluster-port", str(self.cluster_port)]
            env["LEVERET_ETCD_PREFIX"] = self.prefix
            env["LEVERET_CLUSTER_LEASE_TTL"] = str(self.lease_ttl)
            env["LEVERET_CLUSTER_PEER_ADDRESSES"] = ",".join(
                f"{peer}={address}" for peer, address in sorted(self.peers.items())
            )
        return argv, env

    def spawn(self, *, user: str | None = None, cwd: Path | None = None) -> None:
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        super().spawn(user=user, cwd=cwd)

    async def wait_ready(self, limit: float) -> None:
        registered = _REGISTERED.format(name=self.name)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode(errors="replace")
            if (registered in text) if self.etcd_url else bool(_LISTENING.search(text)):
                return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready in {limit:g} s:\n{self.log_tail()}")


@dataclass(eq=False)
class LeveretTarget(Target):
    size: int = 3
    lease_ttl: int = 5
    tag: str = "f"
    etcd: EtcdServer | None = None
    # Node -> the proxy on its path to etcd.
    etcd_paths: dict[str, FaultProxy] = field(default_factory=dict)

    kind: str = "leveret"
    faults: frozenset[str] = frozenset(
        {"kill", "pause", "partition", "partition-etcd", "etcd", "slowdisk"}
    )
    # The inter-node link: a client of any node reaches every queue.
    any_node_serves: bool = True

    @property
    def clustered(self) -> bool:
        return self.size > 1

    async def start(self) -> None:
        if not self.clustered:
            self.faults = frozenset({"kill", "pause", "slowdisk"})
        if slowdisk.available() is not None:
            self.faults = self.faults - {"slowdisk"}
        names = [f"n{i}@{self.tag}" for i in range(1, self.size + 1)]
        cluster_ports = {name: kept_port() for name in names}
        if self.clustered:
            self.etcd = EtcdServer(data_dir=self.workdir / "etcd", with_parent=True)
            await self.in_spawner(self.etcd.start)
            for name in names:
                self.etcd_paths[name] = await FaultProxy(
                    f"{name}->etcd", ("127.0.0.1", self.etcd.client_port)
                ).start()
            for a in names:
                for b in names:
                    if a != b:
                        self.paths[(a, b)] = await FaultProxy(
                            f"{a}->{b}", ("127.0.0.1", cluster_ports[b])
                        ).start()
        prefix = f"/leveret-faults/{self.tag}-{uuid.uuid4().hex[:8]}/"
        for i, name in enumerate(names, 1):
            data_dir = self.workdir / f"node-{i}"
            data_dir.mkdir(parents=True, exist_ok=True)
            node = LeveretNode(
                name=name,
                amqp_port=kept_port(),
                data_dir=data_dir,
                log_path=self.workdir / f"node-{i}.log",
                management_port=kept_port(),
                stream_port=kept_port(),
                cluster_port=cluster_ports[name],
                etcd_url=f"http://{self.etcd_paths[name].address}" if self.clustered else None,
                prefix=prefix,
                lease_ttl=self.lease_ttl,
                peers={b: p.address for (a, b), p in self.paths.items() if a == name},
            )
            if slowdisk.available() is None:
                node.disk = slowdisk.SlowDisk(f"leveret-faults-{self.tag}-{i}", data_dir).create()
            self.nodes.append(node)
        # The first node makes the cluster (seed); the others join it.
        await self.start_node(self.nodes[0], 60)
        await asyncio.gather(*(self.start_node(n, 60) for n in self.nodes[1:]))
        if not await self.wait_healthy(60):
            raise RuntimeError("the Leveret cluster did not form:\n" + self.nodes[0].log_tail())

    def _leverets(self) -> list[LeveretNode]:
        return [n for n in self.nodes if isinstance(n, LeveretNode)]

    def api_urls(self) -> list[str]:
        return [n.api for n in self._leverets() if n.running() and not n.paused]

    async def leader(self, queue: str) -> str | None:
        for node in self._leverets():
            if node.running() and not node.paused:
                try:
                    leader = await queue_leader(node.api, queue)
                except Exception:  # noqa: S112 - the next node may answer
                    continue
                # A single node names itself by its host name: the harness calls it n1.
                return node.name if leader is not None and not self.clustered else leader
        return None

    async def healthy(self) -> bool:
        names = {n.name for n in self.nodes}
        for node in self._leverets():
            if not node.running() or node.paused:
                return False
            if self.clustered:
                if await running_nodes(node.api) != names:
                    return False
            elif await get_json(node.api, "overview") is None:
                return False
        return True

    def describe(self) -> dict[str, Any]:
        return {
            "broker": "Leveret",
            "version": __version__,
            "nodes": [n.name for n in self.nodes],
            "etcd": self.clustered,
            "cluster_lease_ttl": self.lease_ttl if self.clustered else None,
            "any_node_serves": self.any_node_serves,
            "partition_mode": self.partition_mode.value,
            "build": self._build(),
        }

    def _build(self) -> str:
        """What the first node's log says it runs: pure Python, or compiled (mypyc)."""
        found = _BUILD.search(self.nodes[0].log_tail(10**6)) if self.nodes else None
        return found.group(1) if found else "unknown"

    # -- etcd faults ------------------------------------------------------------------------

    def cut_etcd(self, node: str) -> None:
        proxy = self.etcd_paths[node]
        proxy.set(self.partition_mode)
        if self.partition_mode is Mode.REFUSE:
            proxy.cut()

    def heal_etcd(self, node: str) -> None:
        self.etcd_paths[node].heal()

    async def etcd_down(self) -> None:
        assert self.etcd is not None
        await asyncio.to_thread(self.etcd.kill)

    async def etcd_up(self) -> None:
        assert self.etcd is not None
        await self.in_spawner(self.etcd.start)

    async def stop_extras(self) -> None:
        for proxy in self.etcd_paths.values():
            await proxy.close()
        if self.etcd is not None:
            await asyncio.to_thread(self.etcd.stop)


__all__ = ["LeveretNode", "LeveretTarget"]
