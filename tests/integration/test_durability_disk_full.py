"""Disk full: publishers get nacks, consumers keep consuming, confirms resume when writes
succeed again, and a restart brings back every confirmed message and nothing acked.

The fault is injected at the store's write call by the test hook ``LEVERET_TEST_FAIL_WRITES=N``
(the next N batch writes fail with ENOSPC after writing half of their data; the store retries
once a second).
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

import pika
import pika.exceptions
import pytest

from tests.integration.conftest import URL_ENV, start_broker
from tests.integration.pika_support import Opened, connect

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.leveret_only

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def test_disk_full_nacks_then_recovers(tmp_path: Path) -> None:
    if os.environ.get(URL_ENV):
        pytest.skip("needs a broker process the test controls")
    data_dir = str(tmp_path / "data")
    old = [b"old-%d" % i for i in range(20)]

    broker = start_broker("--data-dir", data_dir)
    try:
        with Opened(connect(broker)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("dq", durable=True)
            for body in old:
                ch.basic_publish("", "dq", body, PERSISTENT)
    finally:
        broker.stop(signal.SIGTERM)

    broker = start_broker("--data-dir", data_dir, env={"LEVERET_TEST_FAIL_WRITES": "3"})
    confirmed: list[bytes] = []
    try:
        with Opened(connect(broker)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("tq")
            # The first write fails: the publish waiting on it is nacked.
            with pytest.raises(pika.exceptions.NackError):
                ch.basic_publish("", "dq", b"nacked-0", PERSISTENT)
            # Failing: nacked at once, without waiting for the retry.
            started = time.monotonic()
            with pytest.raises(pika.exceptions.NackError):
                ch.basic_publish("", "dq", b"nacked-1", PERSISTENT)
            assert time.monotonic() - started < 0.5
            # Transient traffic is confirmed; consumers still get and ack messages.
            ch.basic_publish("", "tq", b"transient")
            method, _props, body = ch.basic_get("tq", auto_ack=True)
            assert body == b"transient"
            for expected in old[:3]:
                method, _props, body = ch.basic_get("dq")
                assert body == expected
                ch.basic_ack(method.delivery_tag)
            # The retries succeed after the fault clears: confirms come back.
            deadline = time.monotonic() + 20
            n = 0
            while not confirmed:
                assert time.monotonic() < deadline, "persistent publishes never confirmed again"
                n += 1
                try:
                    ch.basic_publish("", "dq", b"new-%d" % n, PERSISTENT)
                except pika.exceptions.NackError:
                    time.sleep(0.1)
                else:
                    confirmed.append(b"new-%d" % n)
            for i in range(10):
                ch.basic_publish("", "dq", b"after-%d" % i, PERSISTENT)
                confirmed.append(b"after-%d" % i)
        assert broker.process is not None
        assert broker.process.poll() is None
    finally:
        broker.stop(signal.SIGTERM)
    log = broker.log_text()
    assert log.count("store write failed") == 1, log
    assert log.count("store writes succeed again") == 1, log

    broker = start_broker("--data-dir", data_dir)
    try:
        with Opened(connect(broker)) as conn:
            ch = conn.channel()
            got = []
            while True:
                method, _props, body = ch.basic_get("dq", auto_ack=True)
                if method is None:
                    break
                got.append(body)
        # The acks made while failing were written by the retry; the nacked publishes
        # were never written; everything confirmed is there, in order.
        assert got == old[3:] + confirmed
    finally:
        broker.stop(signal.SIGTERM)


def test_tx_commit_ok_waits_for_the_disk_and_a_failed_write_is_541(tmp_path: Path) -> None:
    if os.environ.get(URL_ENV):
        pytest.skip("needs a broker process the test controls")
    data_dir = str(tmp_path / "data")
    broker = start_broker("--data-dir", data_dir, env={"LEVERET_TEST_FAIL_WRITES": "1"})
    try:
        with Opened(connect(broker)) as conn:
            ch = conn.channel()
            ch.queue_declare("txq", durable=True)
            ch.tx_select()
            ch.basic_publish("", "txq", b"lost", PERSISTENT)
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
                ch.tx_commit()
            assert closed.value.reply_code == 541
        time.sleep(1.5)  # the store retries once a second, and then writes succeed again
        with Opened(connect(broker)) as conn:
            ch = conn.channel()
            ch.tx_select()
            ch.basic_publish("", "txq", b"kept", PERSISTENT)
            ch.tx_commit()
        # commit-ok came after the sync: a SIGKILL now loses nothing that was committed.
        broker.stop(signal.SIGKILL)
        broker = start_broker("--data-dir", data_dir)
        with Opened(connect(broker)) as conn:
            ch = conn.channel()
            bodies = []
            while (got := ch.basic_get("txq", auto_ack=True))[0] is not None:
                bodies.append(got[2])
            # The failed commit's message was applied in memory but never written.
            assert bodies == [b"kept"]
    finally:
        broker.stop(signal.SIGTERM)
