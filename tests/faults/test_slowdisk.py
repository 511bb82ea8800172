"""The harness's slow disk (``tools/faults/slowdisk.py``): a process in a node's blkio
cgroup syncs far fewer writes a second once the disk is slowed, and as many as before
once healed; the cgroup goes away afterwards."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from tools.faults import slowdisk

if TYPE_CHECKING:
    from pathlib import Path

# Left out of the compiled pass (scripts/test): the harness is not compiled.
pytestmark = [
    pytest.mark.pure_only,
    pytest.mark.skipif(slowdisk.available() is not None, reason=str(slowdisk.available())),
]

# Waits for a line, then counts 1 KiB writes each followed by fdatasync for 1.5 s.
SYNCER = """
import os, sys, time
path = sys.argv[1]
sys.stdin.readline()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
start, n = time.monotonic(), 0
while time.monotonic() - start < 1.5:
    os.write(fd, b"x" * 1024)
    os.fdatasync(fd)
    n += 1
print(n / (time.monotonic() - start))
"""


def syncs_per_second(disk: slowdisk.SlowDisk, path: Path) -> float:
    child = subprocess.Popen(
        [sys.executable, "-c", SYNCER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        disk.add(child.pid)
        out, _ = child.communicate("go\n", timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return float(out)


def test_a_slowed_disk_syncs_slowly_until_healed(tmp_path: Path) -> None:
    disk = slowdisk.SlowDisk(f"leveret-faults-test-{tmp_path.name}", tmp_path).create()
    try:
        disk.slow(5)
        before = disk.writes()
        slowed = syncs_per_second(disk, tmp_path / "slow")
        assert disk.writes() > before  # the kernel counted the child's writes
        disk.heal()
        healed = syncs_per_second(disk, tmp_path / "healed")
    finally:
        disk.remove()
    assert slowed < 12
    assert healed > 3 * slowed
    assert not disk.path.exists()


def test_the_disk_of_a_path_is_a_whole_disk(tmp_path: Path) -> None:
    major, minor = slowdisk.disk_of(tmp_path).split(":")
    assert int(major) > 0
    assert int(minor) >= 0
