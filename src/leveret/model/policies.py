"""Policies and operator policies: which one applies to a queue or an exchange, and the
effective queue configuration that arguments, policy and operator policy give together.

RabbitMQ 3.10's rules, which this module follows:

- A policy matches an entity of its vhost when its ``pattern`` (a regular expression,
  searched, not anchored) matches the name and ``apply-to`` allows the kind (``all``,
  ``queues``, ``exchanges``). Of the matching policies the highest ``priority`` wins; only
  one policy applies (definitions are not merged). The same holds for operator policies,
  which apply to queues only and accept only the numeric limits of ``OPERATOR_KEYS``.
- Policy and operator policy together (``rabbit_policy:merge_policy_value``): for a key of
  both, the smaller value counts; a key of one of them counts as it is.
- Arguments and policies (``rabbit_amqqueue_process`` ``args_policy``): for ``expires``,
  ``message-ttl``, ``max-length``, ``max-length-bytes`` and ``delivery-limit`` the smaller of
  argument and policy counts; for the others the queue's argument wins over the policy.
- A key the queue's type does not take is ignored (a ``message-ttl`` policy does not
  touch a stream).

Pure and synchronous like the rest of ``model/``; ``VirtualHost`` keeps the policies of
its vhost and applies them live (``VirtualHost.apply_policies``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

APPLY_TO = ("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams")
# Keys whose smaller value wins (between argument, policy and operator policy).
MIN_KEYS = frozenset(("expires", "message-ttl", "max-length", "max-length-bytes", "delivery-limit"))
OPERATOR_KEYS = frozenset(
    (
        "expires",
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "max-in-memory-length",
        "max-in-memory-bytes",
        "delivery-limit",
    )
)
EXCHANGE_KEYS = frozenset(("alternate-exchange",))

_NON_NEGATIVE = frozenset(
    (
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "delivery-limit",
        "stream-max-segment-size-bytes",
        "max-in-memory-length",
        "max-in-memory-bytes",
    )
)
_POSITIVE = frozenset(("expires", "min-in-sync"))
_STRINGS = frozenset(
    (
        "dead-letter-exchange",
        "dead-letter-routing-key",
        "alternate-exchange",
        "max-age",
        "ha-mode",
        "ha-sync-mode",
        "queue-master-locator",
        "queue-leader-locator",
        "federation-upstream",
        "federation-upstream-set",
        "federation-upstream-pattern",
    )
)
# Federation's policy keys: at most one of them in a definition (RabbitMQ's rule).
_FEDERATION = ("federation-upstream", "federation-upstream-set", "federation-upstream-pattern")
_CHOICES: dict[str, tuple[object, ...]] = {
    "overflow": ("drop-head", "reject-publish", "reject-publish-dlx"),
    "queue-mode": ("default", "lazy"),
    "queue-version": (1, 2),
    "dead-letter-strategy": ("at-most-once", "at-least-once"),
}


# apply-to values that name one queue type (RabbitMQ 3.12's; accepted here already).
_TYPE_OF = {"classic_queues": "classic", "quorum_queues": "quorum", "streams": "stream"}


class PolicyError(ValueError):
    """A policy that cannot be set; the text is RabbitMQ's validation message."""


@dataclass(frozen=True)
class Policy:
    """One policy (or operator policy) of a vhost."""

    vhost: str
    name: str
    pattern: str
    definition: Mapping[str, object]
    priority: int = 0
    apply_to: str = "all"
    regex: re.Pattern[str] = field(compare=False, repr=False, default=re.compile(""))

    def matches(self, name: str, kind: str, queue_type: str = "classic") -> bool:
        """Whether the policy applies to the ``kind`` (queue or exchange) called ``name``."""
        apply_to = self.apply_to
        if kind == "exchange":
            if apply_to not in ("all", "exchanges"):
                return False
        elif apply_to == "exchanges" or _TYPE_OF.get(apply_to, queue_type) != queue_type:
            return False
        return self.regex.search(name) is not None

    def to_json(self) -> dict[str, object]:
        """RabbitMQ's shape of a policy in the HTTP API and in definitions."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(self.definition),
            "priority": self.priority,
        }


def _check_value(key: str, value: object) -> None:
    if key in _NON_NEGATIVE or key in _POSITIVE:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PolicyError(f"{key} value must be an integer, got {value!r}")
        if value < (1 if key in _POSITIVE else 0):
            raise PolicyError(f"{key} value must be {'positive' if key in _POSITIVE else '>= 0'}")
    elif key in _STRINGS:
        if not isinstance(value, str):
            raise PolicyError(f"{key} value must be a string, got {value!r}")
    elif key in _CHOICES and value not in _CHOICES[key]:
        raise PolicyError(f"{key} value {value!r} is not one of {_CHOICES[key]}")


def make_policy(
    vhost: str,
    name: str,
    pattern: object,
    definition: object,
    priority: object = 0,
    apply_to: object = "all",
    *,
    operator: bool = False,
) -> Policy:
    """A validated policy; ``PolicyError`` with a reason otherwise."""
    if not name:
        raise PolicyError("policy name must not be empty")
    if not isinstance(pattern, str):
        raise PolicyError("pattern must be a string")
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise PolicyError(f'<<"{pattern}">> is not a valid regular expression: {exc}') from None
    if isinstance(priority, str) and priority.lstrip("-").isdigit():
        priority = int(priority)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise PolicyError("priority must be an integer")
    if apply_to is None:
        apply_to = "all"
    if apply_to not in APPLY_TO:
        raise PolicyError(f"apply-to '{apply_to}' must be one of {', '.join(APPLY_TO)}")
    if not isinstance(definition, dict) or not definition:
        raise PolicyError("definition must be a non-empty JSON object")
    for key, value in definition.items():
        if not isinstance(key, str):
            raise PolicyError("definition keys must be strings")
        if operator and key not in OPERATOR_KEYS:
            raise PolicyError(f"{key} is not an operator policy key")
        _check_value(key, value)
    if sum(key in definition for key in _FEDERATION) > 1:
        raise PolicyError(
            "cannot specify federation-upstream, federation-upstream-set "
            "or federation-upstream-pattern together"
        )
    pattern_value = definition.get("federation-upstream-pattern")
    if isinstance(pattern_value, str):
        try:
            re.compile(pattern_value)
        except re.error as exc:
            raise PolicyError(
                f"could not compile pattern {pattern_value} to a regular expression. Error: {exc}"
            ) from None
    if "dead-letter-routing-key" in definition and "dead-letter-exchange" not in definition:
        raise PolicyError("dead-letter-routing-key requires dead-letter-exchange")
    return Policy(
        vhost,
        name,
        pattern,
        dict(definition),
        priority,
        str(apply_to),
        regex,
    )


def select(
    policies: Iterable[Policy], name: str, kind: str, queue_type: str = "classic"
) -> Policy | None:
    """The policy that applies to ``name``: the highest priority of those that match
    (ties go to the name that sorts first, so the choice does not depend on order)."""
    best: Policy | None = None
    for policy in policies:
        if not policy.matches(name, kind, queue_type):
            continue
        if (
            best is None
            or policy.priority > best.priority
            or (policy.priority == best.priority and policy.name < best.name)
        ):
            best = policy
    return best


def effective_definition(policy: Policy | None, operator: Policy | None) -> dict[str, object]:
    """What policy and operator policy say together (``effective_policy_definition``)."""
    merged: dict[str, object] = dict(policy.definition) if policy is not None else {}
    if operator is not None:
        for key, value in operator.definition.items():
            mine = merged.get(key)
            if (
                key in merged
                and isinstance(mine, int)
                and isinstance(value, int)
                and key in OPERATOR_KEYS
            ):
                merged[key] = min(mine, value)
            else:
                merged[key] = value
    return merged


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def effective_queue_arguments(
    arguments: Mapping[str, object] | None,
    definition: Mapping[str, object],
    keys: Iterable[str],
) -> dict[str, object]:
    """The queue's arguments with the effective policy definition merged in by RabbitMQ's
    precedence (see the module docstring); of the definition, only ``keys`` (what the
    queue's type takes: ``QueueType.policy_keys``) count."""
    merged: dict[str, object] = dict(arguments or {})
    for key in keys:
        if key not in definition:
            continue
        value = definition[key]
        arg = "x-" + key
        if arg not in merged:
            merged[arg] = value
        elif key in MIN_KEYS:
            mine, theirs = _as_int(merged[arg]), _as_int(value)
            if mine is not None and theirs is not None:
                merged[arg] = min(mine, theirs)
    if "x-dead-letter-routing-key" in merged and "x-dead-letter-exchange" not in merged:
        del merged["x-dead-letter-routing-key"]
    return merged


def exchange_alternate(
    arguments: Mapping[str, object], definition: Mapping[str, object]
) -> str | None:
    """The alternate exchange: the argument's, else the policy's."""
    value = arguments.get("alternate-exchange", definition.get("alternate-exchange"))
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value if isinstance(value, str) else None
