"""What a client connected to one node gets for a durable classic queue whose node is down,
as data: the probe run against RabbitMQ 3.10.8 (recorded in
``tests/data/cluster/rabbitmq-3.10.8-down-node.json``) and against Leveret
(``test_cluster_link.py``), compared as they are, the down node's name written ``{node}``.

Record again against a RabbitMQ cluster of two nodes (``/work/shared/bench/
start-rabbitmq-cluster.sh 2 6850``; ``stop_app`` takes the queue's node down)::

    python -m tests.cluster.down_node 6851 6852 rabbit-c2@localhost \\
        rabbitmqctl -n rabbit-c2@localhost stop_app
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions

if TYPE_CHECKING:
    from collections.abc import Callable

RECORDED = Path(__file__).parents[1] / "data" / "cluster" / "rabbitmq-3.10.8-down-node.json"
QUEUE = "q.down"


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))


def probe(a: int, b: int, node: str, take_down: Callable[[], object]) -> dict[str, Any]:
    """Declare ``QUEUE`` through port ``b`` (its node leads it), publish 5 persistent
    messages with confirms through ``a``, consume through ``a``, take ``b``'s node down,
    then try each operation through ``a``."""
    out: dict[str, Any] = {}
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare(QUEUE, durable=True)
    ch.queue_purge(QUEUE)
    conn.close()
    conn = connect(a)
    ch = conn.channel()
    ch.confirm_delivery()
    for _ in range(5):
        ch.basic_publish("", QUEUE, b"kept", pika.BasicProperties(delivery_mode=2))
    conn.close()
    watcher = connect(a)
    wch = watcher.channel()
    cancelled: list[str] = []
    wch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    wch.basic_qos(prefetch_count=1)
    tag = wch.basic_consume(QUEUE, lambda *args: None)
    watcher.process_data_events(time_limit=0.5)
    take_down()
    deadline = time.monotonic() + 10
    while not cancelled and time.monotonic() < deadline:
        watcher.process_data_events(time_limit=0.2)
    out["consumer_on_other_node"] = "basic.cancel" if cancelled == [tag] else "nothing"
    watcher.close()

    def publish(ch: Any, *, mandatory: bool = False) -> None:
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        ch.basic_publish("", QUEUE, b"x", props, mandatory=mandatory)

    attempts: dict[str, Callable[[Any], object]] = {
        "queue.declare": lambda ch: ch.queue_declare(QUEUE, durable=True),
        "queue.declare passive": lambda ch: ch.queue_declare(QUEUE, passive=True),
        "basic.consume": lambda ch: ch.basic_consume(QUEUE, lambda *args: None),
        "basic.get": lambda ch: ch.basic_get(QUEUE),
        "basic.publish with confirms": publish,
        "basic.publish mandatory with confirms": lambda ch: publish(ch, mandatory=True),
        "queue.delete": lambda ch: ch.queue_delete(QUEUE),
    }
    for name, attempt in attempts.items():
        conn = connect(a)
        try:
            attempt(conn.channel())
            out[name] = "ok"
        except pika.exceptions.ChannelClosedByBroker as exc:
            out[name] = [exc.reply_code, exc.reply_text.replace(node, "{node}")]
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as exc:
            out[name] = type(exc).__name__
        finally:
            if conn.is_open:
                conn.close()
    return out


def main() -> None:
    a, b, node, *command = sys.argv[1:]
    found = probe(int(a), int(b), node, lambda: subprocess.run(command, check=True))
    RECORDED.parent.mkdir(parents=True, exist_ok=True)
    RECORDED.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(json.dumps(found, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
