"""Permission patterns: a user's configure/write/read regular expressions in one vhost, and
topic permissions (write/read patterns on routing keys, per exchange). Imported by
``auth.users`` (which keeps them) and ``auth.access`` (which checks them).

RabbitMQ's rules, kept exactly: a pattern matches anywhere in the name unless anchored
(``re.search``, as Erlang's ``re:run``); the empty pattern means ``^$`` (nothing but the
empty name); a user without permissions in a vhost may touch nothing there; a user without
topic permissions on an exchange may use every routing key. In topic patterns
``{username}`` and ``{vhost}`` are replaced by the user's and vhost's names, as they are
(not escaped), before matching. Patterns are Python regular expressions; RabbitMQ's are
PCRE, which agrees on everything but exotic syntax (docs/compatibility.md).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["configure", "write", "read"]
KINDS: tuple[Kind, ...] = ("configure", "write", "read")


class InvalidPattern(ValueError):
    """A permission pattern that is not a regular expression."""


def _effective(pattern: str) -> str:
    # RabbitMQ: the empty pattern grants nothing but the empty name.
    return pattern or "^$"


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except (re.error, OverflowError, RecursionError):
        return None


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled, or :class:`InvalidPattern` with RabbitMQ's wording."""
    compiled = _compiled(_effective(pattern))
    if compiled is None:
        raise InvalidPattern(f"regular expression '{pattern}' is invalid")
    return compiled


@dataclass(frozen=True)
class Permission:
    """What one user may do in one vhost."""

    configure: str
    write: str
    read: str
    _patterns: tuple[re.Pattern[str], ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        patterns = tuple(compile_pattern(p) for p in (self.configure, self.write, self.read))
        object.__setattr__(self, "_patterns", patterns)

    def allows(self, kind: Kind, name: str) -> bool:
        return self._patterns[KINDS.index(kind)].search(name) is not None


@dataclass(frozen=True)
class TopicPermission:
    """Which routing keys one user may publish with (write) and bind with (read) on one
    topic exchange of one vhost."""

    exchange: str
    write: str
    read: str

    def __post_init__(self) -> None:
        compile_pattern(self.write)
        compile_pattern(self.read)

    def allows(
        self, kind: Literal["write", "read"], routing_key: str, variables: Variables
    ) -> bool:
        pattern = _effective(self.write if kind == "write" else self.read)
        for name, value in variables:
            pattern = pattern.replace("{" + name + "}", value)
        compiled = _compiled(pattern)
        # A name that makes the expanded pattern invalid (a '(' in a user name) grants nothing.
        return compiled is not None and compiled.search(routing_key) is not None


Variables = tuple[tuple[str, str], ...]


def topic_variables(username: str, vhost: str) -> Variables:
    """The variables RabbitMQ expands in topic patterns for AMQP 0-9-1 connections."""
    return (("username", username), ("vhost", vhost))
