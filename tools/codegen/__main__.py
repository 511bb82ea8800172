"""Command line of the code generator: ``python -m tools.codegen [--check]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.codegen import DEFAULT_OUTPUT, DEFAULT_OVERLAYS, DEFAULT_SPEC, check, generate, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.codegen", description=__doc__)
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 (naming the files) if the committed output differs from a fresh run",
    )
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC, help="spec XML")
    parser.add_argument(
        "--overlay",
        type=Path,
        action="append",
        help="overlay XML, applied in order (default: tools/codegen/overlays/rabbitmq.xml)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUTPUT, help="output directory")
    args = parser.parse_args(argv)
    overlays = tuple(args.overlay) if args.overlay is not None else DEFAULT_OVERLAYS

    files = generate(args.spec, overlays)
    if args.check:
        stale = check(files, args.out)
        if stale:
            for name in stale:
                print(f"out of date: {args.out / name}", file=sys.stderr)
            print("run `python -m tools.codegen` to regenerate", file=sys.stderr)
            return 1
        return 0
    write(files, args.out)
    for name in files:
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
