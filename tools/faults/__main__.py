"""``python -m tools.faults``: one fault run against a Leveret or RabbitMQ cluster it starts
itself (docs/faults.md). Writes ``result.json`` and ``summary.md`` to ``--out``; exits 0
when the checks pass, 1 when they fail, 2 when the run itself could not be done.

Example: ``python -m tools.faults --target rabbitmq --cycles 6 --fault kill,pause,partition
--queue-type quorum --out faults-out``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

from tools.faults.report import summary
from tools.faults.runner import FAULTS, QUEUE_TYPES, RunConfig, RunResult, run
from tools.faults.workload import WorkloadSettings


def _faults(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULTS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"faults are a comma list of {', '.join(FAULTS)}")
    return kinds


STREAM_CLIENTS = ("amqp", "rstream")


def _stream_clients(text: str) -> tuple[str, ...]:
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    if not kinds or any(k not in STREAM_CLIENTS for k in kinds):
        raise argparse.ArgumentTypeError(f"a comma list of {', '.join(STREAM_CLIENTS)}")
    return kinds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=("leveret", "rabbitmq"), default="leveret")
    p.add_argument("--nodes", type=int, default=3, help="cluster size (leveret: 1 = no etcd)")
    p.add_argument("--cycles", type=int, default=3, help="faults injected, one after another")
    p.add_argument(
        "--fault", type=_faults, default=("kill",), help=f"comma list of {', '.join(FAULTS)}"
    )
    p.add_argument("--queue-type", choices=QUEUE_TYPES, default="quorum")
    p.add_argument("--queues", type=int, default=1)
    p.add_argument(
        "--transient-queues",
        type=int,
        default=0,
        help="how many of the queues get transient (non-persistent) messages",
    )
    p.add_argument("--clients-on", choices=("auto", "all", "leader"), default="auto")
    p.add_argument(
        "--victims",
        choices=("alternate", "leader", "follower"),
        default="alternate",
        help="which node a node fault hits: the queue's leader, another node, or in turn",
    )
    p.add_argument("--fault-seconds", type=float, default=8.0)
    p.add_argument("--pause-seconds", type=float, default=None)
    p.add_argument("--settle-seconds", type=float, default=5.0)
    p.add_argument("--warmup-seconds", type=float, default=3.0)
    p.add_argument("--lease-ttl", type=int, default=5, help="Leveret's cluster_lease_ttl")
    p.add_argument("--net-ticktime", type=int, default=15, help="RabbitMQ's net_ticktime")
    p.add_argument(
        "--partition-handling",
        choices=("pause_minority", "autoheal", "ignore"),
        default="pause_minority",
        help="RabbitMQ's cluster_partition_handling",
    )
    p.add_argument("--partition-mode", choices=("blackhole", "refuse"), default="blackhole")
    p.add_argument("--slow-iops", type=int, default=5)
    p.add_argument("--publishers", type=int, default=2, help="per queue")
    p.add_argument("--consumers", type=int, default=2, help="per queue")
    p.add_argument("--rate", type=float, default=50.0, help="messages/s per publisher")
    p.add_argument("--window", type=int, default=4, help="unconfirmed messages per publisher")
    p.add_argument("--confirm-timeout", type=float, default=5.0)
    p.add_argument(
        "--consumers-from",
        choices=("start", "drain"),
        default="start",
        help="consume during the faults, or only once publishing stopped (a backlog)",
    )
    p.add_argument(
        "--stream-readers",
        type=_stream_clients,
        default=None,
        help="a stream's readers: amqp (0-9-1), rstream (the stream protocol, with "
        "server-side offset tracking), or both; --consumers of each kind (default: both "
        "where the target serves the stream protocol, Leveret; else amqp)",
    )
    p.add_argument(
        "--stream-publishers",
        type=_stream_clients,
        default=("amqp",),
        help="a stream's publishers: amqp, rstream, or both; --publishers of each kind",
    )
    p.add_argument(
        "--store-every",
        type=int,
        default=50,
        help="a stream-protocol reader stores its offset every this many messages",
    )
    p.add_argument("--body-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--time-limit", type=float, default=3600.0, help="seconds for the whole run")
    p.add_argument("--out", type=Path, default=Path("faults-out"))
    p.add_argument("--keep", action="store_true", help="keep the nodes' data and logs")
    p.add_argument("--save-history", action="store_true", help="also write history.json")
    return p


def config_from(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        target=args.target,
        nodes=args.nodes,
        cycles=args.cycles,
        faults=args.fault,
        queue_type=args.queue_type,
        queues=args.queues,
        transient_queues=args.transient_queues,
        clients_on=args.clients_on,
        victims=args.victims,
        fault_seconds=args.fault_seconds,
        pause_seconds=args.pause_seconds,
        settle_seconds=args.settle_seconds,
        warmup_seconds=args.warmup_seconds,
        lease_ttl=args.lease_ttl,
        net_ticktime=args.net_ticktime,
        partition_handling=args.partition_handling,
        partition_mode=args.partition_mode,
        slow_iops=args.slow_iops,
        seed=args.seed,
        time_limit=args.time_limit,
        out=args.out,
        keep=args.keep,
        save_history=args.save_history,
        workload=WorkloadSettings(
            publishers_per_queue=args.publishers,
            consumers_per_queue=args.consumers,
            rate=args.rate,
            window=args.window,
            confirm_timeout=args.confirm_timeout,
            body_size=args.body_size,
            consumers_from=args.consumers_from,
            stream_readers=args.stream_readers,
            stream_publishers=args.stream_publishers,
            store_every=args.store_every,
        ),
    )


async def _main(config: RunConfig) -> RunResult:
    # SIGTERM ends the run as Ctrl-C does: cancelled, and everything started is stopped.
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    return await run(config)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        result = asyncio.run(_main(config_from(args)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: everything the run started is stopped", file=sys.stderr)
        return 2
    print(summary(result.report))
    if result.report["error"]:
        return 2
    return 0 if result.report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
