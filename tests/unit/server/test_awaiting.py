"""A model Completion awaited on the loop (``server/awaiting.py``): the value or the error it
ends with, whether it ends before or after the await."""

from __future__ import annotations

import asyncio

import pytest

from leveret.errors import NotFound
from leveret.model.completion import Completion
from leveret.server.awaiting import outcome, settled


def test_outcome_is_the_value_resolved_later() -> None:
    async def body() -> int:
        later: Completion[int] = Completion()
        asyncio.get_running_loop().call_soon(later.resolve, 7)
        return await outcome(later)

    assert asyncio.run(body()) == 7


def test_outcome_raises_the_error_and_settled_does_not() -> None:
    async def body() -> None:
        failed: Completion[int] = Completion()
        asyncio.get_running_loop().call_soon(failed.fail, NotFound("no queue 'q'"))
        await settled(failed)
        assert failed.error is not None
        with pytest.raises(NotFound):
            await outcome(failed)

    asyncio.run(body())


def test_a_completion_done_already_is_not_waited_for() -> None:
    async def body() -> str:
        return await asyncio.wait_for(outcome(Completion.of("ready")), timeout=1)

    assert asyncio.run(body()) == "ready"
