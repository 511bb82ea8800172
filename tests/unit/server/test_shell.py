"""What the shell does on its own, beside the contract's checks
(``test_frontend_conformance.py``): its timers, the close time-out every front end gets,
and the internal-error path of the turn's end."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.model.completion import Completion
from leveret.server.amqpfast import FastConnection
from leveret.server.shell.shell import CLOSE_TIMEOUT, Shell
from leveret.testing import CodecClient
from leveret.testing.client import feed, new_shell
from leveret.testing.conformance import DRIVERS, Conversation

if TYPE_CHECKING:
    from collections.abc import Callable


def finished(shell: Shell) -> bool:
    # A call, not the property: the type checker would keep an earlier assert's answer.
    return shell.finished


def test_timers_fire_in_order_at_their_deadlines() -> None:
    shell = new_shell(FastConnection, now=10.0)
    fired: list[str] = []

    def note(name: str) -> Callable[[Completion[None]], None]:
        return lambda _done: fired.append(name)

    for delay, name in ((3.0, "c"), (1.0, "a"), (2.0, "b")):
        shell.after(delay).on_done(note(name))
    assert shell.next_deadline(10.0) == 11.0
    shell.tick(11.5)
    assert fired == ["a"]
    assert shell.next_deadline(11.5) == 12.0
    shell.tick(13.0)
    assert fired == ["a", "b", "c"]


def test_a_connection_closed_on_our_side_is_cut_after_the_close_timeout() -> None:
    """AMQP/Fast's machine waits for the client's CONNECTION CLOSE for ever: the shell's
    close time-out ends it anyway."""
    driver = next(d for d in DRIVERS if d.name == "fast")
    conv = Conversation(driver, driver.client("guest", "guest", "/"))
    conv.pump()
    assert conv.shell.opened
    conv.shell.close(320, "broker shutdown", conv.now)
    assert conv.shell.take_output(conv.now)  # CONNECTION CLOSE went out
    assert not finished(conv.shell)
    deadline = conv.shell.next_deadline(conv.now)
    assert deadline is not None
    assert deadline <= conv.now + CLOSE_TIMEOUT + 0.01
    conv.shell.tick(conv.now + CLOSE_TIMEOUT + 0.01)
    assert finished(conv.shell)


# A stand-in publisher: the compiled shell's types refuse one, so the pure pass only.
@pytest.mark.pure_only
def test_a_bug_at_the_turn_s_end_costs_only_the_connection() -> None:
    client = CodecClient.connect()
    client.handshake()
    client.open_channel(1)
    shell = client.shell

    class Broken:
        feeds_backlog = False
        wait = None

        def flush_confirms(self) -> None:
            raise RuntimeError("a bug of ours")

    shell.published_by(Broken())  # type: ignore[arg-type]
    feed(shell, b"", client.clock.now)  # a turn ends: its confirms are flushed
    assert shell.internal_errors == 1
    assert finished(shell)


def test_a_completion_reports_its_value_or_its_error() -> None:
    done: Completion[int] = Completion.of(7)
    assert done.done
    assert done.result() == 7
    failed: Completion[int] = Completion()
    seen: list[Completion[int]] = []
    failed.on_done(seen.append)
    failed.fail(ValueError("no"))
    failed.resolve(1)  # the first outcome stands
    assert seen == [failed]
    assert isinstance(failed.error, ValueError)
