"""``python -m bench.cluster_scenarios``: scenarios a-e across a cluster, Leveret against
RabbitMQ 3.10.8 (issue 24's performance section).

Starts, once, on free loopback ports and in directories of its own:

- ``single``: one Leveret node (no etcd), the clients on it: the local figure;
- ``forwarded``: an etcd and two Leveret nodes ``a`` and ``b``; every queue of a run is
  declared on ``b`` first (so ``b`` leads it), every client connects to ``a``: each
  message crosses the inter-node link to ``b`` and each delivery crosses back;
- ``rabbit``: a three-node RabbitMQ 3.10.8 cluster (Debian's ``rabbitmq-server``, node
  names ``cb<pid>-<i>@localhost``, so it never meets another RabbitMQ of this machine);
  every queue declared on node 2 (a classic queue lives on its declaring node), every
  client on node 1;
- ``rabbit-quorum`` (scenario c only, ``--quorum``): the same with quorum queues (leader on
  node 2, members on all three);
- ``quorum-remote`` (scenario c only, ``--quorum``): an etcd and three Leveret nodes ``a``,
  ``b``, ``c``; each run's queues are replicated quorum queues of three members declared on
  ``b`` (client-local placement: ``b`` leads them), every client on ``a``: each publish
  crosses the link to ``b``, which replicates it to ``a`` and ``c`` before confirming;
- ``quorum-leader`` (scenario c only, ``--quorum``): the same cluster, the clients on ``b``;
- ``workers`` (scenario e only, ``--workers N``): ``leveret serve --workers N`` with a
  ``queue-leader-locator: balanced`` policy, the load generator on its shared port (the
  kernel spreads the connections, the policy the queue leaders): what a user of one
  machine's cores gets, against ``single``.

Then, round after round, every scenario on every setup in turn (``single``, ``forwarded``,
``rabbit``, ...), each run ``python -m bench.loadgen`` with the scenario's flags of
``bench.run``. The CPU per message is the sum over every process of the broker (both
Leveret nodes and their etcd; the three ``beam.smp``; the three quorum nodes and their
etcd; the workers and their etcd) over the
measured window, divided by the messages consumed in it. ``uptime``'s load average is read
before and after each run. Raw JSON lines go to ``OUT/runs.jsonl`` (with each process's CPU
over the whole run, ``cpu_split_s``, and its user and system seconds and context switches,
``proc_split``), the table of medians to ``OUT/table.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.run import (
    RABBIT_BIN,
    SCENARIOS,
    _raise_nofile,
    children,
    comm,
    ensure_rabbitmq,
    free_port,
    run_loadgen,
    scenario_args,
    wait_port,
)
from bench.run import Broker as _Broker

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["build_parser", "main", "render"]

ROOT = Path(__file__).resolve().parent.parent
QUORUM_SETUPS = ("rabbit-quorum", "quorum-remote", "quorum-leader")  # scenario c only
RABBITMQCTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
_TICKS = os.sysconf("SC_CLK_TCK")


def _user_system(pid: int) -> tuple[float, float]:
    """A process's user and system CPU seconds (``/proc/PID/stat``, all its threads); 0, 0
    once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def cpu_seconds(pid: int) -> float:
    user, system = _user_system(pid)
    return user + system


def proc_counts(pid: int) -> dict[str, float]:
    """A process's user and system CPU seconds (``/proc/PID/stat``) and its voluntary and
    involuntary context switches, summed over its threads (``/proc/PID/status`` counts
    the one thread): where a forwarded message's extra goes, kernel or user space, and how
    often each process is woken."""
    counts = {"user_s": 0.0, "system_s": 0.0, "voluntary": 0.0, "involuntary": 0.0}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return counts
    counts["user_s"], counts["system_s"] = _user_system(pid)
    for task in tasks:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    counts["voluntary"] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    counts["involuntary"] += int(line.split()[1])
    return counts


def loadavg() -> float:
    return os.getloadavg()[0]


@dataclass
class Setup:
    """One broker under test: where the clients connect, where the queues are declared, and
    every process whose CPU is the broker's."""

    name: str
    client_port: int
    leader_port: int | None  # None: the load generator's own declares place the queues
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    pid_names: dict[int, str] = field(default_factory=dict)
    queue_type: str = ""
    leader_api: tuple[int, str] | None = None  # the leader's management port, its node name
    stops: list[Any] = field(default_factory=list)  # callables, run in reverse at the end

    def stop(self) -> None:
        for stop in reversed(self.stops):
            with contextlib.suppress(Exception):
                stop()


def _stop_proc(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _leveret_env(pythonpath: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def start_leveret_node(
    workdir: Path,
    pythonpath: str,
    *extra: str,
    env: dict[str, str] | None = None,
    management_port: int = 0,
) -> tuple[int, subprocess.Popen[bytes]]:
    """``leveret serve`` with every listener on a free loopback port of its own."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "leveret",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--stream-port",
        str(free_port()),
        "--management-port",
        str(management_port or free_port()),
        "--prometheus-port",
        str(free_port()),
        "--log-level",
        "warning",
        "--data-dir",
        str(workdir / "data"),
        *extra,
    ]
    with open(workdir / "leveret.log", "ab") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own command line
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**_leveret_env(pythonpath), **(env or {})},
            start_new_session=True,
        )
    wait_port(port, proc, 300)
    return port, proc


def start_single(out: Path, pythonpath: str) -> Setup:
    port, proc = start_leveret_node(out / "single", pythonpath)
    s = Setup("single", port, None, [proc], [proc.pid], {proc.pid: "leveret"})
    s.stops.append(lambda: _stop_proc(proc))
    return s


def start_nodes(out: Path, pythonpath: str, name: str, nodes: Sequence[str]) -> Setup:
    """An etcd of its own and one Leveret node per name, all of one cluster; the clients on
    the first node, the queues led by the second."""
    s = Setup(name, 0, 0)
    with _stopped_on_error(s):
        _start_nodes(s, out, pythonpath, nodes)
    return s


@contextlib.contextmanager
def _stopped_on_error(setup: Setup) -> Iterator[None]:
    """Stops what a setup started so far if its start fails (``main`` only stops the setups
    that started)."""
    try:
        yield
    except BaseException:
        setup.stop()
        raise


def _start_nodes(s: Setup, out: Path, pythonpath: str, nodes: Sequence[str]) -> None:
    from leveret.testing.etcd import EtcdServer

    name = s.name
    etcd = EtcdServer().start()
    s.stops.append(etcd.stop)
    assert etcd.process is not None
    s.pids.append(etcd.process.pid)
    s.pid_names[etcd.process.pid] = "etcd"
    env = {"LEVERET_ETCD_PREFIX": f"/bench-{name}/"}
    ports, api = {}, {}
    for node in nodes:
        api[node] = free_port()
        port, proc = start_leveret_node(
            out / f"{name}-{node}",
            pythonpath,
            "--etcd",
            etcd.url,
            "--node-name",
            f"{node}@bench",
            "--cluster-port",
            str(free_port()),
            env=env,
            management_port=api[node],
        )
        s.stops.append(lambda proc=proc: _stop_proc(proc))
        s.procs.append(proc)
        s.pids.append(proc.pid)
        s.pid_names[proc.pid] = f"node {node}"
        ports[node] = port
    s.client_port, s.leader_port = ports[nodes[0]], ports[nodes[1]]
    s.leader_api = (api[nodes[1]], f"{nodes[1]}@bench")
    wait_running(api[nodes[1]], [f"{node}@bench" for node in nodes])


def _api_get(port: int, path: str) -> Any:
    import base64
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
        return json.load(response)


def wait_running(port: int, nodes: Sequence[str], timeout: float = 120) -> None:
    """Until the node behind ``port`` sees every node running: a quorum queue declared
    sooner gets as members only the nodes running then."""
    deadline = time.monotonic() + timeout
    running: set[str] = set()
    while True:
        with contextlib.suppress(OSError):  # the API may listen after the AMQP port
            running = {n["name"] for n in _api_get(port, "/api/nodes") if n.get("running")}
        if running >= set(nodes):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"cluster: running {sorted(running)}, wanted {list(nodes)}")
        time.sleep(0.2)


def start_pair(out: Path, pythonpath: str) -> Setup:
    """etcd and nodes a, b: clients on a, queues led by b."""
    return start_nodes(out, pythonpath, "forwarded", ("a", "b"))


def start_quorum(out: Path, pythonpath: str) -> tuple[Setup, Setup]:
    """etcd and nodes a, b, c; replicated quorum queues led by b: ``quorum-remote`` with the
    clients on a, ``quorum-leader`` with them on b (one cluster, so one set of processes
    whose CPU both count)."""
    remote = start_nodes(out, pythonpath, "quorum-remote", ("a", "b", "c"))
    remote.queue_type = "quorum"
    assert remote.leader_port is not None
    leader = replace(remote, name="quorum-leader", client_port=remote.leader_port, stops=[])
    return remote, leader


def start_workers(out: Path, pythonpath: str, workers: int) -> Setup:
    """``leveret serve --workers N`` (its own etcd) with a ``balanced`` leader policy."""
    workdir = out / "workers"
    port, proc = start_leveret_node(workdir, pythonpath, "--workers", str(workers))
    s = Setup(f"workers{workers}", port, None, [proc])
    s.stops.append(lambda: _stop_proc(proc))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the supervisor serves nothing: its children do
        kids = [k for k in children(proc.pid) if comm(k) != "etcd"]
        etcd = [k for k in children(proc.pid) if comm(k) == "etcd"]
        if len(kids) >= workers and etcd:
            break
        time.sleep(0.5)
    s.pids = [proc.pid, *kids, *etcd]
    s.pid_names = {
        proc.pid: "supervisor",
        **{k: f"worker-{i}" for i, k in enumerate(kids, 1)},
        etcd[0]: "etcd",
    }
    subprocess.run(  # noqa: S603 - our own command line
        [
            sys.executable,
            "-m",
            "leveret",
            "ctl",
            "--data-dir",
            str(workdir / "data"),
            "set_policy",
            "--apply-to",
            "queues",
            "balanced",
            ".*",
            '{"queue-leader-locator": "balanced"}',
        ],
        check=True,
        env=_leveret_env(pythonpath),
        capture_output=True,
        timeout=60,
    )
    return s


def start_rabbit_cluster(out: Path, nodes: int) -> Setup:
    """``nodes`` RabbitMQ nodes of their own (names, ports, directories, one shared cookie),
    node 2..N joined to node 1."""
    ensure_rabbitmq()
    home = out / "rabbit-home"  # the shared Erlang cookie lives here
    home.mkdir(parents=True, exist_ok=True)
    cookie = home / ".erlang.cookie"
    if not cookie.exists():
        cookie.write_text(os.urandom(12).hex().upper())
        cookie.chmod(0o400)
    s = Setup("rabbit", 0, 0)
    names, ports = [], []
    for i in range(1, nodes + 1):
        workdir = out / f"rabbit-{i}"
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        node = f"cb{os.getpid()}-{i}@localhost"
        (workdir / "enabled_plugins").write_text("[].\n")
        (workdir / "rabbitmq.conf").write_text(
            "loopback_users = none\n"
            f"listeners.tcp.1 = 127.0.0.1:{port}\n"
            "vm_memory_high_watermark.relative = 0.2\n"
        )
        env = dict(
            os.environ,
            HOME=str(home),
            RABBITMQ_NODE_PORT=str(port),
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_DIST_PORT=str(free_port()),
            RABBITMQ_NODENAME=node,
            RABBITMQ_MNESIA_BASE=str(workdir / "mnesia"),
            RABBITMQ_LOG_BASE=str(workdir / "log"),
            RABBITMQ_PID_FILE=str(workdir / "rabbit.pid"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(workdir / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(workdir / "rabbitmq"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(workdir / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(workdir / "rabbitmq-env.conf"),
        )
        with open(workdir / "rabbitmq.out", "wb") as log:
            proc = subprocess.Popen(  # noqa: S603 - our own command line
                [RABBIT_BIN], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        s.stops.append(lambda proc=proc: _stop_proc(proc))
        s.procs.append(proc)
        names.append(node)
        ports.append(port)
    ctl_env = dict(os.environ, HOME=str(home))
    for node, port, proc in zip(names, ports, s.procs, strict=True):
        wait_port(port, proc, 180)
        pid = proc.pid
        for _ in range(3):  # the script runs erl, which runs beam.smp
            if comm(pid).startswith("beam"):
                break
            kids = children(pid)
            if not kids:
                break
            pid = kids[0]
        s.pids.append(pid)
        s.pid_names[pid] = node
    for node in names[1:]:
        for verb in (["stop_app"], ["join_cluster", names[0]], ["start_app"]):
            subprocess.run(  # noqa: S603 - a fixed rabbitmqctl command
                [RABBITMQCTL, "-n", node, *verb],
                check=True,
                env=ctl_env,
                capture_output=True,
                timeout=120,
            )
    for port, proc in zip(ports, s.procs, strict=True):
        wait_port(port, proc, 120)
    status = subprocess.run(  # noqa: S603 - a fixed rabbitmqctl command
        [RABBITMQCTL, "-n", names[0], "cluster_status", "--formatter", "json"],
        env=ctl_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    running = json.loads(status)["running_nodes"]
    if len(running) != nodes:
        raise RuntimeError(f"RabbitMQ cluster: running {running}")
    s.client_port, s.leader_port = ports[0], ports[1]
    return s


# -- one run ---------------------------------------------------------------------------------


def predeclare(setup: Setup, flags: Sequence[str], prefix: str, queues: int) -> None:
    """Declare the run's queues on the leader's node, then wait until the clients' node
    knows them (a Leveret node applies etcd's change from its watch)."""
    import pika

    durable = "--durable" in flags
    arguments = {"x-queue-type": setup.queue_type} if setup.queue_type else None
    assert setup.leader_port is not None
    params = pika.ConnectionParameters("127.0.0.1", setup.leader_port, heartbeat=0)
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        for i in range(queues):
            ch.queue_declare(f"{prefix}-{i}", durable=durable, arguments=arguments)
    finally:
        conn.close()
    deadline = time.monotonic() + 20
    params = pika.ConnectionParameters("127.0.0.1", setup.client_port, heartbeat=0)
    while True:
        conn = pika.BlockingConnection(params)
        try:
            ch = conn.channel()
            for i in range(queues):
                ch.queue_declare(f"{prefix}-{i}", passive=True)
            break
        except pika.exceptions.ChannelClosedByBroker:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
        finally:
            if conn.is_open:
                conn.close()
    if setup.queue_type == "quorum" and setup.leader_api:
        for i in range(queues):
            check_replicas(setup.leader_api, f"{prefix}-{i}")


def check_replicas(api: tuple[int, str], queue: str, members: int = 3) -> None:
    """The queue is led by the node it was declared on and has its members, as the leader's
    management API shows it: else the setup would not measure what it says."""
    import urllib.parse

    port, leader = api
    row = _api_get(port, f"/api/queues/%2F/{urllib.parse.quote(queue, safe='')}")
    if row.get("leader") != leader or len(row.get("members") or ()) != members:
        raise RuntimeError(
            f"{queue}: leader {row.get('leader')}, members {row.get('members')}; "
            f"wanted {leader} and {members} members"
        )


def one_run(
    setup: Setup, key: str, rnd: int, args: argparse.Namespace, env: dict[str, str]
) -> dict[str, Any]:
    scenario = SCENARIOS[key]
    flags = scenario_args(scenario, args)
    if "--durable" not in flags:
        # Durable queues (the messages stay transient) on every setup: a Leveret queue
        # declared transient is its node's only (cluster.md's gaps), so it cannot be led
        # by another node.
        flags.append("--durable")
    prefix = f"cb-{setup.name}-{key}-r{rnd}-{os.getpid()}"
    queues = int(flags[flags.index("--queues") + 1]) if "--queues" in flags else 1
    if setup.leader_port is not None:
        predeclare(setup, flags, prefix, queues)
    cmd = [sys.executable, "-m", "bench.loadgen", *flags, *scenario.extra]
    cmd += ["--port", str(setup.client_port), "--queue", prefix, "--label", prefix]
    cmd += ["--broker-pid", ",".join(str(p) for p in setup.pids)]
    if setup.queue_type:
        cmd += ["--queue-type", setup.queue_type]
    before_load = loadavg()
    before = {p: cpu_seconds(p) for p in setup.pids}
    counts = {p: proc_counts(p) for p in setup.pids}
    broker = _Broker(setup.name, setup.client_port, setup.procs[0], setup.pids[0], ROOT, ROOT)
    budget = args.warmup + args.duration + 2 * args.drain_max + 300
    run = run_loadgen(cmd, broker, budget, env)
    split = {setup.pid_names.get(p, str(p)): cpu_seconds(p) - before[p] for p in setup.pids}
    detail = {}
    for p in setup.pids:
        after = proc_counts(p)
        detail[setup.pid_names.get(p, str(p))] = {
            k: round(after[k] - counts[p][k], 3) for k in after
        }
    run.update(
        scenario=key,
        setup=setup.name,
        round=rnd,
        load_before=before_load,
        load_after=loadavg(),
        cpu_split_s={k: round(v, 3) for k, v in split.items()},
        # each process's user and system seconds and context switches over the run
        proc_split=detail,
    )
    return run


def cpu_us(run: dict[str, Any]) -> float | None:
    cpu = run.get("cpu") or {}
    consumed = (run.get("rates") or {}).get("consumed", 0) * run.get("window_s", 0)
    seconds = cpu.get("broker_cpu_s")
    return None if seconds is None or not consumed else seconds / consumed * 1e6


def whole_run_us(run: dict[str, Any]) -> float | None:
    """The brokers' CPU over the whole run (declare to delete) per message routed to a queue:
    the figure to compare where publishers outran consumers (the window's CPU then includes
    enqueues whose deliveries come after it)."""
    split = run.get("cpu_split_s") or {}
    expected = (run.get("verify") or {}).get("expected")
    return sum(split.values()) / expected * 1e6 if split and expected else None


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def render(runs: list[dict[str, Any]]) -> str:
    """One row per scenario and setup: medians of consumed msg/s and CPU per message, the
    CPU ratio to the same scenario's ``single``, verification, load averages."""
    lines = [
        "| scenario | setup | published msg/s | consumed msg/s | CPU µs/msg, window "
        "| CPU µs/msg, whole run | whole run vs single | verified | load avg (before → after) |",
        "|" + "---|" * 9,
    ]
    keys = sorted({r["scenario"] for r in runs})
    order = ["single", "forwarded", "rabbit", *QUORUM_SETUPS]
    setups = sorted(
        {r["setup"] for r in runs},
        key=lambda s: (s not in order, order.index(s) if s in order else 0, s),
    )
    for key in keys:
        base = [r for r in runs if (r["scenario"], r["setup"]) == (key, "single")]
        single = _median([whole_run_us(r) for r in base])
        for name in setups:
            cell = [r for r in runs if (r["scenario"], r["setup"]) == (key, name)]
            if not cell:
                continue
            good = [r for r in cell if "rates" in r]
            published = _median([r["rates"]["published"] for r in good])
            rate = _median([r["rates"]["consumed"] for r in good])
            cpu = _median([cpu_us(r) for r in good])
            whole = _median([whole_run_us(r) for r in cell])
            ratio = f"{whole / single:.2f}x" if whole and single and name != "single" else ""
            ok = sum(bool(r.get("ok")) for r in cell)
            loads = ", ".join(
                f"{r['load_before']:.1f}→{r['load_after']:.1f}" for r in cell if "load_before" in r
            )
            lines.append(
                f"| {key}: {SCENARIOS[key].title} | {name} | {_fmt(published, ',.0f')} "
                f"| {_fmt(rate, ',.0f')} | {_fmt(cpu, '.1f')} | {_fmt(whole, '.1f')} | {ratio} "
                f"| {ok}/{len(cell)} | {loads} |"
            )
    return "\n".join(lines)


def chosen_setups(setups: str, quorum: bool) -> list[str]:
    """The setups a run measures: ``--setups``' names, and with ``--quorum`` the quorum
    setups it names, or all of them when it names none."""
    names = [s for s in setups.split(",") if s]
    if not quorum:
        return [n for n in names if n not in QUORUM_SETUPS]
    if not any(n in QUORUM_SETUPS for n in names):
        names += QUORUM_SETUPS
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.cluster_scenarios", description=__doc__)
    p.add_argument("--scenarios", default="abcde")
    p.add_argument("--setups", default="single,forwarded,rabbit", help="comma-separated")
    p.add_argument(
        "--quorum",
        action="store_true",
        help="also c on quorum queues: " + ", ".join(QUORUM_SETUPS) + " (all of them unless "
        "--setups names some)",
    )
    p.add_argument("--workers", type=int, default=0, help="also e on leveret serve --workers N")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--drain-max", type=float, default=30.0)
    p.add_argument("--deep-count", type=int, default=0)
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--rabbit-nodes", type=int, default=3)
    p.add_argument(
        "--leveret-pythonpath",
        default=str(ROOT / "build" / "builds" / "compiled"),
        help="the Leveret to run (default: python -m tools.builds' compiled build; '' for "
        "the installed one)",
    )
    p.add_argument("--out", default="")
    p.add_argument("--render", default="", help="print the table of a runs.jsonl and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.render:
        lines = Path(args.render).read_text().splitlines()
        print(render([json.loads(line) for line in lines if line]))
        return 0
    keys = [k for k in args.scenarios if k in "abcde"]
    names = chosen_setups(args.setups, args.quorum)
    _raise_nofile()
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    out = Path(args.out or tempfile.mkdtemp(prefix="leveret-cluster-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="leveret-cluster-bench-work-"))
    raw = out / "runs.jsonl"
    env = dict(os.environ)
    # The load generator runs on the checkout's pure source whichever broker it drives.
    env["PYTHONPATH"] = os.pathsep.join((str(ROOT), str(ROOT / "src")))
    setups: dict[str, Setup] = {}
    runs: list[dict[str, Any]] = []
    try:
        if "single" in names or args.workers:
            setups["single"] = start_single(work, args.leveret_pythonpath)
        if "forwarded" in names:
            setups["forwarded"] = start_pair(work, args.leveret_pythonpath)
        if "rabbit" in names or "rabbit-quorum" in names:
            rabbit = start_rabbit_cluster(work, args.rabbit_nodes)
            setups["rabbit"] = rabbit
            if "rabbit-quorum" in names:
                setups["rabbit-quorum"] = replace(
                    rabbit, name="rabbit-quorum", queue_type="quorum", stops=[]
                )
        if "quorum-remote" in names or "quorum-leader" in names:
            remote, leader = start_quorum(work, args.leveret_pythonpath)
            setups["quorum-remote"] = remote  # it owns the processes: stopped even if unused
            if "quorum-leader" in names:
                setups["quorum-leader"] = leader
        if args.workers:
            setups[f"workers{args.workers}"] = start_workers(
                work, args.leveret_pythonpath, args.workers
            )
        for s in setups.values():
            print(f"{s.name}: port {s.client_port} pids {s.pid_names}", file=sys.stderr)
        for rnd in range(1, args.rounds + 1):
            for key in keys:
                for name, setup in setups.items():
                    if name in QUORUM_SETUPS and key != "c":
                        continue
                    if name not in names and name != "single":
                        continue  # started for a setup that shares its processes
                    if name.startswith("workers") and key != "e":
                        continue
                    if name == "single" and "single" not in names and key != "e":
                        continue  # started only as --workers' baseline
                    run = one_run(setup, key, rnd, args, env)
                    runs.append(run)
                    with open(raw, "a") as f:
                        f.write(json.dumps(run) + "\n")
                    print(
                        f"round {rnd} {key} {name}: consumed/s "
                        f"{(run.get('rates') or {}).get('consumed')} cpu µs/msg "
                        f"{_fmt(cpu_us(run), '.1f')} split {run.get('cpu_split_s')} "
                        f"ok {run.get('ok')} load {run['load_before']:.1f}→"
                        f"{run['load_after']:.1f} {'; '.join(run.get('errors') or [])[:300]}",
                        file=sys.stderr,
                    )
                    time.sleep(args.settle)
    finally:
        for s in setups.values():
            s.stop()
        shutil.rmtree(work, ignore_errors=True)
    table = render(runs)
    (out / "table.md").write_text(table + "\n")
    print(table)
    print(f"\nraw results: {raw}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
