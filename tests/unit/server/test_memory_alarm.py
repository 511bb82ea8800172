"""The memory alarm (server/memory_alarm.py): this node's own, set past the watermark and
cleared below 80 % of it, and the other nodes' of a cluster, which block publishers here
as RabbitMQ's cluster-wide alarm does."""

from __future__ import annotations

from leveret.model.memory_gauge import MemoryGauge
from leveret.server.memory_alarm import MemoryAlarm


class Conn:
    def __init__(self) -> None:
        self.events: list[str] = []

    def block(self, reason: str) -> None:
        self.events.append("block")

    def unblock(self) -> None:
        self.events.append("unblock")


def alarm(held: int = 0) -> tuple[MemoryAlarm, MemoryGauge, list[bool]]:
    gauge = MemoryGauge()
    gauge.bytes = held
    told: list[bool] = []
    memory = MemoryAlarm(gauge, 1000)
    memory.on_local = told.append
    return memory, gauge, told


def test_the_nodes_own_alarm_blocks_publishers_and_clears_below_the_low_watermark() -> None:
    memory, gauge, told = alarm(held=500)
    conn = Conn()
    memory.published(conn)
    assert conn.events == []
    gauge.bytes = 1001
    memory.published(conn)
    memory.published(conn)
    assert conn.events == ["block"]
    assert memory.local
    assert memory.active
    gauge.bytes = 900  # below the watermark, above its 80 %
    memory.check()
    assert memory.active
    gauge.bytes = 800
    memory.check()
    assert conn.events == ["block", "unblock"]
    assert told == [True, False]
    assert not memory.active


def test_another_nodes_alarm_blocks_publishers_here_until_it_clears() -> None:
    memory, _gauge, told = alarm()
    conn = Conn()
    memory.remote_alarm("b", True)
    memory.remote_alarm("b", True)  # the record put again: no change
    memory.published(conn)
    assert conn.events == ["block"]
    assert memory.active
    assert not memory.local
    assert told == []  # not this node's: its record says nothing
    memory.remote_alarm("c", True)
    memory.remote_alarm("b", False)
    assert memory.active  # c's still holds
    memory.remote_alarm("c", False)
    assert conn.events == ["block", "unblock"]
    assert not memory.active


def test_both_alarms_hold_until_both_clear() -> None:
    memory, gauge, told = alarm()
    conn = Conn()
    memory.remote_alarm("b", True)
    gauge.bytes = 2000
    memory.published(conn)
    assert memory.local
    memory.remote_alarm("b", False)
    assert conn.events == ["block"]
    gauge.bytes = 0
    memory.check()
    assert conn.events == ["block", "unblock"]
    assert told == [True, False]


def test_without_a_watermark_only_other_nodes_alarms_block() -> None:
    memory = MemoryAlarm(MemoryGauge(), 0)
    memory.gauge.bytes = 1 << 40
    conn = Conn()
    memory.published(conn)
    assert conn.events == []
    memory.remote_alarm("b", True)
    memory.published(conn)
    assert conn.events == ["block"]
