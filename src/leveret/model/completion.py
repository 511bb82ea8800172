"""A result that arrives later: ``Completion``, the sans-IO promise the core and the front
ends hand each other when an operation cannot finish in the call that starts it.

Without I/O, a loop or a clock: whoever learns the outcome calls :meth:`Completion.resolve`
(or :meth:`Completion.fail`), and the callbacks added with :meth:`Completion.on_done` run
then, in order, at once. A callback added to a completion that is already done runs at once
too. Examples of what completes later: a refused login's answer after its delay (a timer of
the connection's shell, ``server/shell/``), a queue declaration written to the cluster's
metadata store before declare-ok, a ``basic.get`` on a queue led by another node.

A front end that must wait for one hands it to its shell (``Shell.defer``): that connection's
or channel's further input waits until it is done, and the reply is sent then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["Completion", "NotDone", "every"]

T = TypeVar("T")


class NotDone(Exception):
    """:meth:`Completion.result` before the completion is done."""


class Completion(Generic[T]):
    """One operation's outcome: a value, or the error that failed it."""

    __slots__ = ("_callbacks", "_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        # Made by the first ``on_done``: most completions (a forwarded publish's confirm)
        # are resolved with no callback, or one, and a list each was two allocations.
        self._callbacks: list[Callable[[Completion[T]], None]] | None = None

    @classmethod
    def of(cls, value: T) -> Completion[T]:
        """A completion done already with ``value`` (an operation that finished at once)."""
        done: Completion[T] = cls()
        done.resolve(value)
        return done

    @property
    def done(self) -> bool:
        return self._done

    @property
    def error(self) -> BaseException | None:
        """The error that failed it (None while pending or when it succeeded)."""
        return self._error

    def result(self) -> T:
        """The value; raises the error that failed it, or ``NotDone`` while pending."""
        if not self._done:
            raise NotDone("the completion is still pending")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def resolve(self, value: T) -> None:
        """Done with ``value``; a second outcome is ignored (the first one stands)."""
        if self._done:
            return
        self._done, self._value = True, value
        self._run()

    def fail(self, error: BaseException) -> None:
        """Done with ``error`` (``result`` raises it); ignored once done."""
        if self._done:
            return
        self._done, self._error = True, error
        self._run()

    def on_done(self, callback: Callable[[Completion[T]], None]) -> None:
        """Call ``callback(self)`` once done (at once when it is done already)."""
        if self._done:
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def _run(self) -> None:
        callbacks = self._callbacks
        if callbacks is None:
            return
        self._callbacks = None
        for callback in callbacks:
            callback(self)

    def __repr__(self) -> str:
        if not self._done:
            return "Completion(pending)"
        if self._error is not None:
            return f"Completion(failed: {self._error!r})"
        return f"Completion({self._value!r})"


def every(completions: Iterable[Completion[Any] | None]) -> Completion[None] | None:
    """Done once each of ``completions`` is (failed with the first error, in their
    order, when one fails); None when there is none to wait for (each None: nothing to
    wait for)."""
    pending = [done for done in completions if done is not None]
    if not pending:
        return None
    joined: Completion[None] = Completion()
    left = [len(pending)]

    def settled(_done: Completion[Any]) -> None:
        left[0] -= 1
        if left[0]:
            return
        for done in pending:
            if done.error is not None:
                joined.fail(done.error)
                return
        joined.resolve(None)

    for done in pending:
        done.on_done(settled)
    return joined
