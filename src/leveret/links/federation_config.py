"""Federation's parameters and policy keys, checked and resolved as RabbitMQ 3.10's
``rabbit_federation_parameters`` and ``rabbit_federation_upstream`` do.

- ``federation-upstream`` (a vhost parameter): ``uri`` (one or a list) and the shared keys
  below; ``federation-upstream-set``: a list of ``{"upstream": name, ...}`` whose keys
  override the upstream's. The shared keys (defaults in brackets): ``exchange`` [the
  downstream exchange's name], ``queue`` [the downstream queue's], ``consumer-tag``
  [``federation-link-<upstream>``], ``prefetch-count`` [1000], ``reconnect-delay`` [5],
  ``max-hops`` [1], ``expires``, ``message-ttl``, ``trust-user-id`` [false], ``ack-mode``
  [on-confirm], ``resource-cleanup-mode`` [default], ``ha-policy``, ``bind-nowait``,
  ``channel-use-mode``.
- Policy keys: ``federation-upstream`` (one upstream), ``federation-upstream-set`` (a set,
  or ``all``: every upstream of the vhost), ``federation-upstream-pattern`` (upstreams whose
  name matches a regular expression).

:func:`upstreams_for` gives the :class:`Upstream` records an exchange or queue federates
from, in the set's order, skipping names that have no upstream parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leveret.links.uri import UriError, parse_amqp091
from leveret.links.validation import (
    Check,
    ValidationError,
    binary,
    boolean,
    enum,
    erl,
    number,
    proplist,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "POLICY_KEYS",
    "UPSTREAM",
    "UPSTREAM_SET",
    "Upstream",
    "federates",
    "upstreams_for",
    "validate_upstream",
    "validate_upstream_set",
]

UPSTREAM = "federation-upstream"
UPSTREAM_SET = "federation-upstream-set"
PATTERN = "federation-upstream-pattern"
POLICY_KEYS = (UPSTREAM, UPSTREAM_SET, PATTERN)

_SHARED: list[tuple[str, Check, bool]] = [
    ("exchange", binary, False),
    ("queue", binary, False),
    ("consumer-tag", binary, False),
    ("prefetch-count", number, False),
    ("reconnect-delay", number, False),
    ("max-hops", number, False),
    ("expires", number, False),
    ("message-ttl", number, False),
    ("trust-user-id", boolean, False),
    ("ack-mode", enum("no-ack", "on-publish", "on-confirm"), False),
    ("resource-cleanup-mode", enum("default", "never"), False),
    ("ha-policy", binary, False),
    ("bind-nowait", boolean, False),
    ("channel-use-mode", enum("multiple", "single"), False),
]


def _uri(name: str, value: object) -> str | None:
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not value:
        return f"{name} should be a list of URIs, actually was []"
    for uri in values:
        if not isinstance(uri, str):
            return f"{name} should be binary, actually was {erl(uri)}"
        try:
            parse_amqp091(uri)
        except UriError as exc:
            return str(exc)
    return None


def validate_upstream(value: object, name: str = UPSTREAM) -> None:
    if not isinstance(value, dict):
        raise ValidationError([f"{name} not a list {erl(value)}"])
    errors = proplist(name, [("uri", _uri, True), *_SHARED], value)
    if errors:
        raise ValidationError(errors)


def validate_upstream_set(value: object, name: str = UPSTREAM_SET) -> None:
    if not isinstance(value, list):
        raise ValidationError([f"{name} should be list, actually was {erl(value)}"])
    errors: list[str] = []
    for element in value:
        if not isinstance(element, dict):
            errors.append(f"{name} not a list {erl(element)}")
            continue
        errors += proplist(name, [("upstream", binary, True), *_SHARED], element)
    if errors:
        raise ValidationError(errors)


@dataclass(frozen=True)
class Upstream:
    """One upstream as a link to one exchange or queue uses it (RabbitMQ's ``#upstream``)."""

    name: str
    uris: tuple[str, ...]
    exchange: str
    queue: str
    consumer_tag: str
    prefetch: int = 1000
    reconnect_delay: float = 5.0
    max_hops: int = 1
    expires: int | None = None
    message_ttl: int | None = None
    trust_user_id: bool = False
    ack_mode: str = "on-confirm"
    ha_policy: str | None = None
    bind_nowait: bool = False
    resource_cleanup_mode: str = "default"


def _get(key: str, element: Mapping[str, Any], upstream: Mapping[str, Any], default: Any) -> Any:
    """RabbitMQ's ``bget``: the set element's value, else the upstream's, else the default."""
    value = element.get(key)
    if value is None:
        value = upstream.get(key)
    return default if value is None else value


def _upstream(
    name: str, element: Mapping[str, Any], upstream: Mapping[str, Any], resource: str
) -> Upstream:
    uri = _get("uri", element, upstream, [])
    return Upstream(
        name=name,
        uris=tuple(uri) if isinstance(uri, list) else (str(uri),),
        exchange=str(_get("exchange", element, upstream, resource)),
        queue=str(_get("queue", element, upstream, resource)),
        consumer_tag=str(_get("consumer-tag", element, upstream, f"federation-link-{name}")),
        prefetch=int(_get("prefetch-count", element, upstream, 1000)),
        reconnect_delay=float(_get("reconnect-delay", element, upstream, 5)),
        max_hops=int(_get("max-hops", element, upstream, 1)),
        expires=_get("expires", element, upstream, None),
        message_ttl=_get("message-ttl", element, upstream, None),
        trust_user_id=bool(_get("trust-user-id", element, upstream, False)),
        ack_mode=str(_get("ack-mode", element, upstream, "on-confirm")),
        ha_policy=_get("ha-policy", element, upstream, None),
        bind_nowait=bool(_get("bind-nowait", element, upstream, False)),
        resource_cleanup_mode=str(_get("resource-cleanup-mode", element, upstream, "default")),
    )


def federates(definition: Mapping[str, object]) -> bool:
    """Whether a policy definition asks for federation."""
    return any(key in definition for key in POLICY_KEYS)


def upstreams_for(
    definition: Mapping[str, object],
    vhost: str,
    resource: str,
    parameters: Mapping[tuple[str, str, str], Any],
) -> list[Upstream]:
    """The upstreams an exchange or queue called ``resource`` federates from under the
    policy ``definition`` (``parameters``: the runtime's, by (vhost, component, name))."""
    upstreams = {
        name: value
        for (v, component, name), value in parameters.items()
        if v == vhost and component == UPSTREAM and isinstance(value, dict)
    }
    elements: list[Mapping[str, Any]]
    if isinstance(definition.get(UPSTREAM), str):
        elements = [{"upstream": definition[UPSTREAM]}]
    elif isinstance(definition.get(UPSTREAM_SET), str):
        set_name = str(definition[UPSTREAM_SET])
        if set_name == "all":
            elements = [{"upstream": name} for name in sorted(upstreams)]
        else:
            value = parameters.get((vhost, UPSTREAM_SET, set_name))
            elements = [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []
    elif isinstance(definition.get(PATTERN), str):
        try:
            regex = re.compile(str(definition[PATTERN]))
        except re.error:
            return []
        elements = [{"upstream": name} for name in sorted(upstreams) if regex.search(name)]
    else:
        return []
    out = []
    for element in elements:
        name = element.get("upstream")
        if isinstance(name, str) and name in upstreams:
            out.append(_upstream(name, element, upstreams[name], resource))
    return out
