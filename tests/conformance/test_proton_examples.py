"""Qpid Proton's own Python examples, unchanged, against a fresh ``leveret serve``.

A new user's first try: the examples connect to ``localhost:5672`` with no user name (Proton
then logs in with SASL ANONYMOUS) and use the address ``examples``. Their own test,
``test_examples.py``, runs them in pairs and checks what they print. They come from Debian
(``libqpid-proton11-dev-examples``, which ``scripts/test`` installs; the PyPI sdist of
python-qpid-proton has no examples) and run with this venv's python-qpid-proton. The port is
fixed, so Leveret and the examples share a network namespace of their own
(``brokers.start_leveret(netns=True)``, root). The same run against RabbitMQ 3.10.8 is the
harness's ``proton-examples`` suite (``python -m conformance run proton-examples``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import brokers
from conformance.harness import PLUGINS

EXAMPLES = Path("/usr/share/proton/examples/python")
# The examples that need a broker (the "direct" ones are their own server), one test each.
BROKER_TESTS = (
    "test_helloworld",
    "test_helloworld_blocking",
    "test_helloworld_tornado",
    "test_simple_send_recv",
    "test_client_server",
    "test_sync_client_server",
    "test_client_server_tx",
    "test_sync_client_server_tx",
    "test_db_send_recv",
    "test_tx_send_tx_recv",
    "test_selected_recv",
)

# The examples' processes are the broker's clients: they run in both passes of scripts/test
# only through this module's broker, and the 1.0 front end's compiled modules have their
# own real-client tests (test_amqp10_*), so one pass is enough.
# A broker that does not answer leaves some examples waiting on each other (their test waits
# for its child processes, past pytest-timeout's alarm): the run is bounded as a whole and
# what finished is read from the harness's report plugin, line by line.
RUN_TIMEOUT = 240
pytestmark = [
    pytest.mark.interop,
    pytest.mark.pure_only,
    pytest.mark.timeout(RUN_TIMEOUT + 60),
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Run test_examples.py's broker tests once: test name -> "passed" or its failure."""
    if not (EXAMPLES / "test_examples.py").exists():
        pytest.skip(f"{EXAMPLES} is missing: Debian's libqpid-proton11-dev-examples")
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
        pytest.skip("needs root and util-linux (a network namespace for localhost:5672)")
    # A copy: the database examples write into the working directory.
    work = tmp_path_factory.mktemp("proton-examples")
    shutil.copytree(EXAMPLES, work, dirs_exist_ok=True)
    (work / "pytest.ini").write_text("[pytest]\n")  # none of this project's settings
    report = work / "report.json"
    # test_examples.py starts each example by name through PATH: this venv's python3.
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(PLUGINS),
        "CONFORMANCE_REPORT": str(report),
    }
    target = brokers.start_leveret(management=False, netns=True)
    try:
        with (work / "pytest.log").open("w") as log:
            proc = subprocess.Popen(
                [
                    *target.enter(),
                    sys.executable,
                    "-m",
                    "pytest",
                    "test_examples.py",
                    "-k",
                    "not direct",
                    "-p",
                    "conformance_report",
                    "-p",
                    "no:cacheprovider",
                    "-p",
                    "no:leveret",
                    "--timeout=30",
                    "-q",
                ],
                cwd=work,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                proc.wait(RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    finally:
        target.stop()
    entries: dict[str, dict[str, str]] = {}
    if report.exists():
        entries = json.loads(report.read_text())
    elif Path(f"{report}.partial").exists():
        for line in Path(f"{report}.partial").read_text().splitlines():
            entry = json.loads(line)
            entries[entry.pop("nodeid")] = entry
    return {
        nodeid.rsplit("::", 1)[-1]: (
            "passed" if entry["outcome"] == "passed" else entry.get("message", entry["outcome"])
        )
        for nodeid, entry in entries.items()
    }


def test_the_broker_examples_are_the_eleven(outcomes: dict[str, str]) -> None:
    # Every one ran (a run cut short by RUN_TIMEOUT lacks the rest), and no other.
    assert sorted(outcomes) == sorted(BROKER_TESTS)


@pytest.mark.parametrize("name", BROKER_TESTS)
def test_example(outcomes: dict[str, str], name: str) -> None:
    assert outcomes.get(name, "did not finish") == "passed"
