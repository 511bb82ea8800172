"""The ``shovel`` parameter checked and read as RabbitMQ 3.10's
``rabbit_shovel_parameters`` does (its texts are what the HTTP API and ctl answer)."""

from __future__ import annotations

from typing import Any

import pytest

from leveret.links.shovel_config import parse, validate
from leveret.links.validation import ValidationError

# Left out of the compiled pass (scripts/test): leveret.links is not compiled.
pytestmark = pytest.mark.pure_only

BASE: dict[str, Any] = {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://"}


def errors(value: object) -> list[str]:
    try:
        validate(value)
    except ValidationError as exc:
        text, found = str(exc), exc.errors
    else:
        return []
    assert text == "Validation failed\n\n" + "\n".join(found) + "\n"
    return found


def test_a_minimal_definition_and_its_defaults() -> None:
    assert errors(BASE) == []
    spec = parse("/", "s", BASE)
    assert spec.ack_mode == "on-confirm"
    assert spec.reconnect_delay == 5
    assert spec.source.protocol == spec.dest.protocol == "amqp091"
    assert spec.source.prefetch == 1000
    assert spec.source.delete_after == "never"
    assert spec.source.details() == {"src_queue": "a"}
    assert spec.dest.details() == {}


def test_source_is_a_queue_or_an_exchange() -> None:
    no_source = {k: v for k, v in BASE.items() if k != "src-queue"}
    assert "Must specify 'src-exchange' or 'src-queue'" in errors(no_source)
    assert "Cannot specify 'src-exchange' and 'src-queue'" in errors({**BASE, "src-exchange": "x"})
    spec = parse("/", "s", {**no_source, "src-exchange": "x", "src-exchange-key": "k.#"})
    assert spec.source.details() == {"src_exchange": "x", "src_exchange_key": "k.#"}
    assert spec.source.headers() == [("src-exchange", "x"), ("src-exchange-key", "k.#")]


def test_rabbitmqs_texts() -> None:
    assert errors({**BASE, "dest-exchange": "x", "dest-queue": "q"}) == [
        "Cannot specify 'dest-exchange' and 'dest-queue'"
    ]
    assert errors({**BASE, "ack-mode": "sometimes"}) == [
        'ack-mode should be one of [<<"no-ack">>,<<"on-publish">>,<<"on-confirm">>],'
        ' actually was <<"sometimes">>'
    ]
    assert errors({**BASE, "src-delete-after": -1}) == [
        'src-delete-after should be a number greater than or equal to 0, "never" or'
        ' "queue-length", actually was -1'
    ]
    assert errors({**BASE, "ack-mode": "no-ack", "src-delete-after": 5}) == [
        "Cannot specify 'no-ack' and numerical 'delete-after'"
    ]
    assert errors({**BASE, "reconnect-delay": "soon"}) == [
        'reconnect-delay should be a number, actually was <<"soon">>'
    ]
    assert errors({"src-queue": "a", "dest-uri": "amqp://"}) == [
        'Key "src-uri" not found in shovel'
    ]
    assert errors({**BASE, "colour": "red"}) == [
        'Unrecognised terms [{<<"colour">>,<<"red">>}] in shovel'
    ]
    assert errors({**BASE, "src-uri": "ftp://x"})[0].startswith('"ftp://x" not a valid URI')
    assert errors({**BASE, "dest-queue": "q" * 256}) == [
        "dest-queue should be less than 255 bytes, actually was 256"
    ]


def test_amqp10_ends_need_addresses() -> None:
    value = {
        "src-protocol": "amqp10",
        "src-uri": "amqp://h",
        "dest-protocol": "amqp10",
        "dest-uri": "amqp://h",
    }
    assert sorted(errors(value)) == [
        'Key "dest-address" not found in shovel',
        'Key "src-address" not found in shovel',
    ]
    spec = parse("v", "s", {**value, "src-address": "/queue/a", "dest-address": "/queue/b"})
    assert spec.source.details() == {"src_address": "/queue/a"}
    assert spec.dest.details() == {"dest_address": "/queue/b"}


def test_legacy_keys_are_read_as_rabbitmq_reads_them() -> None:
    spec = parse(
        "/",
        "s",
        {
            **BASE,
            "prefetch-count": 7,
            "delete-after": "queue-length",
            "add-forward-headers": True,
            "publish-properties": {"delivery_mode": 2},
        },
    )
    assert spec.source.prefetch == 7
    assert spec.source.delete_after == "queue-length"
    assert spec.dest.add_forward_headers
    assert spec.dest.publish_properties == {"delivery_mode": 2}


def test_uri_lists() -> None:
    spec = parse("/", "s", {**BASE, "src-uri": ["amqp://a", "amqp://b"]})
    assert spec.source.uris == ("amqp://a", "amqp://b")
    assert errors({**BASE, "src-uri": []}) == ["src-uri should be a list of URIs, actually was []"]


def test_not_an_object() -> None:
    assert errors(["a"]) == ['shovel not a list [<<"a">>]']
