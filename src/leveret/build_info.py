"""Which build of Leveret is running: the compiled build of the hot-path modules (mypyc,
what ``pip install .`` builds where a C compiler and the Python headers are present), or
pure Python (``LEVERET_PURE=1 pip install .``, an install without a compiler, the source)."""

from __future__ import annotations

from importlib import import_module

# The modules the compiled build compiles: the one list (the build, tools/backend and the
# tests read it). A module that subclasses a compiled class must be compiled too.
HOT_PATH_MODULES: tuple[str, ...] = (
    "leveret.protocol.amqp091.framing",
    "leveret.protocol.amqp091.channel",
    "leveret.protocol.amqp091.connection",
    "leveret.server.amqp091.connection",
    "leveret.server.amqp091.channel",
    "leveret.server.amqp091.session",
    # Message conversion (leveret/convert/): the 0-9-1 and 1.0 forms every publish and
    # delivery reads; the 0-9-1 <-> 1.0 table (every crossing delivery: a 0-9-1 reader of a
    # stream-protocol publish converts each message) and its direct encoder (1.0 consumers
    # of 0-9-1 messages, 0-9-1 appends to streams); a stream's readers (chunks decoded in
    # one pass, the stream headers stamped). Measured: bench/convert_path.py,
    # docs/benchmarks.md "Message conversion".
    "leveret.convert.amqp091",
    "leveret.convert.amqp10",
    "leveret.convert.stream_reads",
    "leveret.convert.amqp10_sections",
    "leveret.convert.stream_stamp",
    "leveret.convert.amqp10_amqp091",
    # A 0-9-1 append's stream record head, from the property bytes (the Spark sink's rows).
    "leveret.convert.stream_head",
    # What the router and a stream read of a 0-9-1 publish's headers, from the bytes.
    "leveret.convert.amqp091_headers",
    # Subclasses ConsumerOwner and Browser (model/consumer.py), which are compiled.
    "leveret.server.amqp010.session",
    # The AMQP 1.0 machine's per-transfer path, and the link that subclasses ConsumerOwner.
    "leveret.protocol.amqp10.transfer",
    "leveret.protocol.amqp10.framing",
    "leveret.protocol.amqp10.connection",
    "leveret.protocol.amqp10.session",
    "leveret.server.amqp10.links",
    # What the links ask of their session and the session of its connection: the bases of
    # Session and AMQP10Connection (an interpreted class cannot be a compiled one's base).
    "leveret.server.amqp10.session_core",
    # The 1.0 front end's per-message glue: the connection's event dispatch, the session's
    # dispositions (measured: bench.amqp10_path, docs/benchmarks.md).
    "leveret.server.amqp10.connection",
    "leveret.server.amqp10.session",
    # The stream protocol's per-message decode loop (the rest of a publish is per frame).
    "leveret.protocol.rabbitstream._publish",
    "leveret.server.connection",
    "leveret.server.shell.shell",
    "leveret.protocol.output",
    "leveret.server.guard",
    # Asked after every read that published (a burst of lone publishes on 1000 sockets
    # pays it per message: issue 26); the adapter above calls it natively once compiled.
    "leveret.server.memory_alarm",
    # Counts every read (``waiting_writes.read``), the same way.
    "leveret.server.waiting_writes",
    # Not on the per-message path of 0-9-1: compiled because they subclass the 0-9-1 front
    # end's connection and channel (an interpreted class cannot subclass a compiled one).
    "leveret.server.legacy.connection_base",
    "leveret.server.legacy.connection",
    "leveret.server.legacy.channel",
    "leveret.model.message",
    "leveret.model.entry",
    "leveret.model.memory_gauge",
    "leveret.model.consumer",
    "leveret.model.paging",
    # The queue-type interface and its types: each subclasses Queue (queues/base.py), and a
    # compiled class's subclass must be compiled too.
    "leveret.model.queues.base",
    "leveret.model.queues.priority",
    "leveret.model.queues.features",
    "leveret.model.queues.fifo",
    "leveret.model.queues.keyed",
    "leveret.model.message_groups",
    "leveret.model.last_value",
    "leveret.model.queues.classic",
    "leveret.model.queues.quorum",
    "leveret.model.queues.stream_log",
    "leveret.model.queues.stream",
    # A delayed exchange's store is handed messages as a queue is.
    "leveret.model.queues.delayed",
    # A queue led by another node of a cluster (its proxy, a Queue subclass).
    "leveret.model.queues.remote",
    # The inter-node link's per-message code (a publish forwarded, its delivery back): the
    # frame codec, the leader's side of the link and the dialling side (its peers: the
    # proxies' publishes, the deliveries handed to local consumers, the batched writes;
    # measured: bench.cluster_scenarios, docs/benchmarks.md "The cluster (issue 24)").
    "leveret.protocol.cluster.codec",
    "leveret.server.cluster_link.frontend",
    "leveret.cluster.link",
    "leveret.model.router",
    # Read and counted by every publish (its counters, flags and type name): native
    # attributes once compiled, where an interpreted Exchange's were generic lookups.
    "leveret.model.exchange",
    "leveret.model.publisher",
    # What a publish forwarded with a confirm waits on (one a message: made, awaited by
    # the publisher's confirm, resolved by the leader's Confirm).
    "leveret.model.completion",
    "leveret.model.confirms",
    "leveret.model.settle",
    # The message store's journal: a persistent message's record, its first delivery and
    # its removal, each a call from the compiled queue on the loop thread (1.3-2.0 µs a
    # 1 KiB message interpreted; docs/benchmarks.md, "c's store compiled").
    "leveret.store.disk",
)


def compiled_modules() -> list[str]:
    """The hot-path modules that were loaded from a compiled extension."""
    compiled = []
    for name in HOT_PATH_MODULES:
        module = import_module(name)
        if not str(getattr(module, "__file__", "")).endswith(".py"):
            compiled.append(name)
    return compiled


def describe() -> str:
    """One line for the log: ``pure Python`` or ``compiled (mypyc): N of M modules``."""
    compiled = compiled_modules()
    if not compiled:
        return "pure Python"
    return f"compiled (mypyc): {len(compiled)} of {len(HOT_PATH_MODULES)} hot-path modules"


def other_build() -> str:
    """How to get the build that is not running (the start-up line says it beside
    ``describe()``)."""
    if compiled_modules():
        return "LEVERET_PURE=1 pip install . for the pure-Python build"
    return (
        "the compiled build, about twice as fast, is what pip install . builds where a C "
        "compiler and the Python headers are present (e.g. apt install gcc python3-dev)"
    )
