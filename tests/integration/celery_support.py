"""A real Celery worker as a subprocess for the integration tests: started, awaited until it is
ready, and stopped with SIGTERM (warm shutdown), then SIGKILL if it does not go in time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

ROOT = Path(__file__).resolve().parents[2]
WORKER_START_TIMEOUT = 30.0
WORKER_STOP_TIMEOUT = 10.0


@dataclass
class Worker:
    """The worker subprocess, the queue it consumes, and its merged stdout/stderr."""

    process: subprocess.Popen[str]
    queue: str
    log: list[str] = field(default_factory=list)
    returncode: int | None = None

    def log_text(self) -> str:
        return "\n".join(self.log)


def stop_worker(process: subprocess.Popen[str]) -> int:
    """SIGTERM (warm shutdown), then SIGKILL if the worker has not gone in time."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(WORKER_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(5)


@contextmanager
def celery_worker(
    app_module: str, queue: str, consume: str, env: Mapping[str, str]
) -> Iterator[Worker]:
    """Run ``celery -A app_module worker`` (solo pool) consuming ``consume`` until the block ends;
    the exit status is in ``Worker.returncode`` afterwards."""
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        app_module,
        "worker",
        "--pool=solo",
        "--concurrency=1",
        "--without-heartbeat",
        "--without-mingle",
        "--without-gossip",
        "-l",
        "info",
        "-n",
        f"{queue}@%h",
        "-Q",
        consume,
    ]
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": pythonpath},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    stream = process.stdout
    worker = Worker(process=process, queue=queue)
    ready = threading.Event()

    def read() -> None:
        for line in stream:
            worker.log.append(line.rstrip("\n"))
            if line.rstrip().endswith(" ready."):
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not ready.wait(WORKER_START_TIMEOUT):
            pytest.fail(
                f"celery worker not ready in {WORKER_START_TIMEOUT} s:\n{worker.log_text()}"
            )
        yield worker
    finally:
        worker.returncode = stop_worker(process)
        reader.join(5)
        stream.close()
