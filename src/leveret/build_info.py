"""Which build of Leveret is running: pure Python, or the optional compiled build of the
hot-path modules (mypyc, pyproject.toml ``[tool.leveret.compiled]``)."""

from __future__ import annotations

from importlib import import_module

# The modules the compiled build compiles (kept equal to pyproject.toml by a unit test).
HOT_PATH_MODULES = (
    "leveret.protocol.amqp091.framing",
    "leveret.protocol.amqp091.channel",
    "leveret.protocol.amqp091.connection",
    "leveret.server.amqp091.connection",
    "leveret.server.amqp091.channel",
    "leveret.server.amqp091.session",
    "leveret.server.amqp091.message",
    "leveret.server.stream_reads",
    "leveret.server.stream_sections",
    "leveret.server.amqp091.stream_headers",
    "leveret.server.amqp010.session",
    "leveret.protocol.amqp10.transfer",
    "leveret.protocol.amqp10.framing",
    "leveret.protocol.amqp10.connection",
    "leveret.protocol.amqp10.session",
    "leveret.server.amqp10.links",
    "leveret.server.amqp10.session_core",
    "leveret.server.amqp10.connection",
    "leveret.server.amqp10.session",
    "leveret.server.amqp10.message",
    "leveret.protocol.rabbitstream._publish",
    "leveret.server.connection",
    "leveret.server.shell.shell",
    "leveret.protocol.output",
    "leveret.server.guard",
    "leveret.server.legacy.connection_base",
    "leveret.server.legacy.connection",
    "leveret.server.legacy.channel",
    "leveret.model.message",
    "leveret.model.entry",
    "leveret.model.memory_gauge",
    "leveret.model.consumer",
    "leveret.model.paging",
    "leveret.model.queue",
    "leveret.model.queue_features",
    "leveret.model.stream",
    "leveret.model.delayed",
    "leveret.model.router",
    "leveret.model.publisher",
    "leveret.model.confirms",
    "leveret.model.settle",
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
