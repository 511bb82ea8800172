"""A throwaway etcd for tests and benchmarks: Debian's ``etcd`` binary (package
``etcd-server``) on free loopback ports with a temporary data directory, stopped and
removed by :meth:`EtcdServer.stop`. The cluster tests, ``bench/etcd_client.py`` and
the pytest fixture ``etcd_server`` (``tests/conftest.py``) use it; it is
``cluster/etcd_process.py``'s process with a temporary home."""

from __future__ import annotations

import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from leveret.cluster.etcd_process import EtcdMissing, EtcdProcess, etcd_binary


@dataclass
class EtcdServer(EtcdProcess):
    """One etcd member. ``start()`` picks free ports; ``restart()`` keeps them and the
    data (what an operator's restart does); ``stop()`` ends it and removes the data."""

    data_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="leveret-etcd-")))
    name: str = "leveret-test"

    def restart(self) -> None:
        self.kill(signal.SIGTERM)
        self.start()

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        shutil.rmtree(self.data_dir, ignore_errors=True)


__all__ = ["EtcdMissing", "EtcdServer", "etcd_binary"]
