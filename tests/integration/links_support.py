"""Helpers for the shovel and federation tests: parameters through the HTTP API, waiting
for a condition, reading a queue with pika."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pika
import requests

from tests.integration.mgmt_support import AUTH

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.integration.mgmt_support import MgmtBroker


def q(text: str) -> str:
    return quote(text, safe="")


def put(base: Callable[[str], str], path: str, body: Any) -> requests.Response:
    r = requests.put(base(path), auth=AUTH, json=body, timeout=30)
    assert r.status_code in (201, 204), (path, r.status_code, r.text)
    return r


def set_shovel(m: MgmtBroker, name: str, value: dict[str, Any], vhost: str = "/") -> None:
    put(m.api, f"parameters/shovel/{q(vhost)}/{q(name)}", {"value": value})


def get(m: MgmtBroker, path: str) -> Any:
    r = requests.get(m.api(path), auth=AUTH, timeout=30)
    r.raise_for_status()
    return r.json()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll ``check`` (every 0.1 s, bounded) until it returns something true."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def shovel_row(m: MgmtBroker, name: str) -> dict[str, Any] | None:
    for row in get(m, "shovels"):
        if row["name"] == name:
            return dict(row)
    return None


def wait_running(m: MgmtBroker, name: str, timeout: float = 30.0) -> dict[str, Any]:
    row: dict[str, Any] = wait_for(
        f"shovel {name} running",
        lambda: (r := shovel_row(m, name)) is not None and r["state"] == "running" and r,
        timeout,
    )
    return row


def connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def publish(url: str, queue: str, bodies: list[bytes], **props: Any) -> None:
    with connect(url) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, durable=True)
        for body in bodies:
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2, **props))


def drain(url: str, queue: str, expect: int, timeout: float = 30.0) -> list[tuple[bytes, Any]]:
    """Consume (acking) until ``expect`` messages came or ``timeout``; a few more are taken
    if they are there, so duplicates show."""
    got: list[tuple[bytes, Any]] = []
    deadline = time.monotonic() + timeout
    with connect(url) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        quiet_until = None
        while time.monotonic() < deadline:
            method, props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                if len(got) >= expect:
                    quiet_until = quiet_until or time.monotonic() + 0.5
                    if time.monotonic() >= quiet_until:
                        break
                time.sleep(0.05)
                continue
            got.append((body, props))
    return got


def count(url: str, queue: str) -> int:
    with connect(url) as conn:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
