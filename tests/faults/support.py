"""Helpers of the fault harness's tests."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine


def on_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """A coroutine test run on an event loop of its own (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run
