"""Command line of the AMQP 1.0 code generator: ``python -m tools.codegen.amqp10 [--check]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.codegen.amqp10 import DEFAULT_DOCUMENTS, DEFAULT_OUTPUT, DEFAULT_SEED, check, generate
from tools.codegen.amqp10 import write as write_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.codegen.amqp10", description=__doc__)
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 (naming the files) if the committed output differs from a fresh run",
    )
    parser.add_argument(
        "--spec",
        type=Path,
        action="append",
        help="a spec XML document, in order (default: spec/1-0/*.bare.xml)",
    )
    parser.add_argument("--seed", type=Path, default=DEFAULT_SEED, help="type-system reference")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUTPUT, help="output directory")
    args = parser.parse_args(argv)
    documents = tuple(args.spec) if args.spec is not None else DEFAULT_DOCUMENTS

    files = generate(documents, args.seed)
    if args.check:
        stale = check(files, args.out)
        if stale:
            for name in stale:
                print(f"out of date: {args.out / name}", file=sys.stderr)
            print("run `python -m tools.codegen.amqp10` to regenerate", file=sys.stderr)
            return 1
        return 0
    write_files(files, args.out)
    for name in files:
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
