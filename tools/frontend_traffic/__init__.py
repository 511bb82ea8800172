"""Real clients' traffic, recorded, mutated and replayed against every front end: the
front-end mutation fuzzer (issue 23). Its oracle is the shell's: no internal error, ever
(``Shell.internal_errors``, and nothing raised out of the shell).

- ``record`` (``python -m tools.frontend_traffic record``): an embedded broker whose
  adapter notes every chunk each connection reads, and real clients run short scenarios
  against it: pika (0-9-1), Qpid Proton (1.0), qpid.messaging (0-10, Python 2), rstream
  (the stream protocol), and the project's own AMQP/Fast and 0-8/0-9 clients (no other
  exists). The chunks, as read, go to ``tests/data/frontend-traffic/<name>.json``.
- :func:`mutate`: a connection's bytes with one to four random changes (a bit flipped, a
  byte or a 32-bit size overwritten with an edge value, bytes inserted, deleted, duplicated
  elsewhere, the tail cut), cut into chunks at new places.
- :func:`replay_in_memory`: each mutated connection fed to a fresh shell and front end of
  a broker in memory (the front end chosen from the first bytes, as the listener does; the
  stream protocol's by its port), with time moving past the refusal delay and the handshake
  deadline, then the socket lost. Fast (thousands of connections a second): the test
  suite's short run (``tests/unit/server/test_frontend_fuzz.py``).
- :func:`replay_over_sockets`: the same against an embedded broker over real sockets and
  its asyncio adapter, with its log watched for internal errors: the longer run
  (``python -m tools.frontend_traffic fuzz --sockets``; docs/front-ends.md, "Fuzzing").
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leveret.convert.stream_records import RECORDS
from leveret.model.broker import Broker
from leveret.model.queues.stream_log import MemoryStreamBackend
from leveret.protocol.amqp091.connection import Limits
from leveret.server import frontend
from leveret.server.rabbitstream import StreamConnection, StreamServer
from leveret.testing.client import new_shell, run_turns

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from leveret.auth.users import UserStore
    from leveret.server.shell.shell import FrontEndFactory, Shell
    from leveret.testing.embedded import EmbeddedBroker

__all__ = [
    "CORPUS_DIR",
    "Corpus",
    "Finding",
    "declare_queues",
    "load_corpora",
    "mutate",
    "replay_in_memory",
    "replay_over_sockets",
]

ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = ROOT / "tests" / "data" / "frontend-traffic"
# Edge values written over 32-bit fields (frame sizes, lengths, counts).
_EDGES = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)
# Seconds after the last chunk at which a replayed connection's timers are run: past a
# refused login's delay, past the handshake deadline, past a close time-out.
_TICKS = (0.5, 3.5, 10.5, 16.0)


@dataclass
class Corpus:
    """One client's recorded connections: each a list of the chunks the broker read."""

    name: str  # e.g. "pika-0-9-1"
    protocol: str  # ConnectionInfo.protocol of the recorded connections
    client: str  # the client and version that made it
    stream: bool  # read on the stream protocol's port
    connections: list[list[bytes]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "client": self.client,
            "stream": self.stream,
            "connections": [[chunk.hex() for chunk in conn] for conn in self.connections],
        }

    @classmethod
    def from_json(cls, name: str, doc: dict[str, Any]) -> Corpus:
        return cls(
            name,
            doc["protocol"],
            doc["client"],
            bool(doc["stream"]),
            [[bytes.fromhex(chunk) for chunk in conn] for conn in doc["connections"]],
        )

    def save(self, directory: Path = CORPUS_DIR) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.json"
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        return path


def load_corpora(directory: Path = CORPUS_DIR) -> list[Corpus]:
    return [
        Corpus.from_json(path.stem, json.loads(path.read_text(encoding="utf-8")))
        for path in sorted(directory.glob("*.json"))
    ]


# -- mutation -------------------------------------------------------------------------------


def mutate(chunks: list[bytes], rng: random.Random) -> list[bytes]:
    """``chunks`` joined, changed one to four times, and cut into chunks again (at the
    recorded boundaries or at new ones)."""
    data = bytearray(b"".join(chunks))
    for _ in range(rng.randint(1, 4)):
        if not data:
            data += rng.randbytes(rng.randint(1, 16))
            continue
        at = rng.randrange(len(data))
        kind = rng.randrange(7)
        if kind == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            data[at] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif kind == 2:
            value = rng.choice(_EDGES)
            data[at : at + 4] = value.to_bytes(4, "big")
        elif kind == 3:
            data[at:at] = rng.randbytes(rng.randint(1, 16))
        elif kind == 4:
            del data[at : at + rng.randint(1, 32)]
        elif kind == 5:
            piece = bytes(data[at : at + rng.randint(1, 64)])
            where = rng.randrange(len(data) + 1)
            data[where:where] = piece
        else:
            del data[at:]
    if rng.random() < 0.5 and len(chunks) > 1:
        # The recorded boundaries, as far as they still fit.
        sizes = [len(chunk) for chunk in chunks]
    else:
        sizes = [rng.randint(1, 512) for _ in range(rng.randint(1, 12))]
    out: list[bytes] = []
    pos = 0
    for size in sizes:
        if pos >= len(data):
            break
        out.append(bytes(data[pos : pos + size]))
        pos += size
    if pos < len(data):
        out.append(bytes(data[pos:]))
    return out


# -- replay in memory -----------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """A replayed connection that made the broker fail: what to feed to see it again."""

    corpus: str
    seed: int
    chunks: tuple[bytes, ...]
    what: str


def _broker() -> Broker:
    broker = Broker()
    broker.attach_streams(MemoryStreamBackend(RECORDS))
    vhost = broker.vhosts["/"]
    for name in ("q", "fuzz"):
        vhost.declare_queue(name, owner=None)
    return broker


def _factory(corpus: Corpus, head: bytes, broker: Broker, users: UserStore) -> FrontEndFactory:
    if corpus.stream:
        server = StreamServer(broker, users)
        return lambda shell: StreamConnection(server, shell)
    factory = frontend.choose(head) if head else None
    return factory if factory is not None else frontend.DEFAULT_FRONT_END


def replay_one(corpus: Corpus, chunks: list[bytes], broker: Broker) -> Shell:
    """Feed ``chunks`` to a fresh shell of ``broker`` (raises what the shell let out)."""
    from leveret.auth.users import UserStore

    users = UserStore.with_default_user()
    now = 1000.0
    shell = new_shell(None, broker, users, peer="127.0.0.1:1", limits=Limits(), now=now)
    head = b""
    for chunk in chunks:
        now += 0.001
        if shell.front is None:
            head += chunk
            factory = None
            if corpus.stream:
                factory = _factory(corpus, head, broker, users)
            else:
                factory = frontend.choose(head)
            if factory is None:
                continue
            shell.attach(factory)
            chunk, head = head, b""
        if shell.finished:
            break
        shell.data_received(chunk, now)
        run_turns(shell, now)
        shell.take_output(now)
    base = now
    for delay in _TICKS:
        now = base + delay
        shell.tick(now)
        run_turns(shell, now)
        shell.take_output(now)
    shell.connection_lost()
    return shell


def replay_in_memory(
    corpora: Iterable[Corpus], *, per_corpus: int, seed: int = 0
) -> Iterator[Finding]:
    """``per_corpus`` mutated connections of each corpus, each in a fresh shell; yields a
    ``Finding`` for every one that raised or counted an internal error."""
    root_logger = logging.getLogger("leveret")
    for corpus in corpora:
        broker = _broker()
        for n in range(per_corpus):
            case_seed = seed * 1_000_003 + n
            rng = random.Random(f"{corpus.name}:{case_seed}")
            original = corpus.connections[n % len(corpus.connections)]
            chunks = mutate(original, rng)
            previous = root_logger.disabled
            root_logger.disabled = True  # refusals and closes are logged by the thousand
            try:
                shell = replay_one(corpus, chunks, broker)
                what = f"{shell.internal_errors} internal error(s)" if shell.internal_errors else ""
            except Exception as exc:
                what = f"raised {exc!r}"
            finally:
                root_logger.disabled = previous
            if what:
                yield Finding(corpus.name, case_seed, tuple(chunks), what)


def declare_queues(broker: EmbeddedBroker) -> None:
    """The queues the recorded scenarios address without declaring them."""

    def declare() -> None:
        vhost = broker.server.broker.vhosts["/"]
        for name in ("q", "fuzz"):
            vhost.declare_queue(name, owner=None)

    broker.call(declare)


def replay_over_sockets(
    corpora: Iterable[Corpus], *, per_corpus: int, seed: int = 0, pause: float = 0.0
) -> tuple[int, list[str]]:
    """The mutated connections over real sockets to an embedded broker (its adapter, its
    loop); returns (connections made, the internal errors the broker logged)."""
    import socket
    import time

    from leveret.testing.embedded import EmbeddedBroker

    errors: list[str] = []

    class _Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "internal error" in record.getMessage():
                errors.append(f"{record.getMessage()}\n{record.exc_text or ''}")

    watch = _Watch(logging.ERROR)
    logger = logging.getLogger("leveret")
    logger.addHandler(watch)
    made = 0
    try:
        with EmbeddedBroker() as broker:
            declare_queues(broker)
            for corpus in corpora:
                port = broker.stream_port if corpus.stream else broker.port
                for n in range(per_corpus):
                    rng = random.Random(f"{corpus.name}:{seed * 1_000_003 + n}")
                    chunks = mutate(corpus.connections[n % len(corpus.connections)], rng)
                    made += 1
                    with socket.create_connection((broker.host, port), timeout=2) as sock:
                        sock.settimeout(0.05)
                        try:
                            for chunk in chunks:
                                sock.sendall(chunk)
                                if pause:
                                    time.sleep(pause)
                            sock.recv(1 << 16)
                        except OSError:
                            pass
            broker.advance(20)  # every refusal answered, every handshake deadline passed
    finally:
        logger.removeHandler(watch)
    return made, errors
