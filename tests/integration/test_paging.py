"""Deep queues page their tail to disk: order, content and restarts through a real client.

A queue keeps 2048 ready messages of small bodies in memory; these tests go well past that,
so most of the messages are in page files under ``data_dir/pages`` while they wait. Large
bodies (4 KiB and more) page only once queued messages hold the paging level (half the
memory high watermark by default): the last tests.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import pika
import pytest
import requests

from tests.integration.mgmt_support import start_mgmt_broker
from tests.integration.pika_support import Opened, connect
from tests.integration.test_durability import PERSISTENT, Restarting, data_dir, node

if TYPE_CHECKING:
    from pika.adapters.blocking_connection import BlockingChannel

    from tests.integration.conftest import Broker
    from tests.integration.mgmt_support import MgmtBroker

__all__ = ["data_dir", "node"]

pytestmark = pytest.mark.leveret_only

COUNT = 12_000
TRANSIENT = pika.BasicProperties(delivery_mode=1, headers={"kind": "transient"})


def _body(i: int) -> bytes:
    return b"%06d:" % i + b"x" * 200


def _publish_mixed(ch: BlockingChannel, queue: str) -> None:
    for i in range(COUNT):
        ch.basic_publish("", queue, _body(i), PERSISTENT if i % 2 == 0 else TRANSIENT)


def _drain(broker: Broker, queue: str, expected: int) -> list[tuple[bytes, pika.BasicProperties]]:
    got: list[tuple[bytes, pika.BasicProperties]] = []
    with Opened(connect(broker)) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        for method, props, body in ch.consume(queue, inactivity_timeout=10):
            if body is None:
                break
            got.append((body, props))
            if len(got) % 100 == 0 or len(got) == expected:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if len(got) == expected:
                break
        ch.cancel()
    return got


def _depth(broker: Broker, queue: str) -> int:
    with Opened(connect(broker)) as conn:
        ok = conn.channel().queue_declare(queue, passive=True)
        return int(ok.method.message_count)


def test_a_deep_queue_pages_and_delivers_everything_in_order(node: Restarting) -> None:
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.queue_declare("deep", durable=True)
        _publish_mixed(ch, "deep")
    node.sync()
    assert _depth(node.broker, "deep") == COUNT
    pages = Path(node.data_dir) / "pages"
    assert any(pages.iterdir()), "nothing was paged"
    got = _drain(node.broker, "deep", COUNT)
    assert [body for body, _ in got] == [_body(i) for i in range(COUNT)]
    assert all(props.delivery_mode == (2 if i % 2 == 0 else 1) for i, (_, props) in enumerate(got))
    assert all(props.headers == {"kind": "transient"} for _, props in got[1::2]), (
        "paged properties changed"
    )
    assert _depth(node.broker, "deep") == 0
    assert not any(pages.iterdir()), "page files were left behind"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_paged_persistent_messages_survive_a_restart_and_transient_ones_do_not(
    node: Restarting, sig: int
) -> None:
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.queue_declare("deep", durable=True)
        _publish_mixed(ch, "deep")
    node.restart(sig)
    assert _depth(node.broker, "deep") == COUNT // 2
    got = _drain(node.broker, "deep", COUNT // 2)
    assert [body for body, _ in got] == [_body(i) for i in range(0, COUNT, 2)]
    assert all(props.delivery_mode == 2 for _, props in got)


def test_purge_and_delete_of_a_deep_queue(node: Restarting) -> None:
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.queue_declare("deep", durable=True)
        _publish_mixed(ch, "deep")
        ch.queue_declare("deep2", durable=True)
        _publish_mixed(ch, "deep2")
        assert ch.queue_purge("deep").method.message_count == COUNT
        assert ch.queue_delete("deep2").method.message_count == COUNT
    node.restart(signal.SIGKILL)
    assert _depth(node.broker, "deep") == 0
    pages = Path(node.data_dir) / "pages"
    assert not any(pages.iterdir())


LARGE = 8192


def _large(i: int) -> bytes:
    return b"%06d:" % i + b"L" * (LARGE - 7)


def _paged_out(mgmt: MgmtBroker, queue: str, expected_total: int) -> int:
    """The queue's ``messages_paged_out`` once the API's row shows every message."""
    url = mgmt.api(f"queues/%2F/{quote(queue, safe='')}")
    deadline = time.monotonic() + 10
    while True:
        row = requests.get(url, auth=("guest", "guest"), timeout=10).json()
        if row.get("messages") == expected_total or time.monotonic() > deadline:
            assert row["messages"] == expected_total
            return int(row["messages_paged_out"])
        time.sleep(0.1)


def test_large_bodies_stay_in_memory_until_the_paging_level_then_page() -> None:
    # Watermark 64 MiB: the paging level is 32 MiB of queued messages (50 %).
    mgmt = start_mgmt_broker("--memory-high-watermark", str(64 << 20))
    try:
        with Opened(connect(mgmt.broker)) as conn:
            ch = conn.channel()
            ch.queue_declare("big")
            for i in range(3000):  # 24 MiB: past 2048 messages, under the level
                ch.basic_publish("", "big", _large(i))
            assert _paged_out(mgmt, "big", 3000) == 0
            for i in range(3000, 6000):  # 48 MiB in all: past the level, under the watermark
                ch.basic_publish("", "big", _large(i))
            assert _paged_out(mgmt, "big", 6000) > 1000
        got = _drain(mgmt.broker, "big", 6000)
        assert [body for body, _ in got] == [_large(i) for i in range(6000)]
        assert _paged_out(mgmt, "big", 0) == 0
    finally:
        mgmt.broker.stop()


def test_large_persistent_bodies_kept_in_memory_come_back_after_a_kill(node: Restarting) -> None:
    with Opened(connect(node.broker)) as conn:
        ch = conn.channel()
        ch.queue_declare("big", durable=True)
        for i in range(3000):
            ch.basic_publish("", "big", _large(i), PERSISTENT)
    assert not any((Path(node.data_dir) / "pages").iterdir()), "large bodies were paged"
    node.restart(signal.SIGKILL)
    assert _depth(node.broker, "big") == 3000
    got = _drain(node.broker, "big", 3000)
    assert [body for body, _ in got] == [_large(i) for i in range(3000)]
