"""Recording RabbitMQ's outcome of every side-by-side scenario into ``recorded.json``.

Owned by the conformance package: ``python -m conformance record [NAME ...]`` runs the
scenarios of ``conformance/scenarios.py`` against a RabbitMQ node (default: the one on
127.0.0.1:5672) and writes each outcome next to the scenario's name; ``tests/conformance``
compares Leveret with this file. Recording a subset keeps the other entries.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from conformance import brokers
from conformance.scenarios import SCENARIOS, run

RECORDED = Path(__file__).resolve().parent / "recorded.json"


def main(url: str, names: list[str]) -> int:
    target = brokers.rabbitmq(url)
    if not brokers.reachable(target):
        print(f"RabbitMQ is not reachable at {target.host}:{target.port}", file=sys.stderr)
        return 2
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    data = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
    meta = data.pop("_meta", {})
    chosen = [SCENARIOS[n] for n in names] if names else list(SCENARIOS.values())
    started = time.monotonic()
    for sc in chosen:
        outcome = run(sc, target.host, target.port)
        data[sc.name] = {"area": sc.area, "rabbitmq": outcome}
        print(f"{sc.name}: {json.dumps(outcome)[:160]}", flush=True)
    known = {k: v for k, v in sorted(data.items()) if k in SCENARIOS}
    meta = {
        "broker": "RabbitMQ 3.10.8",
        "url": f"amqp://{target.host}:{target.port}{'/' + target.vhost}",
        "recorded_with": "python -m conformance record",
        **{k: v for k, v in meta.items() if k == "note"},
    }
    RECORDED.write_text(json.dumps({"_meta": meta, **known}, indent=1) + "\n")
    print(f"{len(chosen)} scenario(s) in {time.monotonic() - started:.1f} s -> {RECORDED}")
    return 0
