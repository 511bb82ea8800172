"""The choice of a connection's front end from its first bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.server import frontend
from leveret.server.frontend import DEFAULT_FRONT_END, FrontEnd, choose

if TYPE_CHECKING:
    import pytest

    from leveret.server.shell.shell import Shell

OTHER = b"AMQP\x00\x01\x00\x00"


def _other(shell: Shell) -> FrontEnd:
    raise AssertionError("not called by choose")


def test_every_header_goes_to_0_9_1_when_nothing_else_is_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(frontend, "FRONT_ENDS", {})
    assert choose(b"AMQP\x00\x00\x09\x01") is DEFAULT_FRONT_END
    assert choose(b"HTTP/1.1") is DEFAULT_FRONT_END
    assert choose(b"H") is DEFAULT_FRONT_END  # no listed header starts so: no need to wait
    assert choose(b"A") is DEFAULT_FRONT_END


def test_the_0_10_header_goes_to_the_0_10_front_end() -> None:
    assert choose(b"A") is None  # could still be AMQP 0-10's (or 1.0's, 0-8's, 0-9's)
    factory = choose(b"AMQP\x01\x01\x00\x0a")
    assert factory is frontend.FRONT_ENDS[b"AMQP\x01\x01\x00\x0a"]
    assert factory is not DEFAULT_FRONT_END
    assert choose(b"AMQP\x01\x01\x00\x0a" + b"frames") is factory


def test_both_amqp_1_0_headers_go_to_the_1_0_front_end() -> None:
    amqp = choose(b"AMQP\x00\x01\x00\x00")
    assert amqp is not None
    assert amqp is not DEFAULT_FRONT_END
    assert choose(b"AMQP\x03\x01\x00\x00") is amqp
    assert choose(b"A") is None  # a prefix of the 1.0 headers: wait for more


def test_a_listed_header_is_told_apart_only_once_it_is_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(frontend.FRONT_ENDS, OTHER, _other)
    assert choose(b"AMQP\x00\x01\x00") is None  # could still be either
    assert choose(b"AMQP\x00\x00") is DEFAULT_FRONT_END  # 0-9-1's prefix, not OTHER's
    assert choose(OTHER) is _other
    assert choose(OTHER + b"frames") is _other
    assert choose(b"AMQP\x00\x01\x00\x01") is DEFAULT_FRONT_END
    assert choose(b"") is None
