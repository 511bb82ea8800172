"""Helpers for tests that run ``leveret ctl`` against a broker process of their own."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pika

from tests.integration.conftest import _DATA_ROOT, Broker, start_broker
from tests.integration.pika_support import connection_parameters


def new_data_dir() -> Path:
    return Path(tempfile.mkdtemp(dir=_DATA_ROOT))


def start(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> Broker:
    return start_broker("--data-dir", str(data_dir), *args, env=env)


def ctl(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``leveret ctl --data-dir DIR ARGS``, bounded in time."""
    return subprocess.run(
        [sys.executable, "-m", "leveret", "ctl", "--data-dir", str(data_dir), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
        check=False,
    )


def ok(data_dir: Path, *args: str, stdin: str | None = None) -> str:
    result = ctl(data_dir, *args, stdin=stdin)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def login(broker: Broker, user: str, password: str, vhost: str = "/", **params: Any) -> Any:
    """A BlockingConnection as ``user``."""
    return pika.BlockingConnection(
        connection_parameters(
            broker.host,
            broker.port,
            credentials=pika.PlainCredentials(user, password),
            virtual_host=vhost,
            **params,
        )
    )
