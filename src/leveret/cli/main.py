"""The ``leveret`` command: ``leveret serve`` runs the broker, ``leveret ctl`` manages a
running one (``cli/ctl.py``)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from leveret import __version__
from leveret.config import ConfigError, load

if TYPE_CHECKING:
    from collections.abc import Sequence
from typing import NoReturn


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One clear line, like every other CLI error, instead of usage + error.
        self.exit(2, f"leveret: {message} (see '{self.prog} --help')\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="leveret", description="Leveret AMQP broker")
    parser.add_argument("--version", action="version", version=f"leveret {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--config", help="TOML config file (settings under [leveret])")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 5672; 0 = any)")
    serve.add_argument("--heartbeat", type=int, help="heartbeat interval offered, seconds")
    serve.add_argument("--frame-max", type=int, help="largest frame offered, bytes")
    serve.add_argument("--channel-max", type=int, help="most channels per connection")
    serve.add_argument("--max-message-size", type=int, help="largest message body, bytes")
    serve.add_argument(
        "--memory-high-watermark",
        type=int,
        help="bytes of queued messages before publishers are blocked (0 = never)",
    )
    serve.add_argument(
        "--memory-paging-percent",
        type=int,
        help="percent of the watermark past which queues page large bodies too (default 50)",
    )
    serve.add_argument("--default-user", help="the user created at boot (default guest)")
    serve.add_argument("--default-pass", help="its password (default guest)")
    serve.add_argument("--vhosts", help="comma-separated virtual hosts to create (default /)")
    serve.add_argument(
        "--consumer-timeout",
        type=int,
        help="ms a delivery may stay unacked before its consumer is cancelled (0 = off)",
    )
    serve.add_argument(
        "--data-dir",
        help="directory of durable state (default $XDG_DATA_HOME/leveret or "
        "~/.local/share/leveret)",
    )
    serve.add_argument("--log-level", help="debug, info, warning or error")
    serve.add_argument(
        "--stream-confirm",
        help="fsync (default: confirm stream appends once synced) or written (once written, "
        "not synced: a machine crash can lose confirmed messages)",
    )
    serve.add_argument(
        "--loopback-users",
        help="users who may connect from loopback only, comma-separated ('none': no one)",
    )
    serve.add_argument("--connection-max", type=int, help="most connections at once")
    serve.add_argument("--tls-port", type=int, help="amqps port (default 5671)")
    serve.add_argument(
        "--stream-port", type=int, help="RabbitMQ stream protocol port (default 5552; 0: any)"
    )
    serve.add_argument("--tls-certfile", help="server certificate (PEM); enables amqps")
    serve.add_argument("--tls-keyfile", help="its private key (PEM)")
    serve.add_argument("--tls-cacertfile", help="CA bundle for client certificates (PEM)")
    serve.add_argument("--management-host", help="HTTP API address (default 127.0.0.1)")
    serve.add_argument(
        "--management-port", type=int, help="HTTP API and web UI port (default 15672; 0 = any)"
    )
    serve.add_argument(
        "--no-management",
        dest="management",
        action="store_const",
        const=False,
        help="run without the HTTP API and Prometheus endpoint",
    )
    serve.add_argument("--prometheus-port", type=int, help="Prometheus port (default 15692)")
    serve.add_argument("--load-definitions", help="definitions file imported at boot (JSON)")
    serve.add_argument(
        "--etcd",
        help="join a cluster through etcd: its client URLs, http://HOST:PORT[,...] "
        "(docs/cluster.md); without it Leveret is a single node",
    )
    serve.add_argument("--node-name", help="this node's name in the cluster (default leveret@HOST)")
    serve.add_argument("--cluster-port", type=int, help="inter-node link port (default 25672)")
    serve.add_argument(
        "--cluster-advertise",
        help="HOST[:PORT] the other nodes dial for this node's link, when it is not "
        "host:cluster-port (a container, NAT); PORT defaults to the link's",
    )
    serve.add_argument(
        "--workers",
        type=int,
        help="run N nodes of one broker on this machine, sharing the ports, each with its "
        "data in DATA_DIR/node-K, on an etcd of their own unless --etcd is given "
        "(docs/cluster.md)",
    )
    sub.add_parser(
        "ctl",
        help="manage the running broker (rabbitmqctl's verbs; 'leveret ctl --help')",
        add_help=False,
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ctl"]:
        from leveret.cli import ctl

        return ctl.main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "serve":
        overrides = {
            "host": args.host,
            "port": args.port,
            "heartbeat": args.heartbeat,
            "frame_max": args.frame_max,
            "channel_max": args.channel_max,
            "max_message_size": args.max_message_size,
            "memory_high_watermark": args.memory_high_watermark,
            "memory_paging_percent": args.memory_paging_percent,
            "default_user": args.default_user,
            "default_pass": args.default_pass,
            "vhosts": args.vhosts,
            "consumer_timeout": args.consumer_timeout,
            "log_level": args.log_level,
            "data_dir": args.data_dir,
            "loopback_users": args.loopback_users,
            "connection_max": args.connection_max,
            "tls_port": args.tls_port,
            "tls_certfile": args.tls_certfile,
            "tls_keyfile": args.tls_keyfile,
            "tls_cacertfile": args.tls_cacertfile,
            "stream_confirm": args.stream_confirm,
            "stream_port": args.stream_port,
            "management": args.management,
            "management_host": args.management_host,
            "management_port": args.management_port,
            "prometheus_port": args.prometheus_port,
            "load_definitions": args.load_definitions,
            "etcd": args.etcd,
            "node_name": args.node_name,
            "cluster_port": args.cluster_port,
            "cluster_advertise": args.cluster_advertise,
            "workers": args.workers,
        }
        try:
            settings = load(args.config, overrides=overrides)
        except ConfigError as exc:
            print(f"leveret: {exc}", file=sys.stderr)
            return 2
        logging.basicConfig(
            level=settings.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        if settings.workers > 1:
            from leveret.cli.supervisor import supervise

            return supervise(settings)
        from leveret.assembly import serve
        from leveret.server.server import StoreError

        try:
            serve(settings)
        except StoreError as exc:
            print(f"leveret: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(
                f"leveret: cannot listen on {settings.host}:{settings.port}: {exc.strerror}",
                file=sys.stderr,
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
