"""Unit tests of the headers exchange type, RabbitMQ's semantics."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from leveret.errors import PreconditionFailed
from leveret.model.exchanges import HeadersExchange
from leveret.model.exchanges.headers import headers_match, values_match

# Left out of the compiled pass (scripts/test): the exchanges are not compiled.
pytestmark = pytest.mark.pure_only


def matches(arguments: dict[str, object], headers: dict[str, object] | None) -> bool:
    ex = HeadersExchange()
    ex.validate_binding("", arguments)
    ex.add_binding("q", "", arguments)
    routed = list(ex.route("ignored", headers))
    assert (routed == ["q"]) is headers_match(arguments, headers)
    return routed == ["q"]


def test_needs_headers() -> None:
    assert HeadersExchange.NEEDS_MESSAGE


@pytest.mark.parametrize("mode", ["all", "any", "all-with-x", "any-with-x", b"any"])
def test_valid_x_match(mode: object) -> None:
    HeadersExchange().validate_binding("", {"x-match": mode, "a": 1})


def test_absent_x_match_is_valid() -> None:
    HeadersExchange().validate_binding("", {"a": 1})


def test_invalid_x_match_value() -> None:
    with pytest.raises(PreconditionFailed) as info:
        HeadersExchange().validate_binding("", {"x-match": "some"})
    assert info.value.reply_code == 406
    assert not info.value.hard
    assert info.value.reply_text == (
        'Invalid x-match field value <<"some">>; expected all, any, all-with-x, or any-with-x'
    )


def test_invalid_x_match_type() -> None:
    with pytest.raises(PreconditionFailed) as info:
        HeadersExchange().validate_binding("", {"x-match": 1})
    assert info.value.reply_text == (
        "Invalid x-match field type signedint (value 1); expected longstr"
    )
    with pytest.raises(PreconditionFailed):
        HeadersExchange().validate_binding("", {"x-match": True})


def test_all_is_default() -> None:
    args: dict[str, object] = {"a": 1, "b": 2}
    assert matches(args, {"a": 1, "b": 2})
    assert matches(args, {"a": 1, "b": 2, "c": 3})
    assert not matches(args, {"a": 1})
    assert not matches(args, {"a": 1, "b": 3})


def test_all() -> None:
    args: dict[str, object] = {"x-match": "all", "a": 1, "b": "x"}
    assert matches(args, {"a": 1, "b": "x"})
    assert not matches(args, {"b": "x"})
    assert not matches(args, {})
    assert not matches(args, None)


def test_any() -> None:
    args: dict[str, object] = {"x-match": "any", "a": 1, "b": "x"}
    assert matches(args, {"a": 1})
    assert matches(args, {"b": "x", "c": 0})
    assert matches(args, {"a": 2, "b": "x"})
    assert not matches(args, {"a": 2, "b": "y"})
    assert not matches(args, {"c": 1})
    assert not matches(args, None)


def test_no_plain_keys_all_matches_everything_any_nothing() -> None:
    assert matches({}, None)
    assert matches({}, {"a": 1})
    assert matches({"x-match": "all"}, {})
    assert matches({"x-match": "all", "x-foo": 1}, {"y": 2})
    assert not matches({"x-match": "any"}, {"a": 1})
    assert not matches({"x-match": "any", "x-foo": 1}, {"x-foo": 1})
    assert matches({"x-match": "all-with-x"}, {})
    assert not matches({"x-match": "any-with-x"}, {"a": 1})


def test_x_keys_ignored_without_with_x() -> None:
    assert matches({"x-match": "all", "x-foo": "bar", "a": 1}, {"a": 1})
    assert not matches({"x-match": "any", "x-foo": "bar"}, {"x-foo": "bar"})
    assert matches({"x-match": "any", "x-foo": "bar", "a": 1}, {"a": 1, "x-foo": "nope"})


def test_with_x_variants_match_x_keys() -> None:
    assert matches({"x-match": "all-with-x", "x-foo": "bar"}, {"x-foo": "bar"})
    assert not matches({"x-match": "all-with-x", "x-foo": "bar"}, {})
    assert not matches({"x-match": "all-with-x", "x-foo": "bar", "a": 1}, {"a": 1})
    assert matches({"x-match": "any-with-x", "x-foo": "bar", "a": 1}, {"x-foo": "bar"})
    assert not matches({"x-match": "any-with-x", "x-foo": "bar"}, {"x-foo": "baz"})


def test_x_match_itself_is_never_matched() -> None:
    assert matches({"x-match": "all-with-x"}, {"x-match": "other"})
    assert not matches({"x-match": "any-with-x"}, {"x-match": "any-with-x"})


def test_void_binding_value_matches_presence() -> None:
    assert matches({"a": None}, {"a": 1})
    assert matches({"a": None}, {"a": None})
    assert matches({"a": None}, {"a": "anything"})
    assert not matches({"a": None}, {"b": 1})
    assert matches({"x-match": "any", "a": None, "b": 1}, {"a": False})


def test_void_header_value_does_not_equal_a_value() -> None:
    assert not matches({"a": 1}, {"a": None})
    assert not matches({"a": ""}, {"a": None})


def test_numbers_compare_as_erlang_does() -> None:
    # RabbitMQ 3.10.8 (tests/conformance: headers-*): integers, floats and timestamps by
    # number; a decimal is a (scale, digits) pair, equal only to the same pair.
    assert matches({"a": 1}, {"a": 1.0})
    assert matches({"a": 1.0}, {"a": 1})
    stamp = datetime.datetime(1970, 1, 1, 0, 16, 40, tzinfo=datetime.UTC)
    assert matches({"a": 1000}, {"a": stamp})
    assert matches({"a": stamp}, {"a": 1000})
    assert matches({"a": Decimal("1.00")}, {"a": Decimal("1.00")})
    assert not matches({"a": Decimal("1.00")}, {"a": Decimal("1.0")})
    assert not matches({"a": Decimal("1.00")}, {"a": 1})
    assert not matches({"a": 2}, {"a": Decimal(2)})
    assert not matches({"a": 0.5}, {"a": Decimal("0.5")})
    assert not matches({"a": 1}, {"a": 2})
    assert not matches({"a": 1}, {"a": "1"})
    assert not matches({"a": "1"}, {"a": 1})


def test_bool_never_equals_a_number() -> None:
    assert not matches({"a": True}, {"a": 1})
    assert not matches({"a": 1}, {"a": True})
    assert not matches({"a": False}, {"a": 0})
    assert not matches({"a": 0}, {"a": False})
    assert not matches({"a": 1.0}, {"a": True})
    assert matches({"a": True}, {"a": True})
    assert not matches({"a": True}, {"a": False})


def test_str_and_bytes_are_the_same_binary() -> None:
    assert matches({"a": "x"}, {"a": b"x"})
    assert matches({"a": b"x"}, {"a": "x"})
    assert matches({"a": "é"}, {"a": "é".encode()})
    assert matches({"a": bytearray(b"x")}, {"a": "x"})
    assert not matches({"a": "x"}, {"a": b"y"})
    assert not matches({"a": b"\xff"}, {"a": "\xff"})
    assert matches({"a": b"\xff"}, {"a": b"\xff"})
    assert matches({"a": ""}, {"a": b""})


def test_arrays_and_tables() -> None:
    assert matches({"a": [1, "x", True]}, {"a": [1, "x", True]})
    # Inside arrays and tables RabbitMQ compares (type, value): no int/float, str/bytes mix.
    assert not matches({"a": [1]}, {"a": [1.0]})
    assert not matches({"a": ["x"]}, {"a": [b"x"]})
    assert not matches({"a": {"b": 1}}, {"a": {"b": 1.0}})
    assert not matches({"a": [1, "x"]}, {"a": [1, "x", 2]})
    assert not matches({"a": [True]}, {"a": [1]})
    assert matches({"a": {"b": [None, 2]}}, {"a": {"b": (None, 2)}})
    assert not matches({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}})
    assert not matches({"a": {"b": 1}}, {"a": {"c": 1}})
    assert not matches({"a": [None]}, {"a": [1]})
    assert not matches({"a": [1]}, {"a": 1})


def test_values_match_helper() -> None:
    assert values_match(None, None)
    assert not values_match(None, 0)
    assert not values_match(1, Decimal(1))
    assert values_match(1, 1.0)
    assert not values_match(True, 1)
    assert values_match("a", b"a")


def test_routing_key_is_ignored() -> None:
    ex = HeadersExchange()
    ex.add_binding("q", "some.key", {"a": 1})
    assert list(ex.route("other", {"a": 1})) == ["q"]


def test_multiple_bindings_each_destination_once() -> None:
    ex = HeadersExchange()
    ex.add_binding("q", "", {"a": 1})
    ex.add_binding("q", "", {"x-match": "any", "b": 2})
    ex.add_binding("r", "", {"a": 1})
    ex.add_binding("s", "", {"c": 3})
    assert sorted(map(str, ex.route("", {"a": 1, "b": 2}))) == ["q", "r"]
    assert list(ex.route("", {"b": 2})) == ["q"]
    assert list(ex.route("", {})) == []


def test_unbind_and_remove_destination() -> None:
    ex = HeadersExchange()
    ex.add_binding("q", "", {"a": 1})
    ex.add_binding("r", "", {"a": 1})
    ex.add_binding("q", "", {"b": 1})
    assert ex.remove_binding("q", "", {"a": 1})
    assert list(ex.route("", {"a": 1})) == ["r"]
    assert not ex.remove_binding("q", "", {"a": 1})
    assert ex.remove_destination("q") == 1
    assert list(ex.route("", {"b": 1})) == []
    assert ex.remove_binding("r", "", {"a": 1})
    assert len(ex) == 0
    assert ex._groups == {}


def test_argument_order_does_not_matter_for_identity() -> None:
    ex = HeadersExchange()
    assert ex.add_binding("q", "", {"a": 1, "x-match": "any"})
    assert not ex.add_binding("q", "", {"x-match": "any", "a": 1})
    assert ex.has_binding("q", "", {"x-match": "any", "a": 1})


def test_x_match_as_bytes() -> None:
    assert matches({"x-match": b"any", "a": 1, "b": 2}, {"b": 2})
