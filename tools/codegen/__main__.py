"""Command line of the code generator: ``python -m tools.codegen [--check]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.codegen import TARGETS, Target, check, generate_target, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.codegen", description=__doc__)
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 (naming the files) if the committed output differs from a fresh run",
    )
    parser.add_argument(
        "--target",
        choices=sorted(TARGETS),
        action="append",
        help="generate only this package (repeatable; default: all, or amqp091 with --out)",
    )
    parser.add_argument("--spec", type=Path, help="spec XML (one target only)")
    parser.add_argument(
        "--overlay",
        type=Path,
        action="append",
        help="overlay XML, applied in order (one target only; replaces the target's own)",
    )
    parser.add_argument("--out", type=Path, help="output directory (one target only)")
    args = parser.parse_args(argv)
    custom = args.spec is not None or args.overlay is not None or args.out is not None
    names = args.target or (["amqp091"] if custom else sorted(TARGETS))
    if custom and len(names) != 1:
        parser.error("--spec, --overlay and --out apply to a single --target")
    targets = [TARGETS[name] for name in names]
    if custom:
        base = targets[0]
        targets = [
            Target(
                base.name,
                args.spec or base.spec,
                tuple(args.overlay) if args.overlay is not None else base.overlays,
                args.out or base.output,
                base.options,
                base.scraped,
            )
        ]

    failed = False
    for target in targets:
        files = generate_target(target)
        if args.check:
            for name in check(files, target.output):
                print(f"out of date: {target.output / name}", file=sys.stderr)
                failed = True
            continue
        write(files, target.output)
        for name in files:
            print(f"wrote {target.output / name}")
    if failed:
        print("run `python -m tools.codegen` to regenerate", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
