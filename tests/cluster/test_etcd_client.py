"""The etcd client (``cluster/etcd.py``) against a real etcd: key-value calls, the
transactions a declare and a fenced write make, leases, and the watch (with compaction)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from leveret.cluster.etcd import (
    Compacted,
    Compare,
    Delete,
    EtcdClient,
    EtcdUnavailable,
    Get,
    Put,
    absent,
    exists,
    lease_is,
    prefix_end,
)

if TYPE_CHECKING:
    from leveret.testing.etcd import EtcdServer

pytestmark = pytest.mark.pure_only


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_prefix_end() -> None:
    assert prefix_end(b"a/") == b"a0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff") == b"\0"


def test_put_get_delete_and_txn(etcd_server: EtcdServer, etcd_prefix: str) -> None:
    key = f"{etcd_prefix}k".encode()

    async def scenario() -> None:
        client = EtcdClient([etcd_server.url])
        try:
            rev = await client.put(key, b"v1")
            got = await client.get(key)
            assert [kv.value for kv in got.kvs] == [b"v1"]
            assert got.kvs[0].mod_revision == rev
            # Create-if-absent: the second one fails and reads what is there.
            first = await client.txn([absent(key + b"2")], [Put(key + b"2", b"a")])
            second = await client.txn(
                [absent(key + b"2")], [Put(key + b"2", b"b")], [Get(key + b"2")]
            )
            assert first.succeeded
            assert not second.succeeded
            found = second.ranges[0]
            assert found is not None
            assert [kv.value for kv in found.kvs] == [b"a"]
            # A range compare: no key under the prefix modified after ``rev``.
            under = etcd_prefix.encode()
            stale = Compare(under, "MOD", "LESS", rev + 1, prefix_end(under))
            assert not (await client.txn([stale], [Put(key, b"x")])).succeeded
            fresh = Compare(under, "MOD", "LESS", second.revision + 1, prefix_end(under))
            assert (await client.txn([fresh], [Put(key, b"x")])).succeeded
            await client.txn([exists(key)], [Delete(under, prefix_end(under))])
            assert (await client.get_prefix(under)).count == 0
        finally:
            await client.close()

    run(scenario())


def test_lease_fences_writes(etcd_server: EtcdServer, etcd_prefix: str) -> None:
    """A key put under a lease; a transaction comparing that lease succeeds while it is
    held and fails once it is revoked (the key is gone with it)."""
    key = f"{etcd_prefix}node".encode()
    other = f"{etcd_prefix}role".encode()

    async def scenario() -> None:
        client = EtcdClient([etcd_server.url])
        try:
            lease, ttl = await client.grant(10)
            assert ttl == 10
            await client.put(key, b"me", lease=lease)
            assert await client.keepalive(lease) == 10
            assert (await client.txn([lease_is(key, lease)], [Put(other, b"1")])).succeeded
            await client.revoke(lease)
            assert await client.keepalive(lease) == 0
            assert not (await client.txn([lease_is(key, lease)], [Put(other, b"2")])).succeeded
            assert (await client.get(other)).kvs[0].value == b"1"
        finally:
            await client.close()

    run(scenario())


def test_watch_reports_changes_in_order_and_compaction(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    under = etcd_prefix.encode()

    async def scenario() -> None:
        client = EtcdClient([etcd_server.url])
        try:
            start = await client.put(under + b"a", b"1")
            await client.put(under + b"b", b"2")
            last = await client.delete(under + b"a")
            seen: list[tuple[bool, bytes, int]] = []
            async with asyncio.timeout(10):
                async for batch in client.watch(under, prefix_end(under), start_revision=start):
                    seen += [(e.deleted, e.kv.key, e.kv.mod_revision) for e in batch.events]
                    if batch.revision >= last:
                        break
            assert seen == [
                (False, under + b"a", start),
                (False, under + b"b", start + 1),
                (True, under + b"a", last),
            ]
            await client.compact(last)
            watch = client.watch(under, prefix_end(under), start_revision=start)
            with pytest.raises(Compacted) as caught:
                await asyncio.wait_for(anext(watch), 10)
            assert caught.value.compact_revision == last
        finally:
            await client.close()

    run(scenario())


def test_unreachable_endpoint_fails_over_then_raises(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        # A port nothing listens on, then the real etcd: the call reaches the second.
        client = EtcdClient(["http://127.0.0.1:1", etcd_server.url], timeout=2)
        try:
            await client.get(b"/nothing")
            assert client.endpoint == etcd_server.url
        finally:
            await client.close()
        dead = EtcdClient(["http://127.0.0.1:1"], timeout=2)
        try:
            with pytest.raises(EtcdUnavailable):
                await dead.get(b"/nothing")
        finally:
            await dead.close()

    run(scenario())
