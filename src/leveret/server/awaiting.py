"""A model ``Completion`` awaited on the event loop: for the server's own coroutines (the
CLI's verbs, the cluster's declarations) that wait for what the core completes later.

The core's ``Completion`` (``model/completion.py``) knows no loop; a front end hands one to
its shell, and a coroutine awaits one through these.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from leveret.model.completion import Completion

T = TypeVar("T")


async def settled(completion: Completion[Any]) -> None:
    """Until ``completion`` is done, either way."""
    if completion.done:
        return
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(_completion: Completion[Any]) -> None:
        if not future.done():
            future.set_result(None)

    completion.on_done(done)
    await future


async def outcome(completion: Completion[T]) -> T:
    """What ``completion`` ended with, once it did; raises its error."""
    await settled(completion)
    return completion.result()
