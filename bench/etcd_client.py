"""``python -m bench.etcd_client``: the etcd client choice, measured (docs/cluster.md).

Starts an etcd of its own (``leveret.testing.etcd``), then, round after round, alternating
the clients (gateway, aetcd, gateway, ...), measures with each:

- ``put``: one put's round trip;
- ``txn``: a transaction comparing a key's version and putting it (what a declare costs);
- ``keepalive``: one lease refresh;
- ``watch``: from a put's call to the watch reporting it (the client's own watch stream).

and the client process's CPU per operation. ``gateway`` is ``leveret.cluster.etcd`` (JSON
over aiohttp); ``aetcd`` is the gRPC client (``pip install aetcd``; skipped when it is not
installed: it is not one of Leveret's dependencies). Prints medians over rounds of each
round's median, and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import TYPE_CHECKING, Any

from leveret.cluster.etcd import EtcdClient, Put, prefix_end, version_is
from leveret.testing.etcd import EtcdServer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

OPS = ("put", "txn", "keepalive", "watch")
# Per operation: the round trips (seconds) and the CPU per operation.
Result = dict[str, tuple[list[float], float]]


async def _timed(n: int, op: Callable[[int], Awaitable[Any]]) -> tuple[list[float], float]:
    cpu = time.process_time()
    samples = []
    for i in range(n):
        started = time.perf_counter()
        await op(i)
        samples.append(time.perf_counter() - started)
    return samples, (time.process_time() - cpu) / n


async def gateway_round(url: str, n: int) -> Result:
    client = EtcdClient([url])
    out: dict[str, tuple[list[float], float]] = {}
    try:
        out["put"] = await _timed(n, lambda i: client.put(b"bench/gw/put", b"%d" % i))

        async def txn(i: int) -> None:
            key = b"bench/gw/txn/%d" % i
            await client.txn([version_is(key, 0)], [Put(key, b"x")])

        out["txn"] = await _timed(n, txn)
        lease, _ttl = await client.grant(30)
        out["keepalive"] = await _timed(n, lambda _i: client.keepalive(lease))
        await client.revoke(lease)
        prefix = b"bench/gw/watch/"
        seen: asyncio.Queue[int] = asyncio.Queue()

        async def watcher() -> None:
            async for batch in client.watch(prefix, prefix_end(prefix)):
                for _event in batch.events:
                    seen.put_nowait(1)

        task = asyncio.create_task(watcher())
        await asyncio.sleep(0.3)

        async def watched(i: int) -> None:
            await client.put(prefix + b"%d" % i, b"x")
            await seen.get()

        out["watch"] = await _timed(n, watched)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.delete(b"bench/gw/", prefix_end(b"bench/gw/"))
    finally:
        await client.close()
    return out


async def aetcd_round(url: str, n: int) -> Result:
    import aetcd  # type: ignore[import-not-found]  # optional: measured, not a dependency

    host, port = url.removeprefix("http://").rsplit(":", 1)
    out: dict[str, tuple[list[float], float]] = {}
    async with aetcd.Client(host=host, port=int(port)) as client:
        out["put"] = await _timed(n, lambda i: client.put(b"bench/ae/put", b"%d" % i))

        async def txn(i: int) -> None:
            key = b"bench/ae/txn/%d" % i
            t = client.transactions
            await client.transaction([t.version(key) == 0], [t.put(key, b"x")], [])

        out["txn"] = await _timed(n, txn)
        lease = await client.lease(30)
        out["keepalive"] = await _timed(n, lambda _i: client.refresh_lease(lease.id))
        await client.revoke_lease(lease.id)
        prefix = b"bench/ae/watch/"
        seen: asyncio.Queue[int] = asyncio.Queue()
        watch = await client.watch_prefix(prefix)

        async def watcher() -> None:
            async for _event in watch:
                seen.put_nowait(1)

        task = asyncio.create_task(watcher())
        await asyncio.sleep(0.3)

        async def watched(i: int) -> None:
            await client.put(prefix + b"%d" % i, b"x")
            await seen.get()

        out["watch"] = await _timed(n, watched)
        await watch.cancel()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.delete_prefix(b"bench/ae/")
    return out


def _have_aetcd() -> bool:
    try:
        import aetcd  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=300, help="operations of each kind a round")
    args = parser.parse_args(argv)
    clients: dict[str, Callable[[str, int], Coroutine[Any, Any, Result]]] = {
        "gateway": gateway_round
    }
    if _have_aetcd():
        clients["aetcd"] = aetcd_round
    else:
        print("aetcd is not installed: measuring the gateway client only")
    server = EtcdServer().start()
    medians: dict[tuple[str, str], list[float]] = {}
    p99s: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    try:
        for _round in range(args.rounds):
            for name, run in clients.items():
                result = asyncio.run(run(server.url, args.ops))
                for op, (samples, cpu) in result.items():
                    samples.sort()
                    medians.setdefault((name, op), []).append(statistics.median(samples))
                    p99s.setdefault((name, op), []).append(samples[int(len(samples) * 0.99)])
                    cpus.setdefault((name, op), []).append(cpu)
    finally:
        server.stop()
    print(f"{'client':<8} {'op':<10} {'median ms':>10} {'p99 ms':>8} {'CPU us/op':>10}")
    for name in clients:
        for op in OPS:
            key = (name, op)
            print(
                f"{name:<8} {op:<10} {statistics.median(medians[key]) * 1e3:>10.3f} "
                f"{statistics.median(p99s[key]) * 1e3:>8.3f} "
                f"{statistics.median(cpus[key]) * 1e6:>10.0f}"
            )


if __name__ == "__main__":
    main()
