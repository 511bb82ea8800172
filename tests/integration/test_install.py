"""Every documented way to build, installed into a fresh venv, serves a pika round trip.

``python -m tools.builds`` makes the artifacts and the venvs (``pip install .`` compiled,
``LEVERET_PURE=1 pip install .``, and ``python -m build``'s wheel and sdist); the test
command runs it in the background and points ``LEVERET_BUILDS`` at its output before the
compiled pass, which runs this module. Run alone, the fixture builds them itself (minutes).
Each venv's own ``leveret serve`` must run the build it was made as, from the venv, and say
so in its start-up line.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pika
import pytest
from tools import builds

from leveret.build_info import HOT_PATH_MODULES

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.builds

BUILDS = "LEVERET_BUILDS"
LISTENING = re.compile(r"listening on amqp://127\.0\.0\.1:(\d+) \((.*)\)")
# venv -> the build its start-up line must name
EXPECTED = {
    "pip-compiled": "compiled (mypyc)",
    "pip-pure": "pure Python",
    "build-wheel": "compiled (mypyc)",
    "build-sdist": "pure Python",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get(BUILDS)
    if given:
        out = Path(given)
        assert (out / builds.STAMP).is_file(), f"{out}: the builds did not finish"
        assert (out / builds.STAMP).read_text(encoding="utf-8") == builds.fingerprint(), (
            f"{out} was built from other source"
        )
        return out
    return builds.build(tmp_path_factory.mktemp("builds"))


@contextlib.contextmanager
def _serve(python: Path, data: Path) -> Iterator[tuple[int, str, list[str]]]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("LEVERET_") and k != "PYTHONPATH"
    }
    proc = subprocess.Popen(
        [
            str(python.parent / "leveret"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--stream-port",
            "0",
            "--no-management",
            "--data-dir",
            str(data),
        ],
        cwd=data.parent,  # not the checkout: the venv's leveret, never src/
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    stream = proc.stderr
    log: list[str] = []
    found: list[re.Match[str]] = []
    ready = threading.Event()

    def drain() -> None:
        for line in stream:
            log.append(line.rstrip("\n"))
            if not found and (match := LISTENING.search(line)):
                found.append(match)
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        ready.wait(60)
        assert found, "\n".join(log[-30:])
        yield int(found[0].group(1)), found[0].group(2), log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        reader.join(5)
        stream.close()


@pytest.mark.timeout(1800)  # run alone, the fixture builds everything first
@pytest.mark.parametrize("venv", sorted(EXPECTED))
def test_each_build_installs_and_serves_a_round_trip(
    built: Path, venv: str, tmp_path: Path
) -> None:
    python = built / "venvs" / venv / "bin" / "python"
    where = subprocess.run(
        [str(python), "-c", "import leveret; print(leveret.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.strip()
    assert where.startswith(str(built / "venvs" / venv)), where
    with _serve(python, tmp_path / "data") as (port, build, log):
        assert build.startswith(EXPECTED[venv]), build
        if EXPECTED[venv].startswith("compiled"):
            every = len(HOT_PATH_MODULES)
            assert build.startswith(f"compiled (mypyc): {every} of {every} "), build
        conn = pika.BlockingConnection(
            pika.ConnectionParameters(
                "127.0.0.1",
                port,
                credentials=pika.PlainCredentials("guest", "guest"),
                socket_timeout=5,
                blocked_connection_timeout=10,
                connection_attempts=1,
            )
        )
        try:
            ch = conn.channel()
            queue = ch.queue_declare("", exclusive=True).method.queue
            ch.basic_publish("", queue, f"hello from {venv}".encode())
            got = None
            for _ in range(50):
                method, _props, body = ch.basic_get(queue, auto_ack=True)
                if method is not None:
                    got = body
                    break
                conn.sleep(0.1)
            assert got == f"hello from {venv}".encode(), log[-10:]
        finally:
            conn.close()


def test_the_wheels_are_what_they_claim(built: Path) -> None:
    # pip's compiled wheel and python -m build's are platform wheels with the extensions;
    # the pure one has none.
    compiled = builds.one(built / "pip", "leveret-*-cp*.whl")
    wheel = builds.one(built / "build", "leveret-*-cp*.whl")
    pure = builds.one(built / "pure", "leveret-*-py3-none-any.whl")

    def extensions(path: Path) -> list[str]:
        with zipfile.ZipFile(path) as archive:
            return [n for n in archive.namelist() if n.endswith(".so")]

    assert len(extensions(compiled)) > 1
    assert sorted(extensions(wheel)) == sorted(extensions(compiled))
    assert extensions(pure) == []
