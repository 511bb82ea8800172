"""Which build of Leveret is running: pure Python, or the optional compiled build of the
hot-path modules (mypyc, pyproject.toml ``[tool.leveret.compiled]``)."""

from __future__ import annotations

from importlib import import_module

# The modules the compiled build compiles (kept equal to pyproject.toml by a unit test).
HOT_PATH_MODULES = (
    "leveret.protocol.amqp091.framing",
    "leveret.server.amqp091",
    "leveret.server.amqp091_channel",
    "leveret.server.amqp091_message",
    "leveret.server.connection",
    "leveret.model.message",
    "leveret.model.paging",
    "leveret.model.queue",
    "leveret.model.queue_features",
    "leveret.model.session",
    "leveret.model.stream",
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
