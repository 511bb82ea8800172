"""Run the Qpid project's AMQP 0-10 broker conformance tests (``qpid_tests.broker_0_10``,
from qpid-python's source distribution) against Leveret and count what passes.

    python -m tools.qpid [--broker amqp://guest/guest@HOST:PORT] [--log FILE] [PATTERN ...]

Without ``--broker`` a Leveret broker is started on 127.0.0.1 (port 0, a temporary data
directory) and stopped afterwards. Takes several minutes: many tests wait out receive
timeouts. Prints one line per test module (passed, failed, skipped) and the totals;
``docs/compatibility.md`` lists what fails and why.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.qpid import ensure

_LISTENING = re.compile(r"listening on amqp://\[?([0-9a-fA-F:.]+)\]?:(\d+)")
_RESULT = re.compile(r"^(qpid_tests\.broker_0_10\.[\w.]+?)\.(\w+)\.(\w+) \.+ (pass|fail|skip)$")


def _start() -> tuple[subprocess.Popen[str], str, str]:
    data = tempfile.mkdtemp(prefix="leveret-qpid-")
    proc = subprocess.Popen(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", data],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        match = _LISTENING.search(line)
        if match:
            return proc, f"amqp://guest/guest@{match.group(1)}:{match.group(2)}", data
        if not line:
            break
    proc.kill()
    raise SystemExit("the broker did not start")


def _results(log: str) -> list[tuple[str, str, str]]:
    """(module, test, outcome) from qpid-python-test's output, whose long names wrap."""
    joined = re.sub(r" \\\n +", "", log)
    out = []
    for line in joined.splitlines():
        match = _RESULT.match(line.strip())
        if match:
            module, cls, test, outcome = match.groups()
            out.append((module.rsplit(".", 1)[-1], f"{cls}.{test}", outcome))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", help="run against this broker instead of a new Leveret")
    parser.add_argument("--log", default="qpid-conformance.log", help="qpid-python-test output")
    parser.add_argument("patterns", nargs="*", default=["qpid_tests.broker_0_10.*"])
    args = parser.parse_args()
    py2 = ensure()
    if py2 is None:
        raise SystemExit("needs Python 2.7 (pyenv's is found) and PyPI for qpid-python")
    proc, data = None, None
    url = args.broker
    if url is None:
        proc, url, data = _start()
    try:
        runner = str(py2.path / "bin" / "qpid-python-test")
        done = subprocess.run(
            [py2.python, runner, "-b", url, "-m", "qpid_tests.broker_0_10", *args.patterns],
            capture_output=True,
            text=True,
            env={**py2.env(), "PYTHONUNBUFFERED": "1"},
            check=False,
        )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(15)
        if data is not None:
            shutil.rmtree(data, ignore_errors=True)
    Path(args.log).write_text(done.stdout + done.stderr)
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for module, _test, outcome in _results(done.stdout):
        counts[module][outcome] += 1
    total: collections.Counter[str] = collections.Counter()
    for module in sorted(counts):
        c = counts[module]
        total.update(c)
        print(f"{module:20} {c['pass']:4} passed {c['fail']:4} failed {c['skip']:4} skipped")
    print(
        f"{'total':20} {total['pass']:4} passed {total['fail']:4} failed {total['skip']:4} skipped"
    )
    print(f"details: {os.path.abspath(args.log)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
