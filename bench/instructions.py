"""``python -m bench.instructions``: instructions per message of the in-memory 0-9-1 path,
counted by valgrind's callgrind, for comparing two builds on a busy machine.

Timings on a shared machine are noise; instruction counts are not. Each scenario of
``bench.amqp10_path`` (``--protocol 091``) runs twice under ``valgrind --tool=callgrind``,
with ``--count`` and with twice as many messages, and the difference of the two totals
divided by ``--count`` is the cost of one message (start-up, imports and the handshake
cancel out). ``PYTHONHASHSEED`` is fixed so that the runs repeat. Run it with
``PYTHONPATH=build/builds/compiled`` for the compiled build (``python -m tools.builds``, or
``pip install --target`` of the wheel ``pip wheel .`` makes): there only the broker's side
is counted (callgrind collects inside the compiled entry points the
workload calls: ``data_received``, ``run_turn``, ``take_output``), unless ``--whole`` asks for
the client's side too. The pure-Python build has no such symbols: use ``--whole`` there.
Python's cyclic garbage collector runs at allocation counts, so its share of two runs is not
proportional to their lengths: ``--no-gc`` leaves it out, for the cost of the code path alone.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["build_parser", "instructions", "main"]

_TOTALS = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


# bench.amqp10_path as __main__, with the arguments that follow.
_RUN = "import runpy; {gc}runpy.run_module('bench.amqp10_path', run_name='__main__')"
# The broker's entry points in the compiled build (mypyc's Python-level wrappers).
SERVER_ENTRIES = ("data_received", "run_turn", "take_output")


def instructions(
    scenario: str,
    count: int,
    queue_type: str = "classic",
    *,
    whole: bool = False,
    gc: bool = True,
) -> int:
    """Instructions (callgrind's Ir) of one run of ``bench.amqp10_path`` with ``count``
    messages: the broker's side, or with ``whole`` the whole process (start-up included);
    without ``gc``, with Python's cyclic garbage collector off."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        toggles = [] if whole else [f"--toggle-collect=CPyPy_*___{f}" for f in SERVER_ENTRIES]
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            *toggles,
            sys.executable,
            "-c",
            _RUN.format(gc="" if gc else "import gc; gc.disable(); "),
            "--protocol",
            "091",
            "--scenario",
            scenario,
            "--queue-type",
            queue_type,
            "--count",
            str(count),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, env=env, capture_output=True)  # noqa: S603
        match = _TOTALS.search(out.read_bytes())
        if match is None:
            raise RuntimeError(f"no totals in {out}")
        return int(match.group(1))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--scenarios", default="abc", help="scenarios of bench.amqp10_path")
    p.add_argument("--count", type=int, default=20_000)
    p.add_argument("--queue-type", choices=("classic", "quorum", "priority"), default="classic")
    p.add_argument("--whole", action="store_true", help="count the whole process")
    p.add_argument("--no-gc", action="store_true", help="with the cyclic GC off")
    return p


def main() -> None:
    args = build_parser().parse_args()
    for scenario in args.scenarios:
        kw = {"whole": args.whole, "gc": not args.no_gc}
        one = instructions(scenario, args.count, args.queue_type, **kw)
        two = instructions(scenario, 2 * args.count, args.queue_type, **kw)
        if not two:
            raise SystemExit("nothing counted: not the compiled build? (--whole counts all)")
        per = (two - one) / args.count
        print(f"scenario {scenario} ({args.queue_type}): {per:,.0f} instructions/msg", flush=True)


if __name__ == "__main__":
    main()
