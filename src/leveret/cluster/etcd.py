"""An etcd v3 client over etcd's JSON gateway (``/v3/kv/*``, ``/v3/lease/*``, the
streaming ``/v3/watch``) with aiohttp, which the broker already depends on.

Why not a gRPC client (aetcd 1.0.0, the maintained asyncio one): measured against the same
local etcd, the gateway's round trips cost about as much (``bench/etcd_client.py``,
``docs/cluster.md``), and it needs no grpcio (19 MB of native code) nor protobuf; aetcd's
transactions cannot compare a key's lease, which is how a node fences what it writes
because it holds a role. This module speaks the gateway's JSON mapping of etcd's protobuf
messages: keys and values base64, 64-bit integers as strings, fields at their default
value left out (a transaction that failed has no ``succeeded``).

Every call takes the first endpoint that answers and keeps it until it fails; a failure to
connect tries the next one, and when none answers the call raises :class:`EtcdUnavailable`.
Used by ``cluster/membership.py`` and ``cluster/metadata.py``; imports nothing of Leveret.
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

# Calls that do not answer in this many seconds are treated as etcd being unreachable.
REQUEST_TIMEOUT = 5.0


class EtcdError(Exception):
    """etcd answered with an error (a gRPC status carried in the gateway's JSON)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    """No endpoint answered."""


class Compacted(EtcdError):
    """A watch asked for revisions etcd has compacted away: re-read everything."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision compacted (compact revision {compact_revision})")
        self.compact_revision = compact_revision


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes a range or watch cover every key starting with
    ``prefix`` (etcd's convention: the prefix with its last byte plus one)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KeyValue:
        return cls(
            _unb64(data.get("key")),
            _unb64(data.get("value")),
            int(data.get("create_revision", 0)),
            int(data.get("mod_revision", 0)),
            int(data.get("version", 0)),
            int(data.get("lease", 0)),
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One change a watch reports: a put (``kv`` holds the new value) or a delete (``kv``
    holds the key and the revision of the delete)."""

    deleted: bool
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: list[KeyValue]
    revision: int
    count: int


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    # The range results of the branch that ran, in order (puts and deletes give None).
    ranges: list[RangeResult | None]


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """One watch response: events (``revision``: the newest of them), or a progress notice
    (no events): every change up to ``revision`` has been reported."""

    revision: int
    events: list[Event]


# -- the parts of a transaction ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Compare:
    """``key``'s ``target`` (VERSION, CREATE, MOD, VALUE or LEASE) compared with
    ``value`` by ``result`` (EQUAL, NOT_EQUAL, GREATER, LESS); with ``range_end``, every
    key of the range must satisfy it."""

    key: bytes
    target: str
    result: str
    value: int | bytes
    range_end: bytes = b""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": _b64(self.key), "target": self.target}
        out["result"] = self.result
        field_name = {
            "VERSION": "version",
            "CREATE": "create_revision",
            "MOD": "mod_revision",
            "VALUE": "value",
            "LEASE": "lease",
        }[self.target]
        if isinstance(self.value, bytes):
            out[field_name] = _b64(self.value)
        else:
            out[field_name] = str(self.value)
        if self.range_end:
            out["range_end"] = _b64(self.range_end)
        return out


def version_is(key: bytes, version: int) -> Compare:
    return Compare(key, "VERSION", "EQUAL", version)


def exists(key: bytes) -> Compare:
    return Compare(key, "VERSION", "GREATER", 0)


def absent(key: bytes) -> Compare:
    return Compare(key, "VERSION", "EQUAL", 0)


def mod_is(key: bytes, revision: int) -> Compare:
    return Compare(key, "MOD", "EQUAL", revision)


def created_at(key: bytes, revision: int) -> Compare:
    return Compare(key, "CREATE", "EQUAL", revision)


def lease_is(key: bytes, lease: int) -> Compare:
    return Compare(key, "LEASE", "EQUAL", lease)


@dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"key": _b64(self.key), "value": _b64(self.value)}
        if self.lease:
            body["lease"] = str(self.lease)
        return {"request_put": body}


@dataclass(frozen=True, slots=True)
class Delete:
    key: bytes
    range_end: bytes = b""

    def to_json(self) -> dict[str, Any]:
        body = {"key": _b64(self.key)}
        if self.range_end:
            body["range_end"] = _b64(self.range_end)
        return {"request_delete_range": body}


@dataclass(frozen=True, slots=True)
class Get:
    key: bytes
    range_end: bytes = b""

    def to_json(self) -> dict[str, Any]:
        body = {"key": _b64(self.key)}
        if self.range_end:
            body["range_end"] = _b64(self.range_end)
        return {"request_range": body}


Op = Put | Delete | Get


def _range_result(data: dict[str, Any], revision: int) -> RangeResult:
    header = data.get("header") or {}
    kvs = [KeyValue.from_json(kv) for kv in data.get("kvs") or []]
    return RangeResult(kvs, int(header.get("revision", revision)), int(data.get("count", 0)))


@dataclass
class EtcdClient:
    """etcd through its JSON gateway. ``endpoints``: ``http://host:port`` URLs."""

    endpoints: Sequence[str]
    timeout: float = REQUEST_TIMEOUT
    _session: aiohttp.ClientSession | None = field(default=None, init=False, repr=False)
    _current: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("no etcd endpoint given")
        self.endpoints = [e.rstrip("/") for e in self.endpoints]

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=16, ttl_dns_cache=60),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def endpoint(self) -> str:
        return self.endpoints[self._current]

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``/v3/{path}`` of the first endpoint that answers."""
        session = self._http()
        last: Exception | None = None
        for attempt in range(len(self.endpoints)):
            index = (self._current + attempt) % len(self.endpoints)
            url = f"{self.endpoints[index]}/v3/{path}"
            try:
                async with asyncio.timeout(self.timeout):
                    async with session.post(url, json=body) as response:
                        data = await response.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                last = exc
                continue
            self._current = index
            if not isinstance(data, dict):
                raise EtcdError(f"etcd answered {path} with {data!r}")
            if "error" in data or ("code" in data and "message" in data):
                raise EtcdError(str(data.get("message") or data.get("error")), data.get("code", 0))
            return data
        raise EtcdUnavailable(f"no etcd endpoint answered ({', '.join(self.endpoints)}): {last}")

    # -- key-value -----------------------------------------------------------------------

    async def get(self, key: bytes, range_end: bytes = b"", *, revision: int = 0) -> RangeResult:
        body: dict[str, Any] = {"key": _b64(key)}
        if range_end:
            body["range_end"] = _b64(range_end)
        if revision:
            body["revision"] = str(revision)
        data = await self.call("kv/range", body)
        return _range_result(data, 0)

    async def get_prefix(self, prefix: bytes, *, revision: int = 0) -> RangeResult:
        return await self.get(prefix, prefix_end(prefix), revision=revision)

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        data = await self.call("kv/put", body)
        return int(data["header"]["revision"])

    async def delete(self, key: bytes, range_end: bytes = b"") -> int:
        body = {"key": _b64(key)}
        if range_end:
            body["range_end"] = _b64(range_end)
        data = await self.call("kv/deleterange", body)
        return int(data["header"]["revision"])

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Op] = (),
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        data = await self.call(
            "kv/txn",
            {
                "compare": [c.to_json() for c in compare],
                "success": [op.to_json() for op in success],
                "failure": [op.to_json() for op in failure],
            },
        )
        revision = int(data["header"]["revision"])
        ranges: list[RangeResult | None] = []
        for response in data.get("responses") or []:
            inner = response.get("response_range")
            ranges.append(_range_result(inner, revision) if inner is not None else None)
        return TxnResult(bool(data.get("succeeded", False)), revision, ranges)

    async def compact(self, revision: int) -> None:
        await self.call("kv/compaction", {"revision": str(revision)})

    # -- leases --------------------------------------------------------------------------

    async def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease: its id and the TTL etcd granted (seconds)."""
        data = await self.call("lease/grant", {"TTL": str(ttl)})
        return int(data["ID"]), int(data.get("TTL", 0))

    async def keepalive(self, lease: int) -> int:
        """Refresh ``lease``; the TTL it has now, 0 when it has expired (or never was)."""
        data = await self.call("lease/keepalive", {"ID": str(lease)})
        result = data.get("result") or {}
        return int(result.get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        try:
            await self.call("lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if "not found" not in str(exc):
                raise

    # -- watch ---------------------------------------------------------------------------

    async def watch(
        self, key: bytes, range_end: bytes = b"", *, start_revision: int = 0
    ) -> AsyncIterator[WatchBatch]:
        """Every change to ``[key, range_end)`` from ``start_revision`` on, in revision
        order, with progress notices when nothing changes; raises :class:`Compacted` when
        ``start_revision`` is older than etcd keeps, :class:`EtcdUnavailable` when the
        stream cannot be opened or breaks (the caller watches again from where it was)."""
        create: dict[str, Any] = {"key": _b64(key), "progress_notify": True}
        if range_end:
            create["range_end"] = _b64(range_end)
        if start_revision:
            create["start_revision"] = str(start_revision)
        session = self._http()
        url = f"{self.endpoint}/v3/watch"
        try:
            async with session.post(url, json={"create_request": create}) as response:
                buffer = b""
                async for chunk in response.content.iter_any():
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            batch = self._watch_line(line)
                            if batch is not None:
                                yield batch
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self._current = (self._current + 1) % len(self.endpoints)
            raise EtcdUnavailable(f"etcd watch on {url} broke: {exc}") from None
        self._current = (self._current + 1) % len(self.endpoints)
        raise EtcdUnavailable(f"etcd closed the watch on {url}")

    @staticmethod
    def _watch_line(line: bytes) -> WatchBatch | None:
        data = json.loads(line)
        if "error" in data:
            error = data["error"]
            raise EtcdUnavailable(f"etcd watch failed: {error.get('message', error)}")
        result = data.get("result") or {}
        compact = int(result.get("compact_revision", 0))
        if compact:
            raise Compacted(compact)
        if result.get("canceled"):
            raise EtcdUnavailable(f"etcd cancelled the watch: {result.get('cancel_reason', '')}")
        raw = result.get("events") or []
        if not raw:
            if result.get("created"):
                return None  # older events may still follow: not a progress notice
            return WatchBatch(int((result.get("header") or {}).get("revision", 0)), [])
        events = [
            Event(ev.get("type") == "DELETE", KeyValue.from_json(ev.get("kv") or {})) for ev in raw
        ]
        # The header of a batch of events may be ahead of them while a watch catches up:
        # what is known applied is the newest event's revision.
        return WatchBatch(max(e.kv.mod_revision for e in events), events)
