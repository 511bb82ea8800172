"""RabbitMQ's list query parameters: ``name`` + ``use_regex`` filtering, ``sort`` /
``sort_reverse`` (a dotted path, e.g. ``message_stats.publish``), ``page`` / ``page_size``
(the answer then becomes ``{items, page, page_count, page_size, filtered_count,
item_count, total_count}``) and ``columns`` (only these fields, dotted paths kept nested).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

MAX_PAGE_SIZE = 500


class BadQuery(ValueError):
    """A query parameter RabbitMQ would refuse with 400."""


def _get(item: Mapping[str, Any], path: str) -> Any:
    value: Any = item
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, str(value).lower())


def _columns(item: Mapping[str, Any], columns: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in columns:
        value = _get(item, column)
        if value is None and "." not in column and column not in item:
            continue
        parts = column.split(".")
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return out


def apply(
    items: list[dict[str, Any]],
    query: Mapping[str, str],
    render: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Any:
    """The list as the query asks for it (a page object when ``page`` is given).

    With ``render``, ``items`` are stubs holding ``name`` and ``vhost`` only, and each
    becomes its full object through ``render``: only the asked page is rendered when the
    sort key is one the stubs have (listing 1000 queues a page at a time then costs a
    page, not the whole list); otherwise every stub is rendered first."""
    if render is not None and query.get("sort", "name") not in ("name", "vhost"):
        items, render = [render(i) for i in items], None
    total = len(items)
    name = query.get("name")
    if name:
        if query.get("use_regex", "false").lower() == "true":
            try:
                pattern = re.compile(name)
            except re.error:
                raise BadQuery(f"invalid regular expression: {name}") from None
            items = [i for i in items if pattern.search(str(i.get("name", "")))]
        else:
            items = [i for i in items if name.lower() in str(i.get("name", "")).lower()]
    sort = query.get("sort")
    reverse = query.get("sort_reverse", "false").lower() == "true"
    if sort:
        items = sorted(items, key=lambda i: _sort_key(_get(i, sort)), reverse=reverse)
    elif reverse:
        items = list(reversed(items))
    columns = [c for c in query.get("columns", "").split(",") if c]
    if "page" not in query:
        if render is not None:
            items = [render(i) for i in items]
        return [_columns(i, columns) for i in items] if columns else items
    try:
        page = int(query["page"])
        page_size = int(query.get("page_size", "100"))
    except ValueError:
        raise BadQuery("page and page_size must be integers") from None
    if page < 1 or page_size < 1 or page_size > MAX_PAGE_SIZE:
        raise BadQuery(f"page must be >= 1 and page_size between 1 and {MAX_PAGE_SIZE}")
    filtered = len(items)
    page_count = max(1, -(-filtered // page_size))
    chunk = items[(page - 1) * page_size : page * page_size]
    if render is not None:
        chunk = [render(i) for i in chunk]
    if columns:
        chunk = [_columns(i, columns) for i in chunk]
    return {
        "filtered_count": filtered,
        "item_count": len(chunk),
        "items": chunk,
        "page": page,
        "page_count": page_count,
        "page_size": page_size,
        "total_count": total,
    }
