"""``Completion`` (model/completion.py): callbacks run once, in order, when it is done."""

from __future__ import annotations

import pytest

from leveret.model.completion import Completion, NotDone, every


def test_callbacks_run_once_in_order_when_resolved() -> None:
    done: Completion[int] = Completion()
    seen: list[tuple[str, int]] = []
    done.on_done(lambda c: seen.append(("first", c.result())))
    done.on_done(lambda c: seen.append(("second", c.result())))
    with pytest.raises(NotDone):
        done.result()
    done.resolve(7)
    done.resolve(8)  # a second outcome is ignored, the callbacks do not run again
    done.fail(ValueError("late"))
    assert seen == [("first", 7), ("second", 7)]
    assert done.result() == 7


def test_a_callback_added_once_done_or_while_running_runs_at_once() -> None:
    done: Completion[None] = Completion()
    seen: list[str] = []

    def first(c: Completion[None]) -> None:
        seen.append("first")
        c.on_done(lambda _c: seen.append("added while running"))

    done.on_done(first)
    done.resolve(None)
    done.on_done(lambda _c: seen.append("after"))
    assert seen == ["first", "added while running", "after"]


def test_resolved_without_callbacks_and_failed() -> None:
    quiet: Completion[bool] = Completion()
    quiet.resolve(True)  # nobody waited: nothing to run
    assert quiet.done
    assert quiet.result() is True
    failed: Completion[bool] = Completion()
    errors: list[BaseException | None] = []
    failed.on_done(lambda c: errors.append(c.error))
    failed.fail(ConnectionError("gone"))
    assert isinstance(errors[0], ConnectionError)
    with pytest.raises(ConnectionError):
        failed.result()


def test_every_waits_for_each_and_fails_with_the_first_error_in_order() -> None:
    assert every([None, None]) is None
    first: Completion[int] = Completion()
    second: Completion[str] = Completion()
    joined = every([first, None, second])
    assert joined is not None
    second.fail(KeyError("second"))
    assert not joined.done
    first.fail(ValueError("first"))
    assert isinstance(joined.error, ValueError)
    both = every([Completion.of(1), Completion.of("x")])
    assert both is not None
    assert both.result() is None
