"""A slow disk for one node, from the kernel's block I/O throttle (cgroup v1 ``blkio``).

Each node the harness starts goes into a blkio cgroup of its own; slowing its disk writes
``MAJOR:MINOR IOPS`` to the cgroup's ``blkio.throttle.write_iops_device`` for the disk that
holds the node's data directory, and healing writes ``0`` (no limit). Writes submitted by
the node's own threads, which include the writeback an ``fsync``/``fdatasync`` starts, wait
in the kernel's queue: measured on this machine, a loop of 1 KiB writes each followed by
``fdatasync`` went from 162/s to 1.5/s at 5 IOPS. It needs no change to the broker, works
for Leveret and RabbitMQ alike, and its limits are the kernel's: the ext4 journal's own
commits (jbd2's thread) are not throttled, and background writeback is not charged to the
node in cgroup v1, so a node that never syncs is barely slowed (both brokers sync their
durable writes). Chosen over ``dm-delay`` (no device-mapper in this kernel), a FUSE file
system and ``LD_PRELOAD`` (ruled out by the brief), and a test hook in the broker (it
would not slow RabbitMQ, and would test the hook rather than a disk).

Needs root and the v1 ``blkio`` hierarchy at ``/sys/fs/cgroup/blkio``; on a machine with
cgroup v2 only, :func:`available` says why not and the harness leaves the fault out.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

BLKIO = Path("/sys/fs/cgroup/blkio")


def available() -> str | None:
    """None when slow disks can be made here, else why not."""
    if not (BLKIO / "cgroup.procs").exists():
        return f"no cgroup v1 blkio hierarchy at {BLKIO} (cgroup v2's io.max is not supported)"
    if os.geteuid() != 0:
        return "slowing a disk needs root (cgroup writes)"
    return None


def disk_of(path: Path) -> str:
    """``MAJOR:MINOR`` of the whole disk holding ``path`` (throttles apply to disks, not
    partitions)."""
    dev = os.stat(path).st_dev
    sysfs = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if (sysfs / "partition").exists():
        return (sysfs.resolve().parent / "dev").read_text().strip()
    return f"{os.major(dev)}:{os.minor(dev)}"


@dataclass
class SlowDisk:
    """One node's cgroup. :meth:`add` puts a process in it (all its threads, and what it
    starts later); :meth:`slow` and :meth:`heal` change the limit; :meth:`remove` puts the
    processes back in the root cgroup and deletes it."""

    name: str
    data_dir: Path

    @property
    def path(self) -> Path:
        return BLKIO / self.name

    def create(self) -> SlowDisk:
        self.path.mkdir(exist_ok=True)
        return self

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def slow(self, write_iops: int) -> None:
        self._limit(write_iops)

    def heal(self) -> None:
        self._limit(0)

    def _limit(self, iops: int) -> None:
        (self.path / "blkio.throttle.write_iops_device").write_text(
            f"{disk_of(self.data_dir)} {iops}\n"
        )

    def writes(self) -> int:
        """Write requests the cgroup's processes have sent to any disk so far (the
        kernel's count: a fault's notes show the node kept writing while slowed)."""
        total = 0
        for line in (self.path / "blkio.throttle.io_serviced").read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "Write":
                total += int(parts[2])
        return total

    def remove(self) -> None:
        if not self.path.exists():
            return
        with contextlib.suppress(OSError):
            self.heal()
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (BLKIO / "cgroup.procs").write_text(f"{pid}\n")
        with contextlib.suppress(OSError):
            self.path.rmdir()


__all__ = ["SlowDisk", "available", "disk_of"]
