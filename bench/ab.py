"""``python -m bench.ab A_PATH B_PATH``: two Leveret builds (two ``PYTHONPATH``s: a
snapshot's ``src``, a compiled build's directory) on one scenario, run by run: A, B, then
B, A, ... (``order``), each run against a broker of its own started for it, so what a run
leaves on the machine and the machine's drift fall on both alike.

``bench.compare`` cannot compare two commits (it runs the pure build from its own checkout);
this is the A/B that settled whether a change moved h's pure-build tail (docs/benchmarks.md,
"a-h on a quiet machine after f's large frames were read into the loop's buffer"), whose
runs swing 3-10x between rounds on every broker, so only many interleaved runs tell.

Each run's JSON (the load generator's, with ``build``, ``round``, ``loadavg`` and
``steal_ms``) goes to ``OUT/runs.jsonl``; a line per run and the medians to stderr and
stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.compare import _cpu_us, _lat, _steal_ms, loadgen_command
from bench.run import (
    SCENARIOS,
    _raise_nofile,
    run_loadgen,
    start_leveret,
    wait_quiet,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main", "order"]

ROOT = Path(__file__).resolve().parent.parent


def order(rounds: int) -> list[tuple[int, str]]:
    """The runs as (round, build): A then B in even rounds, B then A in odd ones, so
    neither always runs first after the other."""
    runs: list[tuple[int, str]] = []
    for rnd in range(rounds):
        pair = ("A", "B") if rnd % 2 == 0 else ("B", "A")
        runs += [(rnd, name) for name in pair]
    return runs


def _summary(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("A", "B"):
        mine = [r for r in runs if r["build"] == name]
        if key in "gh":
            values = [v for v in (_lat(r, "p99") for r in mine) if v is not None]
            out[f"{name}_p99_ms"] = sorted(values)
            out[f"{name}_p99_median"] = statistics.median(values) if values else None
        else:
            rates = [((r.get("rates") or {}).get("consumed")) for r in mine]
            values = [v for v in rates if v is not None]
            out[f"{name}_consumed"] = sorted(values)
            out[f"{name}_consumed_median"] = statistics.median(values) if values else None
        cpus = [v for v in (_cpu_us(r) for r in mine) if v is not None]
        out[f"{name}_cpu_us_median"] = statistics.median(cpus) if cpus else None
        out[f"{name}_verified"] = sum(1 for r in mine if r.get("ok"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__)
    p.add_argument("a", help="build A: its PYTHONPATH")
    p.add_argument("b", help="build B: its PYTHONPATH")
    p.add_argument("--scenario", default="h")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--tool", choices=("go", "py"), default="go")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--drain-max", type=float, default=60.0)
    p.add_argument("--deep-count", type=int, default=200_000)
    p.add_argument("--go-loadgen", default="/tmp/loadgen/loadgen")  # noqa: S108
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    scenario = SCENARIOS[args.scenario]
    if args.tool == "go" and not os.access(args.go_loadgen, os.X_OK):
        print(f"no Go load generator at {args.go_loadgen}", file=sys.stderr)
        return 2
    _raise_nofile()
    out = Path(args.out or tempfile.mkdtemp(prefix="leveret-ab-"))
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # The Python load generator runs on the checkout's pure source whichever build it drives.
    env["PYTHONPATH"] = os.pathsep.join((str(ROOT), str(ROOT / "src")))
    builds = {"A": args.a, "B": args.b}
    runs: list[dict[str, Any]] = []
    for rnd, name in order(args.rounds):
        workdir = out / f"{name}{rnd}"
        workdir.mkdir(exist_ok=True)
        broker = start_leveret(builds[name], workdir)
        try:
            label = f"{args.scenario}-{name}-r{rnd}"
            cmd = loadgen_command(args.tool, scenario, args, broker, label)
            load = os.getloadavg()[0]
            steal = _steal_ms()
            budget = args.warmup + args.duration + 2 * args.drain_max + 600
            run = run_loadgen(cmd, broker, budget, env)
            run["steal_ms"] = _steal_ms() - steal
            run.update(build=name, round=rnd, loadavg=load, path=builds[name])
        finally:
            broker.stop()
        runs.append(run)
        with open(out / "runs.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(run) + "\n")
        print(
            f"round {rnd} {name}: {(run.get('rates') or {}).get('consumed')} msg/s "
            f"p99 {_lat(run, 'p99')} ms cpu {_cpu_us(run)} us ok {run.get('ok')} "
            f"load {load:.1f}",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(2.0)
        wait_quiet(30.0)
    print(json.dumps(_summary(runs, args.scenario)))
    print(f"raw results: {out / 'runs.jsonl'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
