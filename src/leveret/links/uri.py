"""RabbitMQ's AMQP URIs, parsed the way its shovel and federation plugins parse them.

Two readings, as RabbitMQ has two clients:

- AMQP 0-9-1 (``amqp_uri:parse`` of RabbitMQ's Erlang client): ``amqp://user:pass@host:port/
  vhost?query``. No host means *this* broker (RabbitMQ's direct connection; here a socket
  pair into the broker's own front end, ``links/local.py``); a port without a host is
  refused. The vhost is the percent-decoded path (the default when there is none; ``/`` alone
  is the empty vhost, as RabbitMQ reads it). Query keys: ``heartbeat``, ``connection_timeout``
  (ms), ``channel_max``, ``frame_max``, ``auth_mechanism`` (``plain``, ``amqplain``,
  ``external``; repeated for a preference list) and, for ``amqps``, ``cacertfile``,
  ``certfile``, ``keyfile``, ``verify`` (``verify_peer`` | ``verify_none``),
  ``fail_if_no_peer_cert``, ``server_name_indication`` (a name or ``disable``), ``depth``,
  ``password`` (of the key file). Unknown keys are ignored, as RabbitMQ ignores them.
- AMQP 1.0 (``amqp10_client:parse_uri``): ``amqp://user:pass@host:port?query``; a host is
  required, a path is refused; ``sasl`` (``plain`` | ``anon`` | ``external``, else PLAIN
  with credentials and no SASL layer without), ``idle_time_out`` (ms), ``max_frame_size``,
  ``hostname`` (the open's hostname; RabbitMQ's 1.0 plugin reads ``vhost:<name>`` there),
  ``container_id``, and the same TLS keys.

``redact`` is RabbitMQ's ``remove_credentials``: scheme, host, port and path, no user
information and no query (what ``/api/shovels`` and ``/api/federation-links`` show).

Pure: no sockets, no asyncio. The asyncio clients (``amqp091.py``, ``amqp10.py``) open what
an :class:`Endpoint` describes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote

__all__ = ["Endpoint", "TlsOptions", "UriError", "parse_amqp091", "parse_amqp10", "redact"]

DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}
# amqp_client's #amqp_params_network defaults (3.10): heartbeat 10 s, channel_max 2047,
# frame_max 0 (no limit: the server's), connection_timeout 60 s.
DEFAULT_HEARTBEAT = 10
DEFAULT_CHANNEL_MAX = 2047
DEFAULT_CONNECTION_TIMEOUT = 60.0
_MECHANISMS = {"plain": "PLAIN", "amqplain": "AMQPLAIN", "external": "EXTERNAL"}
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)


class UriError(ValueError):
    """A URI RabbitMQ would not accept; the text says why (shown in validation errors)."""


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """The TLS keys of an ``amqps`` URI's query."""

    cacertfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify: bool = False  # verify_peer; RabbitMQ 3.10's client default is verify_none
    fail_if_no_peer_cert: bool = False
    server_name_indication: str | None = None  # None: the host; "" : disabled
    depth: int | None = None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a link connects and how."""

    uri: str  # as given (with credentials: never shown; ``safe_uri`` is)
    scheme: str
    host: str | None  # None: this broker
    port: int
    vhost: str
    username: str | None
    password: str | None = field(repr=False)
    heartbeat: int = DEFAULT_HEARTBEAT
    channel_max: int = DEFAULT_CHANNEL_MAX
    frame_max: int = 0
    connection_timeout: float = DEFAULT_CONNECTION_TIMEOUT
    mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN")
    tls: TlsOptions | None = None
    # AMQP 1.0 only.
    sasl: str = "PLAIN"  # PLAIN, ANONYMOUS, EXTERNAL or "" (no SASL layer)
    hostname: str | None = None
    container_id: str | None = None
    idle_time_out: int = 0  # ms
    max_frame_size: int | None = None

    @property
    def local(self) -> bool:
        return self.host is None

    @property
    def safe_uri(self) -> str:
        return redact(self.uri)


@dataclass(frozen=True, slots=True)
class _Parts:
    scheme: str
    userinfo: list[str]
    host: str | None
    port: int | None
    path: str | None
    query: list[tuple[str, str]]


def _split(uri: str) -> _Parts:
    match = _URI.match(uri)
    if match is None:
        raise UriError(f'"{uri}" not a valid URI: no scheme')
    scheme = match.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise UriError(f'"{uri}" not a valid URI: unexpected URI scheme "{scheme}"')
    rest = match.group(2).split("#", 1)[0]
    userinfo: list[str] = []
    host: str | None = None
    port: int | None = None
    if rest.startswith("//"):
        body = rest[2:]
        cut = re.search(r"[/?]", body)
        authority, tail = (body[: cut.start()], body[cut.start() :]) if cut else (body, "")
        user, at, hostport = authority.rpartition("@")
        if not at:
            hostport = authority
        elif user:
            userinfo = user.split(":")
        host, port = _host_port(uri, hostport)
    else:
        tail = rest
    path_query = tail
    path, _, query_text = path_query.partition("?")
    query = [(k, v) for k, _, v in (p.partition("=") for p in query_text.split("&") if p) if k]
    return _Parts(scheme, userinfo, host or None, port, path or None, query)


def _host_port(uri: str, text: str) -> tuple[str | None, int | None]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise UriError(f'"{uri}" not a valid URI: unterminated IPv6 address')
        if rest and not rest.startswith(":"):
            raise UriError(f'"{uri}" not a valid URI: invalid port {rest!r}')
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = text.partition(":")
    port: int | None = None
    if port_text:
        if not port_text.isdigit():
            raise UriError(f'"{uri}" not a valid URI: invalid port {port_text!r}')
        port = int(port_text)
    return (unquote(host) or None), port


def _int(uri: str, key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UriError(f'"{uri}" not a valid URI: {key} {value!r} is not an integer') from None


def _bool(uri: str, key: str, value: str) -> bool:
    if value not in ("true", "false"):
        raise UriError(f'"{uri}" not a valid URI: {key} {value!r} is not a boolean')
    return value == "true"


def _tls(uri: str, query: list[tuple[str, str]]) -> TlsOptions:
    opts: dict[str, object] = {}
    for key, value in query:
        if key in ("cacertfile", "certfile", "keyfile"):
            opts[key] = unquote(value)
        elif key == "verify":
            if value not in ("verify_peer", "verify_none"):
                raise UriError(f'"{uri}" not a valid URI: invalid option verify={value}')
            opts["verify"] = value == "verify_peer"
        elif key == "fail_if_no_peer_cert":
            opts[key] = _bool(uri, key, value)
        elif key == "server_name_indication":
            opts[key] = "" if value == "disable" else unquote(value)
        elif key == "depth":
            opts[key] = _int(uri, key, value)
        elif key == "password":
            opts[key] = unquote(value)
    return TlsOptions(**opts)  # type: ignore[arg-type]


def parse_amqp091(uri: str, default_vhost: str = "/") -> Endpoint:
    """An AMQP 0-9-1 URI as RabbitMQ's Erlang client reads it (module docstring)."""
    if not isinstance(uri, str):
        raise UriError("expected a URI string")
    parts = _split(uri)
    if parts.port is not None and not 0 < parts.port <= 65535:
        raise UriError(f'"{uri}" not a valid URI: port {parts.port} out of range')
    if parts.host is None and parts.port is not None:
        raise UriError(f'"{uri}" not a valid URI: a port requires a host')
    if parts.path is None:
        vhost = default_vhost
    else:
        rest = parts.path[1:]
        if "/" in rest:
            raise UriError(f'"{uri}" not a valid URI: invalid vhost {rest!r}')
        vhost = unquote(rest)
    username = unquote(parts.userinfo[0]) if parts.userinfo else None
    password = unquote(parts.userinfo[1]) if len(parts.userinfo) > 1 else None
    heartbeat, channel_max, frame_max = DEFAULT_HEARTBEAT, DEFAULT_CHANNEL_MAX, 0
    timeout = DEFAULT_CONNECTION_TIMEOUT
    mechanisms: list[str] = []
    for key, value in parts.query:
        if key == "heartbeat":
            heartbeat = _int(uri, key, value)
        elif key == "channel_max":
            channel_max = _int(uri, key, value)
        elif key == "frame_max":
            frame_max = _int(uri, key, value)
        elif key == "connection_timeout":
            timeout = _int(uri, key, value) / 1000
        elif key == "auth_mechanism":
            mechanism = _MECHANISMS.get(value.lower())
            if mechanism is None:
                raise UriError(f'"{uri}" not a valid URI: unsupported auth_mechanism {value!r}')
            mechanisms.append(mechanism)
    return Endpoint(
        uri=uri,
        scheme=parts.scheme,
        host=parts.host,
        port=parts.port or DEFAULT_PORTS[parts.scheme],
        vhost=vhost,
        username=username,
        password=password,
        heartbeat=max(heartbeat, 0),
        channel_max=max(channel_max, 0),
        frame_max=max(frame_max, 0),
        connection_timeout=timeout if timeout > 0 else DEFAULT_CONNECTION_TIMEOUT,
        mechanisms=tuple(mechanisms) or ("PLAIN", "AMQPLAIN"),
        tls=_tls(uri, parts.query) if parts.scheme == "amqps" else None,
    )


def parse_amqp10(uri: str) -> Endpoint:
    """An AMQP 1.0 URI as RabbitMQ's 1.0 client reads it (module docstring). RabbitMQ's
    client needs a host; a host-less URI is taken here as this broker, as for 0-9-1."""
    if not isinstance(uri, str):
        raise UriError("expected a URI string")
    parts = _split(uri)
    if parts.path not in (None, "/"):
        raise UriError(f'"{uri}" not a valid URI: path_segment_not_supported')
    if parts.host is None and parts.port is not None:
        raise UriError(f'"{uri}" not a valid URI: a port requires a host')
    username = unquote(parts.userinfo[0]) if parts.userinfo else None
    password = unquote(parts.userinfo[1]) if len(parts.userinfo) > 1 else None
    query = dict(parts.query)
    sasl = query.get("sasl")
    if sasl == "anon":
        mechanism = "ANONYMOUS"
    elif sasl == "external":
        mechanism = "EXTERNAL"
    elif sasl == "plain" and not username:
        raise UriError(f'"{uri}" not a valid URI: plain_sasl_missing_userinfo')
    else:
        mechanism = "PLAIN" if username else ""
    if parts.host is None:
        mechanism = "EXTERNAL"  # this broker: the socket pair's identity
    extra: dict[str, object] = {}
    for key in ("idle_time_out", "max_frame_size"):
        if key in query:
            extra[key] = _int(uri, key, query[key])
    return Endpoint(
        uri=uri,
        scheme=parts.scheme,
        host=parts.host,
        port=parts.port or DEFAULT_PORTS[parts.scheme],
        vhost="/",
        username=username,
        password=password,
        heartbeat=0,
        sasl=mechanism,
        hostname=unquote(query["hostname"]) if "hostname" in query else parts.host,
        container_id=unquote(query["container_id"]) if "container_id" in query else None,
        tls=_tls(uri, parts.query) if parts.scheme == "amqps" else None,
        **extra,  # type: ignore[arg-type]
    )


def redact(uri: str) -> str:
    """RabbitMQ's ``remove_credentials``: ``scheme://host[:port]path``, nothing else."""
    try:
        parts = _split(uri)
    except UriError:
        return "(invalid URI)"
    host = parts.host or ""
    if host and ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path or ''}"
