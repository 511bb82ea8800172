"""Command line of the AMQP 0-10 code generator: ``python -m tools.codegen.amqp010 [--check]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.codegen.amqp010 import DEFAULT_OUTPUT, DEFAULT_SPEC, check, generate, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.codegen.amqp010", description=__doc__)
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 (naming the files) if the committed output differs from a fresh run",
    )
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC, help="spec XML")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUTPUT, help="output directory")
    args = parser.parse_args(argv)

    files = generate(args.spec)
    if args.check:
        stale = check(files, args.out)
        if stale:
            for name in stale:
                print(f"out of date: {args.out / name}", file=sys.stderr)
            print("run `python -m tools.codegen.amqp010` to regenerate", file=sys.stderr)
            return 1
        return 0
    write(files, args.out)
    for name in files:
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
