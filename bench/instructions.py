"""``python -m bench.instructions``: instructions per message of the in-memory 0-9-1 (or
1.0) path, counted by valgrind's callgrind, for comparing two builds on a busy machine.

Timings on a shared machine are noise; instruction counts are not. Each scenario of
``bench.amqp10_path`` (``--protocol 091`` unless ``--protocol 10``) runs twice under
``valgrind --tool=callgrind``, with ``--count`` and with twice as many messages, and the
difference of the two totals divided by ``--count`` is the cost of one message (start-up,
imports and the handshake cancel out). ``PYTHONHASHSEED`` is fixed so that the runs repeat.
Run it with ``PYTHONPATH=build/builds/compiled`` for the compiled build (``python -m
tools.builds``, or ``pip install --target`` of the wheel ``pip wheel .`` makes): there only
the broker's side is counted, inside the compiled entry points the workload calls
(``data_received``, ``run_turn``, ``take_output`` of the connection's shell), unless
``--whole`` asks for the client's side too. The pure-Python build has no such symbols: use
``--whole`` there. Python's cyclic garbage collector runs at allocation counts, so its share
of two runs is not proportional to their lengths: ``--no-gc`` leaves it out, for the cost of
the code path alone. ``--keep DIR`` keeps callgrind's files for ``callgrind_annotate``.

The entry points are named exactly, one ``--toggle-collect`` each: callgrind honoured only
the first of several wildcard patterns (``CPyPy_*___run_turn`` went uncounted, 45 % of
scenario a), and a wildcard would also match the front end's ``take_output``, which the shell
calls through the ``FrontEnd`` protocol (a Python-level call): entering it would toggle the
collection off. ``--entries`` names another class (mypyc's symbol infix) for a build from
before the shell, such as ``protocol___amqp091___connection___ServerConnection``.
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
# The broker's entry points in the compiled build: mypyc's Python-level wrappers
# (CPyPy_<module>___<class>___<method>) of the connection's shell.
SERVER_CLASS = "shell___Shell"
SERVER_ENTRIES = ("data_received", "run_turn", "take_output")


def toggles(server_class: str = SERVER_CLASS) -> list[str]:
    """callgrind's options that count inside ``server_class``'s entry points only."""
    return [f"--toggle-collect=CPyPy_{server_class}___{f}" for f in SERVER_ENTRIES]


def instructions(
    scenario: str,
    count: int,
    queue_type: str = "classic",
    *,
    protocol: str = "091",
    whole: bool = False,
    gc: bool = True,
    server_class: str = SERVER_CLASS,
    keep: Path | None = None,
) -> int:
    """Instructions (callgrind's Ir) of one run of ``bench.amqp10_path`` with ``count``
    messages: the broker's side, or with ``whole`` the whole process (start-up included);
    without ``gc``, with Python's cyclic garbage collector off. ``keep``: the directory
    callgrind's file is kept in."""
    with tempfile.TemporaryDirectory() as tmp:
        name = f"callgrind.{protocol}-{scenario}-{queue_type}-{count}{'' if gc else '-nogc'}"
        out = (keep if keep is not None else Path(tmp)) / f"{name}.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            *([] if whole else toggles(server_class)),
            sys.executable,
            "-c",
            _RUN.format(gc="" if gc else "import gc; gc.disable(); "),
            "--protocol",
            protocol,
            "--scenario",
            scenario,
            *(["--queue-type", queue_type] if protocol == "091" else []),
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
    p.add_argument("--protocol", choices=("091", "10"), default="091", help="1.0: a and c")
    p.add_argument("--count", type=int, default=20_000)
    p.add_argument("--queue-type", choices=("classic", "quorum", "priority"), default="classic")
    p.add_argument("--whole", action="store_true", help="count the whole process")
    p.add_argument("--no-gc", action="store_true", help="with the cyclic GC off")
    p.add_argument(
        "--entries",
        default=SERVER_CLASS,
        help="the class whose entry points are counted (mypyc's symbol infix)",
    )
    p.add_argument("--keep", type=Path, help="keep callgrind's files in this directory")
    return p


def main() -> None:
    args = build_parser().parse_args()
    for scenario in args.scenarios:

        def count(n: int, scenario: str = scenario) -> int:
            return instructions(
                scenario,
                n,
                args.queue_type,
                protocol=args.protocol,
                whole=args.whole,
                gc=not args.no_gc,
                server_class=args.entries,
                keep=args.keep,
            )

        one = count(args.count)
        two = count(2 * args.count)
        if not two:
            raise SystemExit("nothing counted: not the compiled build? (--whole counts all)")
        per = (two - one) / args.count
        kind = args.queue_type if args.protocol == "091" else "AMQP 1.0"
        print(f"scenario {scenario} ({kind}): {per:,.0f} instructions/msg", flush=True)


if __name__ == "__main__":
    main()
