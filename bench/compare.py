"""``python -m bench.compare``: both Leveret builds and RabbitMQ in one run, with both load
generators, one markdown table (issue 26).

Starts three brokers on free loopback ports: Leveret's compiled build (what ``pip install .``
makes: ``python -m tools.builds``' output, built first if missing or stale), Leveret's pure
build (the same source, ``src/``) and RabbitMQ 3.10.8 (``bench.run``'s start-up: own node
name, ports and directories). Then, round after round, every scenario with every tool on
every broker in turn, the brokers' order rotated one place each round (``schedule``), so
the machine's noise falls on all three alike: the Go load generator (``--go-loadgen``,
built by the shared bench's ``build-loadgen.sh``; skipped when absent) and the project's
own (``bench.loadgen``).

The table gives medians over rounds: consumed msg/s and the ratio to RabbitMQ for a-f, p50,
p99 and p99.9 latency and the p99 ratio for g and h, the broker's CPU per message, and the
load average the runs saw (the lead re-runs it on a quiet machine: the figures of a shared
machine are noise) and, for g and h, the p99 of ``bench.floor_probe`` run just before each
of their runs (the machine's own tail for g's pattern with no broker) and the steal time of
each run (``/proc/stat``: the host running something else on the VM's CPUs). Raw JSON
lines go to ``OUT/runs.jsonl``, the table to ``OUT/table.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.run import (
    SCENARIOS,
    Broker,
    Scenario,
    _raise_nofile,
    go_flags,
    run_loadgen,
    scenario_args,
    start_leveret,
    start_rabbitmq,
    wait_quiet,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["build_parser", "loadgen_command", "main", "render", "schedule"]

ROOT = Path(__file__).resolve().parent.parent
BROKERS = ("compiled", "pure", "rabbitmq")
# bench.loadgen's scenario h runs its 1000 publishers in 2 processes; the Go tool in one.
GO_SCENARIOS = "abcdefgh"


def _lat(run: dict[str, Any], key: str) -> float | None:
    latency = run.get("latency_us") or {}
    value = latency.get(key)
    if value is None and key == "p99.9":
        value = latency.get("p99_9")
    return None if value is None else float(value) / 1000


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _cpu_us(run: dict[str, Any]) -> float | None:
    cpu = run.get("cpu") or {}
    consumed = (run.get("rates") or {}).get("consumed", 0) * run.get("window_s", 0)
    seconds = cpu.get("broker_cpu_s")
    if seconds is None and "broker_pct" in cpu:
        seconds = cpu["broker_pct"] / 100 * run.get("window_s", 0)
    return None if seconds is None or not consumed else seconds / consumed * 1e6


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def render(runs: list[dict[str, Any]]) -> str:
    """The table of medians: one row per scenario and tool, the three brokers side by side."""
    lines = [
        "| scenario | tool | compiled | pure | RabbitMQ | compiled / RabbitMQ | pure / RabbitMQ "
        "| CPU µs/msg (compiled, pure, RabbitMQ) | verified | load avg |",
        "|" + "---|" * 10,
    ]
    keys = sorted({(r["scenario"], r["tool"]) for r in runs})
    for key, tool in keys:
        cell = {
            b: [r for r in runs if (r["scenario"], r["tool"], r["broker"]) == (key, tool, b)]
            for b in BROKERS
        }
        latency = SCENARIOS[key].latency_target
        shown: dict[str, str] = {}
        figure: dict[str, float | None] = {}
        for b in BROKERS:
            good = [r for r in cell[b] if "rates" in r]
            if latency:
                p50, p99, p999 = (
                    _median([_lat(r, k) for r in good]) for k in ("p50", "p99", "p99.9")
                )
                figure[b] = p99
                shown[b] = f"{_fmt(p50, '.2f')} / {_fmt(p99, '.2f')} / {_fmt(p999, '.2f')} ms"
            else:
                rate = _median([r["rates"]["consumed"] for r in good])
                figure[b] = rate
                shown[b] = f"{_fmt(rate, ',.0f')} msg/s"
        rabbit = figure["rabbitmq"]

        def ratio(mine: float | None, rabbit: float | None, latency: bool) -> str:
            if not mine or not rabbit:
                return "—"
            return f"p99 {mine / rabbit:.2f}x" if latency else f"{mine / rabbit:.2f}x"

        cpu = ", ".join(_fmt(_median([_cpu_us(r) for r in cell[b]]), ".1f") for b in BROKERS)
        verified = ", ".join(
            f"{sum(bool(r.get('ok')) for r in cell[b])}/{len(cell[b])}" for b in BROKERS
        )
        loads = [r["loadavg"] for b in BROKERS for r in cell[b] if "loadavg" in r]
        load = f"{min(loads):.1f} to {max(loads):.1f}" if loads else "—"
        # bench.floor_probe's p99 before each latency run: the machine's own tail then.
        floors = [
            r["floor_us"]["p99"] / 1000 for b in BROKERS for r in cell[b] if r.get("floor_us")
        ]
        if floors:
            load += f"; no-broker p99 {min(floors):.2f} to {max(floors):.2f} ms"
        steals = [r["steal_ms"] for b in BROKERS for r in cell[b] if "steal_ms" in r]
        if latency and steals:
            load += f"; steal {min(steals):.0f} to {max(steals):.0f} ms"
        versus = [ratio(figure[b], rabbit, latency) for b in ("compiled", "pure")]
        lines.append(
            f"| {key}: {SCENARIOS[key].title} | {tool} | {shown['compiled']} | {shown['pure']} "
            f"| {shown['rabbitmq']} | {versus[0]} | {versus[1]} | {cpu} "
            f"| {verified} | {load} |"
        )
    return "\n".join(lines)


def _steal_ms() -> float:
    """Steal time of all the machine's CPUs so far (``/proc/stat``), in ms."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = f.readline().split()
    # cpu user nice system idle iowait irq softirq steal ...
    return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def _floor_probe(seconds: float, env: dict[str, str]) -> dict[str, Any] | None:
    """The machine's own tail just before a latency run (``bench.floor_probe``)."""
    proc = subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, "-m", "bench.floor_probe", str(seconds)],
        capture_output=True,
        text=True,
        env=env,
        timeout=seconds + 60,
        check=False,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    result: dict[str, Any] | None = json.loads(lines[-1]) if lines else None
    return result


def schedule(
    rounds: int, keys: Sequence[str], tools: Sequence[str]
) -> list[tuple[int, str, str, str]]:
    """The runs in order, as (round, scenario, tool, broker): round after round, every
    scenario with every tool on every broker in turn, the brokers' order rotated one place
    each round (compiled, pure, RabbitMQ; then pure, RabbitMQ, compiled; ...).

    Without the rotation the compiled build always ran first after the previous scenario
    on RabbitMQ, and the pure build second: in the Go tool's order b, f, g, h, both ran g
    within about 30 s of the end of RabbitMQ's f (gigabytes of 64 KiB messages taken in
    and freed), RabbitMQ's own g after both. Whatever a run leaves on the machine fell on
    the same builds every round; over rounds a multiple of three each broker now takes
    each place once (docs/benchmarks.md, "g's p99 after f").
    """
    runs: list[tuple[int, str, str, str]] = []
    for rnd in range(1, rounds + 1):
        shift = (rnd - 1) % len(BROKERS)
        order = BROKERS[shift:] + BROKERS[:shift]
        for key in keys:
            for tool in tools:
                if tool == "go" and key not in GO_SCENARIOS:
                    continue
                runs += [(rnd, key, tool, name) for name in order]
    return runs


def loadgen_command(
    tool: str, scenario: Scenario, args: argparse.Namespace, broker: Broker, label: str
) -> list[str]:
    """The command line of one run of ``scenario`` against ``broker``: the Go load
    generator's (``tool`` "go", at ``args.go_loadgen``) or ``bench.loadgen``'s."""
    flags = scenario_args(scenario, args)
    if tool == "go":
        cmd = [args.go_loadgen, *go_flags(flags)]
        cmd += ["-port", str(broker.port), "-broker-pid", str(broker.pid), "-label", label]
    else:
        cmd = [sys.executable, "-m", "bench.loadgen", *flags, *scenario.extra]
        cmd += ["--port", str(broker.port), "--broker-pid", str(broker.pid), "--label", label]
    return cmd


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    p.add_argument("--scenarios", default="abcdefgh")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--drain-max", type=float, default=60.0)
    p.add_argument("--deep-count", type=int, default=200_000)
    p.add_argument("--settle", type=float, default=2.0)
    p.add_argument("--quiet-max", type=float, default=30.0)
    p.add_argument("--tools", default="go,py", help="go (the Go load generator), py, or both")
    p.add_argument(
        "--floor-probe",
        type=float,
        default=5.0,
        help="seconds of bench.floor_probe (no broker) before each latency run; 0: none",
    )
    # build-loadgen.sh's default output.
    p.add_argument("--go-loadgen", default="/tmp/loadgen/loadgen")  # noqa: S108
    p.add_argument("--builds", type=Path, default=ROOT / "build" / "builds")
    p.add_argument("--out", default="")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    keys = [k for k in args.scenarios if k in SCENARIOS and not SCENARIOS[k].amqp10]
    tools = [t for t in args.tools.split(",") if t]
    if "go" in tools and not os.access(args.go_loadgen, os.X_OK):
        print(f"no Go load generator at {args.go_loadgen}: py only", file=sys.stderr)
        tools.remove("go")
    from tools import builds

    builds.build(args.builds)
    _raise_nofile()
    # Stopped with SIGTERM, still stop the brokers this run started (the finally below).
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    out = Path(args.out or tempfile.mkdtemp(prefix="leveret-compare-"))
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "runs.jsonl"
    env = dict(os.environ)
    # The Python load generator runs on the checkout's pure source whichever broker it drives.
    env["PYTHONPATH"] = os.pathsep.join((str(ROOT), str(ROOT / "src")))
    brokers: dict[str, Broker] = {}
    runs: list[dict[str, Any]] = []
    try:
        for name, path in (("compiled", args.builds / "compiled"), ("pure", ROOT / "src")):
            workdir = out / name
            workdir.mkdir(exist_ok=True)
            brokers[name] = start_leveret(str(path), workdir)
        (out / "rabbitmq").mkdir(exist_ok=True)
        brokers["rabbitmq"] = start_rabbitmq(out / "rabbitmq")
        for name, broker in brokers.items():
            print(f"{name}: pid {broker.pid} port {broker.port} {broker.notes}", file=sys.stderr)
        for rnd, key, tool, name in schedule(args.rounds, keys, tools):
            scenario = SCENARIOS[key]
            broker = brokers[name]
            label = f"{key}-{tool}-{name}-r{rnd}"
            cmd = loadgen_command(tool, scenario, args, broker, label)
            floor = None
            if scenario.latency_target and args.floor_probe > 0:
                floor = _floor_probe(args.floor_probe, env)
            load = os.getloadavg()[0]
            budget = args.warmup + args.duration + 2 * args.drain_max + 600
            steal = _steal_ms()
            run = run_loadgen(cmd, broker, budget, env)
            # Time the host ran something else on this VM's CPUs during the run.
            run["steal_ms"] = _steal_ms() - steal
            run.update(scenario=key, tool=tool, broker=name, round=rnd, loadavg=load)
            if floor is not None:
                run["floor_us"] = floor
            runs.append(run)
            with open(raw, "a", encoding="utf-8") as f:
                f.write(json.dumps(run) + "\n")
            print(
                f"round {rnd} {key} {tool} {name}: "
                f"{(run.get('rates') or {}).get('consumed')} msg/s "
                f"p99 {_lat(run, 'p99')} ms ok {run.get('ok')} load {load:.1f}"
                + (f" floor p99 {floor.get('p99')} us" if floor else ""),
                file=sys.stderr,
            )
            time.sleep(args.settle)
            wait_quiet(args.quiet_max)
    finally:
        for broker in brokers.values():
            broker.stop()
    table = render(runs)
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    print(f"\nraw results: {raw}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
