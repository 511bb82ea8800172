"""Local transactions, in the core's words: work held until commit, dropped on rollback.

A ``Transaction`` holds publishes (routed only at commit, in order) and settlements
(applied at commit, after the publishes: accepts, then releases, then rejects, as RabbitMQ
applies a 0-9-1 transaction). The front end keeps its own view of what a settlement undoes
on rollback (0-9-1 puts the deliveries back among the unacked ones), so a settlement carries
an opaque ``token`` that rollback hands back. Commit's ``done(ok)`` runs once what the
transaction stored is on disk (at once when it stored nothing), ``ok`` False when the store
could not write it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.completion import Completion
    from leveret.model.journal import Journal
    from leveret.model.message import Message
    from leveret.model.settle import Delivery

__all__ = ["ACCEPT", "REJECT", "RELEASE", "Transaction"]

ACCEPT = "accept"
RELEASE = "release"
REJECT = "reject"

# exchange, routing key, message, report_unroutable, require_consumer
HeldPublish = tuple[str, str, "Message", bool, bool]


class Transaction:
    """Work of one transactional channel or link, held until commit."""

    def __init__(self) -> None:
        self.publishes: list[HeldPublish] = []
        self.settlements: list[tuple[str, Delivery, object]] = []

    def settle(self, outcome: str, delivery: Delivery, token: object) -> None:
        self.settlements.append((outcome, delivery, token))

    def commit(
        self,
        route: Callable[[str, str, Message, bool, bool], object],
        apply: Callable[[str, list[tuple[Delivery, object]]], None],
        journal: Journal,
        done: Callable[[bool], None],
        remote: Callable[[], Completion[bool] | None] | None = None,
    ) -> None:
        """Route the held publishes with ``route``, then hand the settlements to ``apply``
        grouped by outcome; ``done`` as the module docstring says, and (``remote``: the
        publisher's ``take_remote``) once the leaders of the queues led by other nodes that
        the publishes went to confirmed them (False if one did not)."""
        publishes, self.publishes = self.publishes, []
        settlements, self.settlements = self.settlements, []
        for publish in publishes:
            route(*publish)
        for outcome in (ACCEPT, RELEASE, REJECT):
            group = [(d, t) for o, d, t in settlements if o == outcome]
            if group:
                apply(outcome, group)
        waiting = remote() if remote is not None else None
        finish = done if waiting is None else _after(waiting, done)
        if publishes or settlements:
            journal.after_commit(lambda: finish(journal.ok))
        else:
            finish(True)

    def rollback(self) -> list[tuple[Delivery, object]]:
        """Drop the held publishes; the held settlements come back (delivery, token)."""
        self.publishes = []
        settlements, self.settlements = self.settlements, []
        return [(d, t) for _o, d, t in settlements]


def _after(waiting: Completion[bool], done: Callable[[bool], None]) -> Callable[[bool], None]:
    """``done``, called once ``waiting`` is done too, False unless both succeeded."""

    def finish(ok: bool) -> None:
        waiting.on_done(lambda answer: done(ok and answer.error is None and bool(answer.result())))

    return finish
