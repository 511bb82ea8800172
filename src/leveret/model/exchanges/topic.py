"""The topic exchange type: dotted routing keys matched against ``*`` / ``#`` patterns.

Semantics are RabbitMQ's (``rabbit_db_topic_exchange``):

* A key is split on every ``.``; the empty key is zero words, and every other key has
  one more word than it has dots, so ``"a..b"`` is ``a``, an empty word, ``b`` and
  ``"."`` is two empty words.
* ``*`` matches exactly one word (possibly an empty one); ``#`` matches zero or more.
  So ``""`` binds only the empty key, ``#`` matches everything including ``""``,
  ``a.#`` and ``#.a`` both match ``a``, and ``*`` does not match ``""``.
* A routing key is matched word for word: ``*`` or ``#`` in a routing key are plain
  words (which a wildcard in a binding key still matches).

Matching walks a trie of the binding keys' words, one node per distinct binding-key
prefix, as a set of active nodes (an NFA run): per routing-key word each active node
follows its literal child, its ``*`` child, stays put if it is a ``#`` node, and every
node reached brings its chain of ``#`` children (``#`` may match nothing). The cost is
bounded by the trie, never exponential in the number of ``#``. Results are cached per
routing key in a bounded dict that any change to the destinations of a node clears.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

from leveret.model.exchanges.base import (
    EMPTY_ROUTE,
    BaseExchangeType,
    Destination,
    FieldTable,
    Frozen,
    RefCounts,
    register,
)

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["CACHE_SIZE", "TopicExchange", "split_topic_key"]

CACHE_SIZE = 4096
"""Routing keys whose result a topic exchange remembers; the cache is emptied when full."""


def split_topic_key(key: str) -> list[str]:
    """The words of a routing or binding key, as RabbitMQ splits them."""
    return key.split(".") if key else []


class _Node:
    """One trie node: a distinct binding-key prefix."""

    __slots__ = ("children", "hash", "is_hash", "parent", "refs", "star", "word")

    def __init__(self, parent: _Node | None, word: str) -> None:
        self.parent = parent
        self.word = word
        self.is_hash = word == "#" and parent is not None
        self.children: dict[str, _Node] = {}
        self.star: _Node | None = None  # children["*"], kept apart for speed
        self.hash: _Node | None = None  # children["#"]
        self.refs = RefCounts()  # destinations bound with exactly this key

    def child(self, word: str) -> _Node:
        node = self.children.get(word)
        if node is None:
            node = self.children[word] = _Node(self, word)
            if word == "*":
                self.star = node
            elif word == "#":
                self.hash = node
        return node

    def drop_child(self, word: str) -> None:
        del self.children[word]
        if word == "*":
            self.star = None
        elif word == "#":
            self.hash = None


@register
class TopicExchange(BaseExchangeType):
    """Pattern match on dotted words (AMQP 0-9-1 section 3.1.3.3), RabbitMQ-exact."""

    TYPE_NAME = "topic"
    NEEDS_MESSAGE = False

    __slots__ = ("_cache", "_root")

    def __init__(self) -> None:
        super().__init__()
        self._root = _Node(None, "")
        self._cache: dict[str, Collection[Destination]] = {}

    def route(self, routing_key: str, headers: FieldTable | None) -> Collection[Destination]:
        cache = self._cache
        result = cache.get(routing_key)
        if result is None:
            result = self._match(split_topic_key(routing_key))
            if len(cache) >= CACHE_SIZE:
                cache.clear()
            cache[routing_key] = result
        return result

    def _match(self, words: list[str]) -> Collection[Destination]:
        states: dict[_Node, None] = {}
        node: _Node | None = self._root
        while node is not None:
            states[node] = None
            node = node.hash
        for word in words:
            reached: dict[_Node, None] = {}
            for state in states:
                if state.is_hash:
                    node = state
                    while node is not None and node not in reached:
                        reached[node] = None
                        node = node.hash
                node = state.children.get(word)
                while node is not None and node not in reached:
                    reached[node] = None
                    node = node.hash
                node = state.star
                while node is not None and node not in reached:
                    reached[node] = None
                    node = node.hash
            if not reached:
                return EMPTY_ROUTE
            states = reached
        found = [state.refs.members for state in states if state.refs.counts]
        if not found:
            return EMPTY_ROUTE
        if len(found) == 1:
            return found[0]
        return tuple(dict.fromkeys(chain.from_iterable(found)))

    def _added(
        self, destination: Destination, routing_key: str, frozen: Frozen, arguments: FieldTable
    ) -> None:
        node = self._root
        for word in split_topic_key(routing_key):
            node = node.child(word)
        if node.refs.incr(destination):
            self._cache.clear()

    def _removed(self, destination: Destination, routing_key: str, frozen: Frozen) -> None:
        node = self._root
        for word in split_topic_key(routing_key):
            node = node.children[word]
        if not node.refs.decr(destination):
            return
        self._cache.clear()
        # Prune the branch that no binding needs any more.
        parent = node.parent
        while parent is not None and not node.refs.counts and not node.children:
            parent.drop_child(node.word)
            node, parent = parent, parent.parent

    def node_count(self) -> int:
        """How many trie nodes exist besides the root (for tests and diagnostics)."""
        count = 0
        stack = [self._root]
        while stack:
            node = stack.pop()
            count += len(node.children)
            stack.extend(node.children.values())
        return count
