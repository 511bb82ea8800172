"""``python -m bench.run``: Leveret and RabbitMQ side by side, scenarios a-i, one markdown table.

Starts Leveret (``python -m leveret serve``) and RabbitMQ (Debian's ``rabbitmq-server``,
installed with apt-get if missing) on free loopback ports, each in its own temporary
directory; runs every scenario on each broker in turn (A B A B ...) for ``--rounds`` rounds with
``python -m bench.loadgen``; samples each broker's RSS while a scenario runs; stops both
brokers; prints the table of medians.  The raw JSON lines go to ``--out``.

``--check-tool`` instead runs the Go reference load generator and this project's load
generator against RabbitMQ in turn, to show the tool's ceiling.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.loadgen import machine_cpu

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SCENARIOS", "Scenario", "build_parser", "main", "render_table"]


@dataclass(frozen=True)
class Scenario:
    """One scenario of issue 4: its flags (shared by bench.loadgen and the Go tool)."""

    key: str
    title: str
    flags: tuple[str, ...]
    extra: tuple[str, ...] = ()  # bench.loadgen only
    latency_target: bool = False  # compared on p99 latency rather than throughput
    deep: bool = False
    amqp10: bool = False  # run by bench.amqp10_load over AMQP 1.0 instead of bench.loadgen


SCENARIOS: dict[str, Scenario] = {
    s.key: s
    for s in (
        Scenario("a", "1P 1C, 16 B, auto-ack", ("--size", "16", "--autoack")),
        Scenario("b", "16 B, manual ack, prefetch 100", ("--size", "16", "--prefetch", "100")),
        Scenario(
            "c",
            "1 KiB, confirms (1000 in flight), persistent, durable, manual ack",
            (
                "--size",
                "1024",
                "--confirm",
                "1000",
                "--persistent",
                "--durable",
                "--prefetch",
                "100",
            ),
        ),
        Scenario(
            "d",
            "fanout to 4 queues, 4 consumers, 256 B",
            (
                "--size",
                "256",
                "--exchange-type",
                "fanout",
                "--queues",
                "4",
                "--consumers",
                "4",
                "--prefetch",
                "100",
            ),
        ),
        Scenario(
            "e",
            "10 P, 10 C, 10 queues, 256 B",
            (
                "--size",
                "256",
                "--producers",
                "10",
                "--consumers",
                "10",
                "--queues",
                "10",
                "--prefetch",
                "100",
            ),
        ),
        Scenario("f", "64 KiB bodies", ("--size", "65536", "--prefetch", "100")),
        Scenario(
            "g",
            "16 B at a fixed 1000 msg/s (latency)",
            ("--size", "16", "--rate", "1000", "--prefetch", "100"),
            latency_target=True,
        ),
        Scenario(
            "h",
            "1000 connections, 1 msg/s each (memory, latency)",
            ("--size", "16", "--producers", "1000", "--rate", "1", "--prefetch", "100"),
            extra=("--pub-procs", "2"),
            latency_target=True,
        ),
        Scenario(
            "i",
            "queue grows to N messages with no consumer, then drains",
            ("--size", "16", "--prefetch", "100"),
            deep=True,
        ),
        # Scenarios a and c over AMQP 1.0 (issue 14): Leveret's 1.0 front end against
        # RabbitMQ's 1.0 plugin (rabbitmq_amqp1_0, enabled when these run).
        # j's consumer grants 50,000 credit: a's 0-9-1 consumer has no prefetch limit, and
        # with 1,000 (topped up at half) both brokers' deliveries waited for flow frames.
        Scenario(
            "j",
            "a over AMQP 1.0: 16 B, both links pre-settled",
            ("--scenario", "a", "--credit", "50000"),
            amqp10=True,
        ),
        Scenario(
            "k",
            "c over AMQP 1.0: 1 KiB durable, 1000 unsettled in flight, each accepted",
            ("--scenario", "c", "--confirm", "1000"),
            amqp10=True,
        ),
    )
}
# The address prefix of a queue on each broker: RabbitMQ 3.10's plugin has only v1 addresses.
AMQP10_PREFIX = {"leveret": "/queues/", "rabbitmq": "/amq/queue/"}


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB, (0, 0) if it is gone."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass
class Broker:
    """A broker process this runner started (and will stop)."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    pid: int  # the process doing the work (beam.smp for RabbitMQ)
    workdir: Path
    log: Path
    notes: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # RabbitMQ's helpers (erl_child_setup, inet_gethost) live in the group we started.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


LEVERET_CMD = (sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1")


def start_leveret(
    pythonpath: str | None, workdir: Path, *, log_level: str = "warning", timeout: float = 600
) -> Broker:
    port = free_port()
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    log = workdir / "leveret.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own command line
            [
                *LEVERET_CMD,
                "--port",
                str(port),
                "--log-level",
                log_level,
                # Its own store, never the user's default data directory.
                "--data-dir",
                str(workdir / "leveret-data"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    wait_port(port, proc, timeout)
    # Which build runs (pure Python or the compiled hot path), for the table's notes.
    build = subprocess.run(
        [sys.executable, "-c", "from leveret import build_info; print(build_info.describe())"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return Broker("leveret", port, proc, proc.pid, workdir, log, [build or "build unknown"])


RABBIT_BIN = "/usr/lib/rabbitmq/bin/rabbitmq-server"
APT = "/usr/bin/apt-get"


def ensure_rabbitmq() -> str:
    """The rabbitmq-server script to run (installing Debian's package if missing)."""
    if not os.path.exists(RABBIT_BIN):
        print("installing rabbitmq-server with apt-get ...", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run([APT, "update"], check=True, env=env, timeout=600)  # noqa: S603
        subprocess.run(  # noqa: S603 - a fixed apt-get command
            [APT, "install", "-y", "--no-install-recommends", "rabbitmq-server"],
            check=True,
            env=env,
            timeout=900,
        )
    return RABBIT_BIN


def start_rabbitmq(workdir: Path, *, amqp10: bool = False, plugins: tuple[str, ...] = ()) -> Broker:
    """A RabbitMQ node of its own (node name, ports, directories under ``workdir``), with
    ``plugins`` enabled (and the AMQP 1.0 plugin if ``amqp10``)."""
    script = ensure_rabbitmq()
    port, dist = free_port(), free_port()
    node = f"bench{os.getpid()}@localhost"
    enabled = [*plugins, "rabbitmq_amqp1_0"] if amqp10 else list(plugins)
    (workdir / "enabled_plugins").write_text(f"[{','.join(enabled)}].\n")
    conf = workdir / "rabbitmq.conf"
    conf.write_text(
        "loopback_users = none\n"
        f"listeners.tcp.1 = 127.0.0.1:{port}\n"
        "vm_memory_high_watermark.relative = 0.4\n"
    )
    env = dict(
        os.environ,
        HOME=str(workdir),  # the Erlang cookie goes here
        RABBITMQ_NODE_PORT=str(port),
        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
        RABBITMQ_DIST_PORT=str(dist),
        RABBITMQ_NODENAME=node,
        RABBITMQ_MNESIA_BASE=str(workdir / "mnesia"),
        RABBITMQ_LOG_BASE=str(workdir / "log"),
        RABBITMQ_PID_FILE=str(workdir / "rabbit.pid"),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(workdir / "enabled_plugins"),
        RABBITMQ_CONFIG_FILE=str(workdir / "rabbitmq"),
        RABBITMQ_ADVANCED_CONFIG_FILE=str(workdir / "advanced.config"),
        RABBITMQ_CONF_ENV_FILE=str(workdir / "rabbitmq-env.conf"),
    )
    log = workdir / "rabbitmq.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own command line
            [script], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    wait_port(port, proc, 120)
    pid = proc.pid
    for _ in range(3):  # the script may be a shell that runs erl -> beam.smp
        if comm(pid).startswith("beam"):
            break
        kids = children(pid)
        if not kids:
            break
        pid = kids[0]
    version = ""
    with contextlib.suppress(OSError):
        version = subprocess.run(
            ["/usr/bin/dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    return Broker("rabbitmq", port, proc, pid, workdir, log, [f"rabbitmq-server {version}"])


# -- running scenarios -----------------------------------------------------------------------


class RssSampler(threading.Thread):
    """Samples a process's VmRSS every ``interval`` seconds until stopped."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.peak = max(self.peak, rss_kib(self.pid)[0])
            self.halt.wait(self.interval)

    def stop(self) -> int:
        self.halt.set()
        self.join(5)
        self.peak = max(self.peak, rss_kib(self.pid)[0])
        return self.peak


def scenario_args(s: Scenario, args: argparse.Namespace) -> list[str]:
    flags = [*s.flags, "--warmup", str(args.warmup), "--duration", str(args.duration)]
    if s.deep:
        flags += ["--deep", str(args.deep_count), "--drain-max", str(max(120, args.drain_max))]
    else:
        flags += ["--drain-max", str(args.drain_max)]
    return flags


def run_loadgen(
    cmd: list[str], broker: Broker, timeout: float, env: dict[str, str]
) -> dict[str, Any]:
    sampler = RssSampler(broker.pid)
    sampler.start()
    try:
        proc = subprocess.run(  # noqa: S603 - our own command line
            cmd, capture_output=True, text=True, timeout=timeout, env=env
        )
        lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
        if lines:
            result: dict[str, Any] = json.loads(lines[-1])
        else:
            result = {"ok": False, "errors": [f"no JSON (rc {proc.returncode})"]}
        if proc.returncode not in (0, 1):
            result["errors"] = [*(result.get("errors") or []), proc.stderr[-2000:]]
        if proc.stderr.strip():
            result["stderr_tail"] = proc.stderr[-2000:]
    except subprocess.TimeoutExpired:
        result = {"ok": False, "errors": [f"timed out after {timeout} s"]}
    result["peak_rss_kib"] = sampler.stop()
    result["broker_name"] = broker.name
    return result


def go_flags(flags: Sequence[str]) -> list[str]:
    """The same flags in the Go tool's spelling (single dash)."""
    return [f[1:] if f.startswith("--") else f for f in flags]


# -- the table -------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Medians over rounds of one scenario on one broker."""
    good = [r for r in runs if "rates" in r]

    def lat(key: str) -> list[float]:
        return [r["latency_us"][key] / 1000 for r in good if r.get("latency_us")]

    cpu_per_m = []
    for r in good:
        cpu = r.get("cpu", {})
        consumed = r["rates"]["consumed"] * r.get("window_s", 0)
        broker_s = cpu.get("broker_cpu_s")
        if broker_s is None and "broker_pct" in cpu:  # the Go tool reports % only
            broker_s = cpu["broker_pct"] / 100 * r.get("window_s", 0)
        if broker_s is not None and consumed > 0:
            cpu_per_m.append(broker_s / consumed * 1e6)
    return {
        "consumed": _median([r["rates"]["consumed"] for r in good]),
        "published": _median([r["rates"]["published"] for r in good]),
        "confirmed": _median([r["rates"]["confirmed"] for r in good]),
        "p50": _median(lat("p50")),
        "p99": _median(lat("p99")),
        "cpu_per_m": _median(cpu_per_m),
        "rss_mib": _median([r["peak_rss_kib"] / 1024 for r in runs if r.get("peak_rss_kib")]),
        "loadgen_pct": _median([r["cpu"]["loadgen_pct"] for r in good if r.get("cpu")]),
        "ok": float(sum(bool(r.get("ok")) for r in runs)),
        "n": float(len(runs)),
    }


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "—" if x is None else format(x, spec)


def render_table(
    results: dict[str, dict[str, list[dict[str, Any]]]], names: tuple[str, str]
) -> str:
    """One markdown table; ``results[scenario][broker]`` holds that cell's runs."""
    a, b = names
    head = (
        f"| scenario | {a} msg/s | {b} msg/s | ratio | {a} p50 / p99 ms | {b} p50 / p99 ms "
        f"| {a} CPU s/M msg | {b} CPU s/M msg | {a} peak RSS MiB | {b} peak RSS MiB "
        f"| verified ({a}, {b}) | tool CPU % |"
    )
    lines = [head, "|" + "---|" * 12]
    for key, per in results.items():
        s = SCENARIOS[key]
        x, y = summarize(per.get(a, [])), summarize(per.get(b, []))
        if s.latency_target:
            ratio = f"p99 {x['p99'] / y['p99']:.2f}x" if x["p99"] and y["p99"] else "—"
        else:
            ratio = (
                f"{x['consumed'] / y['consumed']:.2f}x" if x["consumed"] and y["consumed"] else "—"
            )
        label = f"{key}: {s.title}"
        lines.append(
            f"| {label} | {_fmt(x['consumed'])} | {_fmt(y['consumed'])} | {ratio} "
            f"| {_fmt(x['p50'], '.2f')} / {_fmt(x['p99'], '.2f')} "
            f"| {_fmt(y['p50'], '.2f')} / {_fmt(y['p99'], '.2f')} "
            f"| {_fmt(x['cpu_per_m'], '.1f')} | {_fmt(y['cpu_per_m'], '.1f')} "
            f"| {_fmt(x['rss_mib'], '.0f')} | {_fmt(y['rss_mib'], '.0f')} "
            f"| {x['ok']:.0f}/{x['n']:.0f}, {y['ok']:.0f}/{y['n']:.0f} "
            f"| {_fmt(x['loadgen_pct'], '.0f')}, {_fmt(y['loadgen_pct'], '.0f')} |"
        )
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument(
        "--scenarios",
        default="abcdefghi",
        help="e.g. abdefg or a,b,g; j and k are a and c over AMQP 1.0 (not run by default)",
    )
    p.add_argument("--deep-count", type=int, default=1_000_000, help="messages in scenario i")
    p.add_argument("--drain-max", type=float, default=60.0)
    p.add_argument("--settle", type=float, default=2.0, help="seconds between runs")
    p.add_argument(
        "--quiet-max",
        type=float,
        default=60.0,
        help="after each run, wait up to this long until the machine is quiet (a broker's "
        "clean-up of a deleted deep queue would otherwise load the next run)",
    )
    p.add_argument("--out", default="", help="directory for the raw JSON lines")
    p.add_argument(
        "--leveret-pythonpath",
        default="",
        help="PYTHONPATH for the Leveret process (e.g. an exported snapshot's src)",
    )
    p.add_argument(
        "--check-tool",
        metavar="GO_LOADGEN",
        default="",
        help="compare this tool with the Go reference tool against RabbitMQ instead",
    )
    return p


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    keys = [k for k in args.scenarios.replace(",", "").lower() if k in SCENARIOS]
    if not keys:
        print("no known scenario in --scenarios", file=sys.stderr)
        return 2
    _raise_nofile()
    out = Path(args.out or tempfile.mkdtemp(prefix="leveret-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "runs.jsonl"
    env = dict(os.environ)
    repo = str(Path(__file__).resolve().parent.parent)
    # The load generator is the same program whichever Leveret is measured: the checkout's
    # bench/ on the checkout's pure-Python codec (src/), never a compiled Leveret build.
    env["PYTHONPATH"] = os.pathsep.join(
        x for x in (repo, str(Path(repo) / "src"), env.get("PYTHONPATH", "")) if x
    )
    brokers: list[Broker] = []
    results: dict[str, dict[str, list[dict[str, Any]]]] = {k: {} for k in keys}
    try:
        if not args.check_tool:
            brokers.append(start_leveret(args.leveret_pythonpath, _mkdir(out / "leveret")))
        amqp10 = any(SCENARIOS[k].amqp10 for k in keys)
        brokers.append(start_rabbitmq(_mkdir(out / "rabbitmq"), amqp10=amqp10))
        # Tools to run: (label, command prefix, broker)
        plan: list[tuple[str, list[str], Broker]] = []
        py = [sys.executable, "-m", "bench.loadgen"]
        if args.check_tool:
            rabbit = brokers[0]
            plan = [("leveret-bench", py, rabbit), ("go-loadgen", [args.check_tool], rabbit)]
        else:
            plan = [(b.name, py, b) for b in brokers]
        for b in brokers:
            notes = " ".join(b.notes)
            print(f"{b.name}: pid {b.pid} on 127.0.0.1:{b.port} {notes}", file=sys.stderr)
        for rnd in range(1, args.rounds + 1):
            for key in keys:
                s = SCENARIOS[key]
                for name, prefix, broker in plan:
                    go = name == "go-loadgen"
                    if go and (s.deep or s.extra or s.amqp10):
                        continue
                    flags = scenario_args(s, args)
                    if s.amqp10:
                        prefix = [sys.executable, "-m", "bench.amqp10_load"]
                        flags += ["--prefix", AMQP10_PREFIX.get(broker.name, "/queues/")]
                    cmd = [
                        *prefix,
                        *(go_flags(flags) if go else [*flags, *s.extra]),
                        *(["-port", str(broker.port)] if go else ["--port", str(broker.port)]),
                        *(
                            ["-broker-pid", str(broker.pid)]
                            if go
                            else ["--broker-pid", str(broker.pid)]
                        ),
                        *(["-label", f"{key}-r{rnd}"] if go else ["--label", f"{key}-r{rnd}"]),
                    ]
                    budget = args.warmup + args.duration + 2 * args.drain_max + 600
                    r = run_loadgen(cmd, broker, budget, env)
                    r["scenario"], r["round"], r["tool_name"] = key, rnd, name
                    results[key].setdefault(name, []).append(r)
                    with open(raw, "a") as f:
                        f.write(json.dumps(r) + "\n")
                    rate = r.get("rates", {}).get("consumed")
                    lat = (r.get("latency_us") or {}).get("p99")
                    print(
                        f"round {rnd} {key} {name}: consumed/s {rate} p99 us {lat} "
                        f"ok {r.get('ok')} rss {r['peak_rss_kib'] // 1024} MiB "
                        f"{'; '.join(r.get('errors') or [])[:300]}",
                        file=sys.stderr,
                    )
                    time.sleep(args.settle)
                    waited = wait_quiet(args.quiet_max)
                    if waited > 1:
                        print(
                            f"  (waited {waited:.1f} s for the machine to go quiet)",
                            file=sys.stderr,
                        )
    finally:
        for b in brokers:
            b.stop()
    names = ("leveret-bench", "go-loadgen") if args.check_tool else ("leveret", "rabbitmq")
    table = render_table(results, names)
    (out / "table.md").write_text(table + "\n")
    print(table)
    print(f"\nraw results: {raw}", file=sys.stderr)
    return 0


def wait_quiet(max_wait: float, *, busy_cores: float = 0.3, window: float = 0.5) -> float:
    """Wait until the whole machine used less than ``busy_cores`` over ``window`` seconds, or
    ``max_wait`` passed; returns the seconds waited."""
    ncpu = os.cpu_count() or 1
    start = time.monotonic()
    while time.monotonic() - start < max_wait:
        busy0, total0 = machine_cpu()
        time.sleep(window)
        busy1, total1 = machine_cpu()
        if total1 > total0 and (busy1 - busy0) / (total1 - total0) * ncpu < busy_cores:
            break
    return time.monotonic() - start


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    raise SystemExit(main())
