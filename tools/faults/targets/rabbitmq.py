"""RabbitMQ 3.10 (Debian's ``rabbitmq-server``) as the cluster under test: N nodes on
this machine with node names, ports and directories of the run's own, clustered with
``join_cluster``, the management plugin on for the leader queries.

Partitions: every node is started with ``ERL_EPMD_PORT`` naming its own listener of the
harness's :class:`~tools.faults.epmd.EpmdHub`, which answers a node asking for a peer with
the port of the proxy on that path (``epmd.py``). Erlang opens one distribution connection
per pair of nodes, from whichever side dials first, so a partition blackholes (or resets)
both directions' proxies. The CLI tools get the same ``ERL_EPMD_PORT`` and the real ports.

Limits: a partition cuts the Erlang distribution only (clients keep reaching the node
they are connected to, as in RabbitMQ's Jepsen tests); epmd itself is never cut (a node
can always learn a port, then fails to connect through the blackholed proxy).
``cluster_partition_handling`` is ``pause_minority`` unless told otherwise (RabbitMQ's
default, ``ignore``, which its Jepsen suite keeps, leaves the nodes partitioned for good
once a pause or a partition outlasted ``net_ticktime``: measured here, all three nodes
saw only themselves after one 20 s pause, so no later cycle would start from a whole
cluster); ``net_ticktime`` is 15 s (Jepsen's) unless told otherwise.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from tools.faults import slowdisk
from tools.faults.epmd import EpmdHub
from tools.faults.ports import kept_port
from tools.faults.proxy import FaultProxy
from tools.faults.targets.base import Node, Target
from tools.faults.targets.http import queue_leader, running_nodes

SBIN = "/usr/lib/rabbitmq/bin"
USER = "rabbitmq"
HOME = "/var/lib/rabbitmq"  # the rabbitmq user's home: its Erlang cookie
CTL_TIMEOUT = 120.0


def available() -> str | None:
    """None when RabbitMQ can be run here, else why not."""
    if not os.path.exists(f"{SBIN}/rabbitmq-server"):
        return "RabbitMQ is not installed (Debian's rabbitmq-server package)"
    if os.geteuid() != 0:
        return "starting RabbitMQ nodes as the rabbitmq user needs root"
    return None


@dataclass(eq=False)
class RabbitNode(Node):
    short: str = ""
    dist_port: int = 0
    management_port: int = 0
    epmd_port: int = 0
    net_ticktime: int = 15
    partition_handling: str = "pause_minority"

    @property
    def full_name(self) -> str:
        return f"{self.short}@localhost"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.management_port}"

    def write_config(self) -> None:
        d = self.data_dir
        for sub in ("mnesia", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "enabled_plugins").write_text("[rabbitmq_management].\n")
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.amqp_port}\n"
            f"management.tcp.ip = 127.0.0.1\n"
            f"management.tcp.port = {self.management_port}\n"
            "collect_statistics_interval = 1000\n"
            f"cluster_partition_handling = {self.partition_handling}\n"
            "log.file.level = info\n"
        )
        (d / "advanced.config").write_text(
            f"[{{kernel, [{{net_ticktime, {self.net_ticktime}}}]}}].\n"
        )
        uid, gid = pwd.getpwnam(USER)[2:4]
        for path in [d, *d.rglob("*")]:
            os.chown(path, uid, gid)

    def environment(self) -> dict[str, str]:
        d = self.data_dir
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": HOME,
            "LANG": "C.UTF-8",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_NODENAME": self.full_name,
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_PID_FILE": str(d / "pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
        }

    def command(self) -> tuple[list[str], dict[str, str]]:
        env = self.environment()
        # exec erl directly (no wrapper shell waiting on it): the process we start is the
        # Erlang VM, which kill -9 and SIGSTOP must hit. -noinput as the wrapper would add.
        env["RABBITMQ_ALLOW_INPUT"] = "1"
        env["RABBITMQ_SERVER_START_ARGS"] = (
            "-noinput -start_epmd false -kernel inet_dist_use_interface {127,0,0,1}"
        )
        return [f"{SBIN}/rabbitmq-server"], env

    def ctl(self, *args: str, tool: str = "rabbitmqctl", timeout: float = CTL_TIMEOUT) -> str:
        env = self.environment()
        env["RABBITMQ_CTL_ERL_ARGS"] = "-start_epmd false"
        done = subprocess.run(
            [f"{SBIN}/{tool}", "-n", self.full_name, *args],
            env=env,
            user=USER,
            cwd=HOME,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} on {self.name}: {done.stderr.strip()}")
        return done.stdout

    async def wait_ready(self, limit: float) -> None:
        # await_startup fails at once until the node has registered with epmd: ask again.
        deadline = time.monotonic() + limit
        while True:
            if not self.running():
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            try:
                await asyncio.to_thread(self.ctl, "await_startup", "--timeout", str(int(limit)))
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(1)


@dataclass(eq=False)
class RabbitMQTarget(Target):
    size: int = 3
    tag: str = "f"
    net_ticktime: int = 15
    partition_handling: str = "pause_minority"
    hub: EpmdHub | None = None

    kind: str = "rabbitmq"
    faults: frozenset[str] = frozenset({"kill", "pause", "partition", "slowdisk"})
    any_node_serves: bool = True

    async def start(self) -> None:
        if slowdisk.available() is not None:
            self.faults = self.faults - {"slowdisk"}
        self.hub = EpmdHub()
        uid, gid = pwd.getpwnam(USER)[2:4]
        os.chown(self.workdir, uid, gid)
        for i in range(1, self.size + 1):
            short = f"faults-{self.tag}-{i}"
            data_dir = self.workdir / f"rabbit-{i}"
            data_dir.mkdir(parents=True, exist_ok=True)
            node = RabbitNode(
                name=f"{short}@localhost",
                amqp_port=kept_port(),
                data_dir=data_dir,
                log_path=self.workdir / f"rabbit-{i}.log",
                short=short,
                dist_port=kept_port(),
                management_port=kept_port(),
                epmd_port=await self.hub.listen(short),
                net_ticktime=self.net_ticktime,
                partition_handling=self.partition_handling,
            )
            node.write_config()
            if slowdisk.available() is None:
                node.disk = slowdisk.SlowDisk(f"leveret-faults-{self.tag}-{i}", data_dir).create()
            self.nodes.append(node)
        for a in self._rabbits():
            for b in self._rabbits():
                if a is not b:
                    proxy = await FaultProxy(
                        f"{a.short}->{b.short}", ("127.0.0.1", b.dist_port)
                    ).start()
                    self.paths[(a.name, b.name)] = proxy
                    self.hub.routes[(a.short, b.short)] = proxy.port
        await asyncio.gather(*(self.start_node(node) for node in self.nodes))
        first = self._rabbits()[0]
        for node in self._rabbits()[1:]:
            await asyncio.to_thread(node.ctl, "stop_app")
            await asyncio.to_thread(node.ctl, "join_cluster", first.full_name)
            await asyncio.to_thread(node.ctl, "start_app")
        if not await self.wait_healthy(60):
            raise RuntimeError("the RabbitMQ cluster did not form:\n" + first.log_tail())

    def _rabbits(self) -> list[RabbitNode]:
        return [n for n in self.nodes if isinstance(n, RabbitNode)]

    def api_urls(self) -> list[str]:
        return [n.api for n in self._rabbits() if n.running() and not n.paused]

    async def leader(self, queue: str) -> str | None:
        for api in self.api_urls():
            try:
                return await queue_leader(api, queue)
            except Exception:  # noqa: S112 - the next node may answer
                continue
        return None

    async def healthy(self) -> bool:
        names = {n.name for n in self.nodes}
        for node in self._rabbits():
            if not node.running() or node.paused:
                return False
            # Running as every node's Mnesia sees it. (Its "partitions" lists are not
            # asked: with pause_minority a majority node was seen to keep naming a
            # partition long after the paused node had come back and rejoined.)
            if await running_nodes(node.api) != names:
                return False
        return True

    def describe(self) -> dict[str, Any]:
        version = ""
        try:
            version = self._rabbits()[0].ctl("version", timeout=30).strip()
        except Exception:  # noqa: S110 - the report says "unknown"
            pass
        return {
            "broker": "RabbitMQ",
            "version": version or "unknown",
            "nodes": [n.name for n in self.nodes],
            "net_ticktime": self.net_ticktime,
            "cluster_partition_handling": self.partition_handling,
            "partition_mode": self.partition_mode.value,
        }

    async def stop_extras(self) -> None:
        if self.hub is not None:
            await self.hub.close()


__all__ = ["RabbitMQTarget", "RabbitNode", "available"]
