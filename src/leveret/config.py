"""Broker settings: defaults, then a TOML file, then LEVERET_* variables, then flags.

Parsing happens here, at the edge; the rest of the broker sees a frozen ``Settings``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping


class ConfigError(Exception):
    """A setting that cannot be used; the CLI prints it and exits with status 2."""


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 5672
    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat: int = 60
    max_message_size: int = 128 * 1024 * 1024
    # Bytes queued messages may hold before publishers are blocked; None = 30% of RAM, 0 = off.
    memory_high_watermark: int | None = None
    # RabbitMQ's vm_memory_high_watermark_paging_ratio, in percent of the watermark: once
    # queued messages hold this much, queues page large bodies too (a queue always pages
    # past 2048 ready messages of small ones); 0 = page by message count alone.
    memory_paging_percent: int = 50
    # RabbitMQ's default_user/default_pass; a user named "guest" may connect from loopback only.
    default_user: str = "guest"
    default_pass: str = "guest"  # noqa: S105 - RabbitMQ's well-known default, loopback-only
    # Virtual hosts that exist at boot (the default user may use each of them).
    vhosts: tuple[str, ...] = ("/",)
    # Milliseconds a consumer may keep a delivery unacked before it is cancelled and its
    # deliveries are requeued (RabbitMQ's consumer_timeout, 30 minutes); 0 = off.
    consumer_timeout: int = 1_800_000
    log_level: str = "info"
    # Where durable entities and persistent messages are kept ("" = default_data_dir()).
    data_dir: str = ""
    # RabbitMQ's loopback_users: users who may connect from loopback addresses only
    # (empty, or "none", lets every user connect from anywhere).
    loopback_users: tuple[str, ...] = ("guest",)
    # RabbitMQ's connection_max: connections the broker accepts at once; None = no limit.
    connection_max: int | None = None
    # The user a client logging in with SASL ANONYMOUS becomes (RabbitMQ 4's
    # anonymous_login_user, guest by default: clients without credentials log in from the
    # broker's own machine, loopback_users still applying); "none" (or "") = not offered.
    anonymous_login_user: str = "guest"
    # TLS (amqps): off unless tls_certfile is set; then a second listener on tls_port.
    tls_port: int = 5671
    tls_host: str = ""  # "" = the same address as host
    tls_certfile: str = ""
    tls_keyfile: str = ""
    tls_cacertfile: str = ""  # CA bundle for client certificates
    tls_verify_peer: bool = False  # ask for a client certificate and verify it
    tls_fail_if_no_peer_cert: bool = False  # refuse clients without one (needs verify_peer)
    tls_min_version: str = "1.2"  # "1.2" or "1.3"
    tls_ciphers: str = ""  # OpenSSL cipher list for TLS 1.2 ("" = Python's defaults)
    # EXTERNAL logins: the user name is the client certificate's whole subject DN
    # ("distinguished_name", RabbitMQ's default) or its CN ("common_name").
    ssl_cert_login_from: str = "distinguished_name"
    # When a stream append is confirmed: "fsync" (after fdatasync, the default) or "written"
    # (after the write to the file, before it is synced: RabbitMQ's streams' guarantee,
    # which leans on replication; a crash of the machine can lose confirmed messages).
    stream_confirm: str = "fsync"
    # RabbitMQ's stream protocol: its own listener (0 picks a free port); with TLS on, a
    # second one on stream_tls_port (RabbitMQ's stream.listeners.ssl, 5551).
    stream_port: int = 5552
    stream_tls_port: int = 5551
    # RabbitMQ's stream.advertised_host / stream.advertised_port: what the stream protocol
    # tells clients to connect to (open's advertised_host/_port, metadata's brokers) for
    # this node, and what its record gives the other nodes for the streams it leads, when
    # that is not the listener (a container's published port, a NAT). "" / 0 = the
    # listener's host (a wildcard: "localhost") and port.
    stream_advertised_host: str = ""
    stream_advertised_port: int = 0
    # RabbitMQ's stream.advertised_tls_port: the port a client connected over TLS (on
    # stream_tls_port) is told, with stream_advertised_host; 0 = the TLS listener's.
    stream_advertised_tls_port: int = 0
    # The management plane (management/): RabbitMQ's HTTP API and web UI, and Prometheus.
    # Both run on the broker's event loop; on by default, on loopback.
    management: bool = True
    management_host: str = "127.0.0.1"
    management_port: int = 15672
    management_tls_certfile: str = ""  # set with the key: HTTPS instead of HTTP
    management_tls_keyfile: str = ""
    prometheus: bool = True
    prometheus_host: str = ""  # "" = management_host
    prometheus_port: int = 15692
    # RabbitMQ's collect_statistics_interval: milliseconds between samples of the counters.
    collect_statistics_interval: int = 5000
    # RabbitMQ's load_definitions: a definitions file imported at every boot.
    load_definitions: str = ""
    # A cluster (cluster/, docs/cluster.md): etcd's client URLs (http://HOST:PORT); empty =
    # a single node, no etcd. Every key of the cluster is under etcd_prefix.
    etcd: tuple[str, ...] = ()
    etcd_prefix: str = "/leveret/"
    # This node's name in the cluster ("" = leveret@ and the host name, as rabbit@host).
    node_name: str = ""
    # The inter-node link's port (RabbitMQ's distribution port is 25672).
    cluster_port: int = 25672
    # HOST[:PORT] the other nodes dial for this node's link, written in its record instead
    # of host:cluster_port (a container's published port, a NAT, a forwarder), as etcd's
    # --initial-advertise-peer-urls and Kafka's advertised.listeners; PORT defaults to the
    # port the link listens on. "" = host:cluster_port. Read by cluster_advertise().
    cluster_advertise: str = ""
    # Seconds of the node's etcd lease: a node that stops answering is down for the others
    # this long after its last keepalive (every third of it).
    cluster_lease_ttl: int = 5
    # Where to reach a peer's inter-node port instead of the address in its record, as
    # NODE=HOST:PORT entries: a node behind NAT, or the fault harness putting a proxy on
    # each path between nodes (tools/faults, docs/faults.md). Read by cluster_address().
    cluster_peer_addresses: tuple[str, ...] = ()
    # TLS on the inter-node link (RabbitMQ's inter-node TLS): off unless
    # cluster_tls_certfile is set; then the node listens on cluster_port with TLS and dials
    # its peers with TLS, presenting this certificate both ways, and (verify_peer, on by
    # default) refuses a peer whose certificate is not signed by cluster_tls_cacertfile's CA.
    # tls_min_version and tls_ciphers apply as on the amqps listener.
    cluster_tls_certfile: str = ""
    cluster_tls_keyfile: str = ""
    cluster_tls_cacertfile: str = ""
    cluster_tls_verify_peer: bool = True
    # PEM certificate revocation list(s) of the cluster's CA: a peer whose certificate is
    # listed is refused on both sides of the link (only the peer's own certificate is
    # looked up, OpenSSL's CRL_CHECK_LEAF). "" = no revocation check.
    cluster_tls_crlfile: str = ""
    # The dialer checks that the peer's certificate names the host it dials (the record's,
    # cluster_advertise's, or cluster_peer_addresses' host; an IP address must be a SAN IP
    # entry). Off by default, as RabbitMQ's inter-node TLS: the CA is the trust anchor.
    cluster_tls_server_name_check: bool = False
    # Nodes of one broker on this machine (``leveret serve --workers N``): a supervisor runs
    # N processes sharing the ports, each a cluster node with its own data_dir/node-K, on an
    # etcd of its own unless etcd is given (cli/workers.py, docs/cluster.md). 1 = one process.
    workers: int = 1
    # Listen with SO_REUSEPORT, sharing the AMQP, stream and management ports with the
    # other workers (the supervisor sets it for its workers).
    reuse_port: bool = False


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """$XDG_DATA_HOME/leveret, else ~/.local/share/leveret: writable without root."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "leveret"


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
# List settings whose empty value means something (RabbitMQ: loopback_users = none).
_MAY_BE_EMPTY = frozenset(("loopback_users",))
# String settings that RabbitMQ turns off with the word "none" (stored as "").
_NONE_MEANS_OFF = frozenset(("anonymous_login_user",))
TLS_VERSIONS = ("1.2", "1.3")
# In the data directory of ``leveret serve --workers`` (``cli/supervisor.py``): its nodes
# and etcd; each worker's own data directory is beside it (node-1, ...).
WORKERS_FILE = "workers.json"
# More workers than this is a mistake (each is a whole broker process), not a plan.
MAX_WORKERS = 256
CERT_LOGIN_FROM = ("distinguished_name", "common_name")


def _coerce(name: str, value: object, source: str) -> object:
    field = _FIELDS.get(name)
    if field is None:
        raise ConfigError(f"{source}: unknown setting '{name}'")
    if field.type in ("bool", bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOLEANS:
            return _BOOLEANS[value.strip().lower()]
        raise ConfigError(f"{source}: {name} must be true or false, got {value!r}")
    if field.type in ("int", int, "int | None"):
        if isinstance(value, bool | float):
            raise ConfigError(f"{source}: {name} must be an integer, got {value!r}")
        try:
            number = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: {name} must be an integer, got {value!r}") from None
        if number < 0:
            raise ConfigError(f"{source}: {name} must not be negative, got {number}")
        return number
    if field.type in ("tuple[str, ...]", tuple):
        if name in _MAY_BE_EMPTY and (
            value == [] or (isinstance(value, str) and value.strip().lower() in ("", "none"))
        ):
            return ()
        # A TOML array, or a comma-separated string from a variable or flag.
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ConfigError(f"{source}: {name} must be a list of strings, got {value!r}")
        names = tuple(dict.fromkeys(i.strip() for i in items if i.strip()))
        if not names:
            raise ConfigError(f"{source}: {name} must name at least one entry")
        return names
    if not isinstance(value, str):
        raise ConfigError(f"{source}: {name} must be a string, got {value!r}")
    if name in _NONE_MEANS_OFF and value.strip().lower() == "none":
        return ""
    return value


def _validate(settings: Settings) -> Settings:
    if settings.port > 65535:
        raise ConfigError(f"port must be at most 65535, got {settings.port}")
    if settings.frame_max and settings.frame_max < 4096:
        raise ConfigError(f"frame_max must be at least 4096, got {settings.frame_max}")
    if settings.channel_max > 65535:
        raise ConfigError(f"channel_max must be at most 65535, got {settings.channel_max}")
    if settings.memory_paging_percent > 100:
        raise ConfigError(
            f"memory_paging_percent must be at most 100, got {settings.memory_paging_percent}"
        )
    if settings.heartbeat > 65535:
        raise ConfigError(f"heartbeat must be at most 65535, got {settings.heartbeat}")
    if not settings.default_user:
        raise ConfigError("default_user must not be empty")
    if settings.stream_confirm not in ("fsync", "written"):
        raise ConfigError(f"stream_confirm must be fsync or written: {settings.stream_confirm}")
    if settings.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log_level must be debug, info, warning or error: {settings.log_level}")
    if settings.tls_port > 65535:
        raise ConfigError(f"tls_port must be at most 65535, got {settings.tls_port}")
    if settings.stream_port > 65535:
        raise ConfigError(f"stream_port must be at most 65535, got {settings.stream_port}")
    if settings.stream_tls_port > 65535:
        raise ConfigError(f"stream_tls_port must be at most 65535, got {settings.stream_tls_port}")
    _validate_advertised(settings)
    if settings.tls_certfile and not settings.tls_keyfile:
        raise ConfigError("tls_certfile needs tls_keyfile (the certificate's private key)")
    if settings.tls_keyfile and not settings.tls_certfile:
        raise ConfigError("tls_keyfile needs tls_certfile")
    for name in ("management_port", "prometheus_port"):
        if getattr(settings, name) > 65535:
            raise ConfigError(f"{name} must be at most 65535, got {getattr(settings, name)}")
    if bool(settings.management_tls_certfile) != bool(settings.management_tls_keyfile):
        raise ConfigError("management_tls_certfile and management_tls_keyfile go together")
    if settings.collect_statistics_interval < 100:
        raise ConfigError("collect_statistics_interval must be at least 100 (milliseconds)")
    if settings.tls_min_version not in TLS_VERSIONS:
        raise ConfigError(f"tls_min_version must be 1.2 or 1.3, got {settings.tls_min_version}")
    if settings.tls_fail_if_no_peer_cert and not settings.tls_verify_peer:
        raise ConfigError("tls_fail_if_no_peer_cert needs tls_verify_peer")
    if settings.tls_verify_peer and not settings.tls_cacertfile:
        raise ConfigError("tls_verify_peer needs tls_cacertfile (the CA of client certificates)")
    if settings.ssl_cert_login_from not in CERT_LOGIN_FROM:
        raise ConfigError(
            "ssl_cert_login_from must be distinguished_name or common_name, "
            f"got {settings.ssl_cert_login_from}"
        )
    if not 1 <= settings.workers <= MAX_WORKERS:
        raise ConfigError(f"workers must be from 1 to {MAX_WORKERS}, got {settings.workers}")
    if settings.cluster_port > 65535:
        raise ConfigError(f"cluster_port must be at most 65535, got {settings.cluster_port}")
    if settings.cluster_lease_ttl < 2:
        raise ConfigError(
            f"cluster_lease_ttl must be at least 2 (seconds), got {settings.cluster_lease_ttl}"
        )
    peer_addresses(settings)  # each entry NODE=HOST:PORT
    _validate_cluster_tls(settings)
    for url in settings.etcd:
        if not url.startswith(("http://", "https://")) or url.count(":") < 2:
            raise ConfigError(f"etcd must be http://HOST:PORT URLs, got {url!r}")
    if not (settings.etcd_prefix.startswith("/") and settings.etcd_prefix.endswith("/")):
        raise ConfigError(f"etcd_prefix must start and end with '/', got {settings.etcd_prefix!r}")
    return settings


def _validate_cluster_tls(settings: Settings) -> None:
    if settings.cluster_tls_certfile and not settings.cluster_tls_keyfile:
        raise ConfigError(
            "cluster_tls_certfile needs cluster_tls_keyfile (the certificate's private key)"
        )
    if settings.cluster_tls_keyfile and not settings.cluster_tls_certfile:
        raise ConfigError("cluster_tls_keyfile needs cluster_tls_certfile")
    if settings.cluster_tls_cacertfile and not settings.cluster_tls_certfile:
        raise ConfigError(
            "cluster_tls_cacertfile needs cluster_tls_certfile and cluster_tls_keyfile "
            "(the node's own certificate: link TLS is on when they are set)"
        )
    if (
        settings.cluster_tls_certfile
        and settings.cluster_tls_verify_peer
        and not settings.cluster_tls_cacertfile
    ):
        raise ConfigError(
            "cluster_tls_certfile needs cluster_tls_cacertfile, the CA that signs every "
            "node's certificate (cluster_tls_verify_peer is on by default; set it to false "
            "to encrypt the link without checking the peers' certificates)"
        )
    for name in ("cluster_tls_crlfile", "cluster_tls_server_name_check"):
        if getattr(settings, name) and not settings.cluster_tls_certfile:
            raise ConfigError(
                f"{name} needs cluster_tls_certfile and cluster_tls_keyfile "
                "(the node's own certificate: link TLS is on when they are set)"
            )
        if getattr(settings, name) and not settings.cluster_tls_verify_peer:
            raise ConfigError(
                f"{name} needs cluster_tls_verify_peer (only a verified certificate is "
                "checked further)"
            )


# Listening addresses that name no interface a peer or a client could dial.
_WILDCARDS = ("", "0.0.0.0", "::")


def _validate_advertised(settings: Settings) -> None:
    if settings.stream_advertised_port > 65535:
        raise ConfigError(
            f"stream_advertised_port must be at most 65535, got {settings.stream_advertised_port}"
        )
    if settings.stream_advertised_tls_port > 65535:
        raise ConfigError(
            "stream_advertised_tls_port must be at most 65535, got "
            f"{settings.stream_advertised_tls_port}"
        )
    host = settings.stream_advertised_host
    if host and not _is_host(host):
        raise ConfigError(
            f"stream_advertised_host must be a host name or address clients can reach, got {host!r}"
        )
    # Each worker of --workers has a link port and a stream port of its own, which one
    # advertised port cannot name: with workers, only the host may be given.
    advertise = cluster_advertise(settings)
    if advertise is not None and advertise[1] and settings.workers > 1:
        raise ConfigError(
            "cluster_advertise names one node's port; with workers > 1 give its HOST only "
            "(each worker advertises its own cluster_port + K - 1)"
        )
    if settings.stream_advertised_port and settings.workers > 1:
        raise ConfigError(
            "stream_advertised_port names one node's port; with workers > 1 leave it unset "
            "(each worker names its own stream port)"
        )


def _is_host(host: str) -> bool:
    """A name or address a peer can dial: not a wildcard, no spaces, brackets or slashes."""
    return host not in _WILDCARDS and not any(ch.isspace() or ch in "/[]@" for ch in host)


def cluster_advertise(settings: Settings) -> tuple[str, int] | None:
    """``cluster_advertise`` as (host, port), port 0 when it names none (the listener's
    then); None when it is not set. ``[v6]`` or ``[v6]:PORT`` for an IPv6 address."""
    value = settings.cluster_advertise.strip()
    if not value:
        return None
    host, has_port, port = value, False, ""
    if value.startswith("["):  # [v6] or [v6]:PORT
        host, closed, rest = value[1:].partition("]")
        has_port, port = rest.startswith(":"), rest[1:]
        if not closed or (rest and not has_port):
            host = ""
    elif value.count(":") == 1:  # HOST:PORT
        host, _, port = value.partition(":")
        has_port = True
    # else HOST, or an IPv6 address without brackets (and so without a port)
    valid_port = not has_port or (port.isdigit() and 0 < int(port) <= 65535)
    if not (host and valid_port and _is_host(host)):
        raise ConfigError(
            "cluster_advertise must be HOST or HOST:PORT (the address the other nodes dial "
            f"for this node's inter-node link, not a wildcard), got {settings.cluster_advertise!r}"
        )
    return host, int(port) if port else 0


def peer_addresses(settings: Settings) -> dict[str, tuple[str, int]]:
    """``cluster_peer_addresses`` as node name -> (host, port)."""
    found: dict[str, tuple[str, int]] = {}
    for entry in settings.cluster_peer_addresses:
        node, _, address = entry.partition("=")
        host, _, port = address.rpartition(":")
        if not (node and host and port.isdigit() and 0 < int(port) <= 65535):
            raise ConfigError(
                f"cluster_peer_addresses must be NODE=HOST:PORT entries, got {entry!r}"
            )
        found[node] = (host.strip("[]"), int(port))
    return found


def node_name(settings: Settings) -> str:
    """This node's name: ``node_name``, else ``leveret@`` and the host name."""
    return settings.node_name or f"leveret@{socket.gethostname()}"


def load(
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Settings:
    """Settings from every source, later sources winning."""
    values: dict[str, object] = {}
    if config_file is not None:
        path = Path(config_file)
        try:
            data = tomllib.loads(path.read_bytes().decode("utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid UTF-8: {exc.reason}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        section = data.get("leveret", data)
        if not isinstance(section, dict):
            raise ConfigError(f"config file {path}: [leveret] must be a table")
        for key, value in section.items():
            name = key.replace("-", "_")
            if name not in _FIELDS:
                raise ConfigError(f"config file {path}: unknown setting '{key}'")
            values[name] = _coerce(name, value, str(path))
    env = os.environ if environ is None else environ
    for name in _FIELDS:
        var = f"LEVERET_{name.upper()}"
        if var in env:
            values[name] = _coerce(name, env[var], var)
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, value, f"--{name.replace('_', '-')}")
    return _validate(Settings(**values))  # type: ignore[arg-type]


def to_document(settings: Settings) -> dict[str, object]:
    """The settings as JSON values (what ``leveret serve --workers`` hands each worker)."""
    return {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in dataclasses.asdict(settings).items()
    }


def from_document(doc: Mapping[str, object]) -> Settings:
    """Settings from :func:`to_document`'s values, checked as every other source's."""
    values = {
        name: value if value is None or value == [] else _coerce(name, value, "settings")
        for name, value in doc.items()
    }
    # An empty list is an empty tuple (no etcd, no loopback users).
    values = {name: () if value == [] else value for name, value in values.items()}
    return _validate(Settings(**values))  # type: ignore[arg-type]
