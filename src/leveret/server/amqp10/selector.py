"""JMS message selectors (``apache.org:selector-filter:string``, the filter of Qpid Proton's
"selected receive" example and of JMS clients over AMQP 1.0): the SQL-92 conditional
subset JMS 2.0 section 3.8.1 defines, parsed once per link and evaluated per message.

Supported: identifiers (application properties, i.e. the core's headers; ``JMSPriority``,
``JMSDeliveryMode``, ``JMSMessageID``, ``JMSCorrelationID``: :func:`message_lookup`), string, exact
and approximate numeric and boolean literals, ``( )``, ``NOT``/``AND``/``OR`` with SQL's
three-valued logic (a missing property is unknown, and only a true result selects),
``= <> < > <= >=``, ``+ - * /``, ``[NOT] BETWEEN``, ``[NOT] IN (...)``, ``[NOT] LIKE``
with ``ESCAPE``, ``IS [NOT] NULL``. Keywords are case-insensitive, identifiers are not.
Values of different types are not comparable (unknown), as JMS says.

Pure: the 1.0 front end's session imports it (a bad selector refuses the attach).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.model.message import Message

__all__ = ["SELECTOR_FILTER", "Selector", "SelectorError", "message_lookup", "parse"]

SELECTOR_FILTER = "apache.org:selector-filter:string"

Lookup = Callable[[str], object]
Node = Callable[[Lookup], object]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[lLfFdD]?)
      | (?P<word>[A-Za-z_$][A-Za-z0-9_$.]*)
      | (?P<op><>|<=|>=|[=<>+\-*/(),])
    )""",
    re.VERBOSE,
)
_KEYWORDS = frozenset(
    ("AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE")
)


class SelectorError(ValueError):
    """A selector that is not valid (the attach is refused with amqp:invalid-field)."""


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # string, number, word, keyword, op, end
    text: str
    value: object = None


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise SelectorError(f"unexpected character at {pos} in selector {text!r}")
        pos = m.end()
        if m.group("string") is not None:
            raw = m.group("string")
            out.append(_Tok("string", raw, raw[1:-1].replace("''", "'")))
        elif m.group("number") is not None:
            raw = m.group("number").rstrip("lLfFdD")
            exact = not any(c in raw for c in ".eE")
            out.append(_Tok("number", raw, int(raw) if exact else float(raw)))
        elif m.group("word") is not None:
            word = m.group("word")
            upper = word.upper()
            if upper in _KEYWORDS:
                out.append(_Tok("keyword", upper))
            else:
                out.append(_Tok("word", word))
        else:
            out.append(_Tok("op", m.group("op")))
    out.append(_Tok("end", ""))
    return out


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _compare(op: str, a: object, b: object) -> bool | None:
    if a is None or b is None:
        return None
    if _number(a) and _number(b):
        x, y = float(a), float(b)  # type: ignore[arg-type]
        if op == "=":
            return x == y
        if op == "<>":
            return x != y
        if op == "<":
            return x < y
        if op == ">":
            return x > y
        if op == "<=":
            return x <= y
        return x >= y
    if type(a) is not type(b) or not isinstance(a, (str, bool)):
        return None
    if op == "=":
        return a == b
    if op == "<>":
        return a != b
    return None  # strings and booleans have no order in a selector


def _not(value: object) -> bool | None:
    return None if value is None else not value


def _like_pattern(pattern: str, escape: str | None) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def accept(self, kind: str, text: str) -> bool:
        tok = self.peek()
        if tok.kind == kind and tok.text == text:
            self.i += 1
            return True
        return False

    def expect(self, kind: str, text: str) -> None:
        if not self.accept(kind, text):
            raise SelectorError(f"expected {text!r}, found {self.peek().text or 'the end'!r}")

    def parse(self) -> Node:
        node = self.or_()
        if self.peek().kind != "end":
            raise SelectorError(f"unexpected {self.peek().text!r}")
        return node

    def or_(self) -> Node:
        node = self.and_()
        while self.accept("keyword", "OR"):
            node = _connective(node, self.and_(), decisive=True)
        return node

    def and_(self) -> Node:
        node = self.not_()
        while self.accept("keyword", "AND"):
            node = _connective(node, self.not_(), decisive=False)
        return node

    def not_(self) -> Node:
        if self.accept("keyword", "NOT"):
            inner = self.not_()
            return lambda get: _not(inner(get))
        return self.predicate()

    def predicate(self) -> Node:
        left = self.sum_()
        tok = self.peek()
        if tok.kind == "op" and tok.text in ("=", "<>", "<", ">", "<=", ">="):
            self.take()
            right = self.sum_()
            op = tok.text
            return lambda get: _compare(op, left(get), right(get))
        if self.accept("keyword", "IS"):
            negate = self.accept("keyword", "NOT")
            self.expect("keyword", "NULL")
            return lambda get: (left(get) is not None) if negate else (left(get) is None)
        negate = self.accept("keyword", "NOT")
        if self.accept("keyword", "BETWEEN"):
            low = self.sum_()
            self.expect("keyword", "AND")
            high = self.sum_()

            def between(get: Lookup) -> object:
                value = left(get)
                a, b = _compare(">=", value, low(get)), _compare("<=", value, high(get))
                result = None if a is None or b is None else a and b
                return _not(result) if negate else result

            return between
        if self.accept("keyword", "IN"):
            self.expect("op", "(")
            items = [self.string()]
            while self.accept("op", ","):
                items.append(self.string())
            self.expect("op", ")")
            choices = frozenset(items)

            def in_(get: Lookup) -> object:
                value = left(get)
                if not isinstance(value, str):
                    return None
                return (value not in choices) if negate else (value in choices)

            return in_
        if self.accept("keyword", "LIKE"):
            pattern = self.string()
            escape = None
            if self.accept("keyword", "ESCAPE"):
                escape = self.string()
                if len(escape) != 1:
                    raise SelectorError("ESCAPE takes one character")
            compiled = _like_pattern(pattern, escape)

            def like(get: Lookup) -> object:
                value = left(get)
                if not isinstance(value, str):
                    return None
                found = compiled.fullmatch(value) is not None
                return not found if negate else found

            return like
        if negate:
            raise SelectorError("NOT must be followed by BETWEEN, IN or LIKE here")
        return left

    def string(self) -> str:
        tok = self.take()
        if tok.kind != "string":
            raise SelectorError(f"expected a string literal, found {tok.text!r}")
        return str(tok.value)

    def sum_(self) -> Node:
        node = self.product()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            op = self.take().text
            node = _arithmetic(op, node, self.product())
        return node

    def product(self) -> Node:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/"):
            op = self.take().text
            node = _arithmetic(op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.accept("op", "-"):
            inner = self.unary()
            return lambda get: -v if _number(v := inner(get)) else None  # type: ignore[operator]
        if self.accept("op", "+"):
            return self.unary()
        return self.primary()

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind == "op" and tok.text == "(":
            node = self.or_()
            self.expect("op", ")")
            return node
        if tok.kind in ("string", "number"):
            value = tok.value
            return lambda get: value
        if tok.kind == "keyword" and tok.text in ("TRUE", "FALSE"):
            flag = tok.text == "TRUE"
            return lambda get: flag
        if tok.kind == "word":
            name = tok.text
            return lambda get: get(name)
        raise SelectorError(f"unexpected {tok.text or 'end of selector'!r}")


def _arithmetic(op: str, left: Node, right: Node) -> Node:
    def apply(get: Lookup) -> object:
        a, b = left(get), right(get)
        if not (_number(a) and _number(b)):
            return None
        x, y = a, b
        assert isinstance(x, (int, float))
        assert isinstance(y, (int, float))
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
        if y == 0:
            return None
        return x // y if isinstance(x, int) and isinstance(y, int) else x / y

    return apply


class Selector:
    """A parsed selector; ``matches(lookup)`` with ``lookup(name)`` giving a property's
    value (None when the message does not have it)."""

    __slots__ = ("_node", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._node = _Parser(text).parse()

    def matches(self, lookup: Lookup) -> bool:
        return self._node(lookup) is True


def parse(text: str) -> Selector:
    return Selector(text)


def _message_field(view: object, name: str) -> object:
    """A 1.0 message's properties section field, or a 0-9-1 property, by name."""
    props = getattr(view, "props", None)
    value = getattr(props if props is not None else view, name, None)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, (str, int)) else None


def message_lookup(message: Message) -> Lookup:
    """The selector's view of a core message: its headers (a 1.0 message's application
    properties and ``x-`` annotations, a 0-9-1 message's headers), and JMS's header fields."""
    view = message.properties
    headers = view.headers or {}

    def get(name: str) -> object:
        if name in headers:
            return headers[name]
        if name == "JMSPriority":
            priority = view.priority
            return 4 if priority is None else priority  # JMS's default priority
        if name == "JMSDeliveryMode":
            return "PERSISTENT" if view.delivery_mode == 2 else "NON_PERSISTENT"
        if name == "JMSMessageID":
            return _message_field(view, "message_id")
        if name == "JMSCorrelationID":
            return _message_field(view, "correlation_id")
        return None

    return get


def _connective(left: Node, right: Node, *, decisive: bool) -> Node:
    """OR (``decisive`` True) or AND (False) in SQL's three-valued logic: the decisive value
    on either side wins (the right side is not evaluated then); otherwise unknown (None) if
    either side is unknown, else the other value."""

    def node(get: Lookup) -> object:
        a = left(get)
        if a is decisive:
            return decisive
        b = right(get)
        if b is decisive:
            return decisive
        return None if a is None or b is None else not decisive

    return node
