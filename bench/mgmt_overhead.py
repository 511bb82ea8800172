"""``python -m bench.mgmt_overhead``: what the management plane costs the AMQP hot path.

Runs ``bench.loadgen`` scenarios (a: 16 B auto-ack; b: 16 B, manual ack, prefetch 100;
c: 1 KiB, confirms, persistent, durable, manual ack) against Leveret brokers in turn, round
after round (A B C A B C ...), and prints the medians of the consumed rate and of the
broker's CPU per message:

- ``before``: a broker from another source tree (``--before-src``, e.g. ``git archive main
  src`` unpacked), without the management counters;
- ``off``: this tree with ``--no-management`` (the counters on the hot path, no sampler);
- ``polled``: this tree with the HTTP API and Prometheus on, the counters sampled every
  5 s, and the API polled once a second (overview, queues, connections, channels, /metrics),
  as a dashboard would.

Every broker listens on a free port and keeps its data in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

SCENARIOS = {
    "a": ["--size", "16", "--autoack"],
    "b": ["--size", "16", "--prefetch", "100"],
    "c": [
        "--size",
        "1024",
        "--confirm",
        "1000",
        "--persistent",
        "--durable",
        "--prefetch",
        "100",
    ],
}
_AMQP = re.compile(r"listening on amqp://127\.0\.0\.1:(\d+)")
_HTTP = re.compile(r"web UI listening on (http://\S+)")
_PROM = re.compile(r"Prometheus metrics listening on (http://\S+)")


class Broker:
    def __init__(self, variant: str, before_src: str | None, after_src: str | None) -> None:
        self.data = tempfile.mkdtemp(prefix="leveret-mgmt-bench-")
        cmd = [sys.executable, "-m", "leveret", "serve", "--port", "0", "--data-dir", self.data]
        env = dict(os.environ)
        if variant == "before":
            assert before_src is not None
            env["PYTHONPATH"] = before_src
        else:
            if after_src:
                env["PYTHONPATH"] = after_src
            if variant == "off":
                cmd.append("--no-management")
            else:
                cmd += ["--management-port", "0", "--prometheus-port", "0"]
        self.proc = subprocess.Popen(  # noqa: S603 - our own command line
            cmd, stderr=subprocess.PIPE, text=True, env=env
        )
        self.port = 0
        self.http = self.prom = ""
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 30
        want_http = variant == "polled"
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            if m := _AMQP.search(line):
                self.port = int(m.group(1))
            if m := _HTTP.search(line):
                self.http = m.group(1)
            if m := _PROM.search(line):
                self.prom = m.group(1)
            if self.port and (not want_http or (self.http and self.prom)):
                break
        if not self.port:
            self.stop()
            raise RuntimeError(f"{variant} broker did not start")
        stream = self.proc.stderr
        threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        shutil.rmtree(self.data, ignore_errors=True)


def _poll(broker: Broker, stop: threading.Event) -> None:
    session = requests.Session()
    session.auth = ("guest", "guest")
    while not stop.wait(1.0):
        for path in ("overview", "queues", "connections", "channels"):
            session.get(f"{broker.http}/api/{path}", timeout=5)
        session.get(f"{broker.prom}/metrics", timeout=5)


def run_once(variant: str, scenario: str, args: argparse.Namespace) -> dict[str, Any]:
    broker = Broker(variant, args.before_src, args.after_src)
    stop = threading.Event()
    poller = None
    if variant == "polled":
        poller = threading.Thread(target=_poll, args=(broker, stop), daemon=True)
        poller.start()
    try:
        out = subprocess.run(  # noqa: S603 - our own command line
            [
                sys.executable,
                "-m",
                "bench.loadgen",
                "--port",
                str(broker.port),
                "--duration",
                str(args.duration),
                "--warmup",
                str(args.warmup),
                "--broker-pid",
                str(broker.proc.pid),
                *SCENARIOS[scenario],
            ],
            capture_output=True,
            text=True,
            timeout=args.duration + args.warmup + 120,
            check=True,
        )
    finally:
        stop.set()
        if poller is not None:
            poller.join(5)
        broker.stop()
    result = json.loads(out.stdout.strip().splitlines()[-1])
    consumed = result["rates"]["consumed"]
    cpu = result["cpu"]["broker_cpu_s"]
    window = result["window_s"]
    return {
        "variant": variant,
        "scenario": scenario,
        "consumed": consumed,
        "us_per_msg": cpu / (consumed * window) * 1e6 if consumed else float("nan"),
        "other_pct": result["cpu"]["other_pct"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mgmt_overhead")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--scenarios", default="ac")
    parser.add_argument("--before-src", help="src/ of the tree to compare with (no counters)")
    parser.add_argument(
        "--after-src", help="PYTHONPATH for this tree's brokers (e.g. build/compiled)"
    )
    parser.add_argument("--out", help="file for the raw JSON lines")
    args = parser.parse_args(argv)
    variants = (["before"] if args.before_src else []) + ["off", "polled"]
    rows: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for scenario in args.scenarios:
            for variant in variants:
                row = run_once(variant, scenario, args)
                row["round"] = round_
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                if args.out:
                    with Path(args.out).open("a") as f:
                        f.write(json.dumps(row) + "\n")
    print("| scenario | variant | consumed msg/s (median) | broker µs/msg (median) | runs |")
    print("|---|---|---|---|---|")
    for scenario in args.scenarios:
        for variant in variants:
            mine = [r for r in rows if r["scenario"] == scenario and r["variant"] == variant]
            rate = statistics.median(r["consumed"] for r in mine)
            cost = statistics.median(r["us_per_msg"] for r in mine)
            print(f"| {scenario} | {variant} | {rate:,.0f} | {cost:.1f} | {len(mine)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
