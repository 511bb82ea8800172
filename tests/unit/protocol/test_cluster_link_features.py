"""The link features a Hello announces (protocol/cluster/codec.py): they survive the round
trip, a Hello without them is a node of 2026-11-28's main (speaking every feature it had),
and that version's decoder -- its codec as it was, kept in ``data/`` -- still reads a
Hello that carries them and proves the bytes the new node expects, both ways."""

from __future__ import annotations

import pytest

from leveret.protocol.cluster import codec as c
from tests.unit.protocol.released_codec import released_codec

SECRET = "cluster-secret"
NONCE = bytes(range(16))
# The link's codec at main on 2026-11-28 (2766635), before features were announced.
_todays_codec = released_codec


def _hello(features: frozenset[str] | None) -> c.Hello:
    return c.Hello("a", 7, NONCE, c.cluster_tag(SECRET), features)


@pytest.mark.parametrize(
    "features",
    [None, frozenset(), frozenset({c.ALSO}), c.FEATURES, frozenset({c.TAKEN, "cancel-ok"})],
)
def test_a_hello_round_trips_with_and_without_its_features(
    features: frozenset[str] | None,
) -> None:
    [back] = c.Reader().feed(c.encode(_hello(features)))
    assert back == _hello(features)


def test_a_hello_without_features_speaks_todays_and_unknown_names_are_left_out() -> None:
    assert _hello(None).speaks == c.UNANNOUNCED == c.FEATURES - {c.DELIVER_KEPT}
    assert _hello(frozenset()).speaks == frozenset()
    assert _hello(frozenset({c.ALSO, "from-the-future"})).speaks == {c.ALSO}


def test_todays_hello_is_read_as_announcing_none() -> None:
    """What a node of 2026-11-28 sends: its nonce alone (16 bytes, or any other length)."""
    old = _todays_codec()
    for nonce in (NONCE, b"x" * 8, b"y" * 40):
        frame = old.encode(old.Hello("a", 7, nonce, c.cluster_tag(SECRET)))
        [hello] = c.Reader().feed(frame)
        assert hello == c.Hello("a", 7, nonce, c.cluster_tag(SECRET), None)
        assert c.challenge(hello) == nonce


def test_todays_decoder_reads_a_hello_with_features_and_proves_what_we_expect() -> None:
    old = _todays_codec()
    mine = _hello(c.FEATURES)
    [seen] = old.Reader().feed(c.encode(mine))
    assert (seen.node, seen.incarnation, seen.cluster_tag) == ("a", 7, c.cluster_tag(SECRET))
    # It takes the features for part of the nonce, and proves the whole: what we check.
    assert seen.nonce == c.challenge(mine)
    assert old.proof(SECRET, "listener", "b", seen.nonce) == c.proof(
        SECRET, "listener", "b", c.challenge(mine)
    )
    # And the other way: what we prove of its Hello is what it checks.
    theirs = old.Hello("b", 9, NONCE, c.cluster_tag(SECRET))
    [hello] = c.Reader().feed(old.encode(theirs))
    assert isinstance(hello, c.Hello)
    assert c.proof(SECRET, "dialer", "a", c.challenge(hello)) == old.proof(
        SECRET, "dialer", "a", NONCE
    )


def test_the_features_are_covered_by_the_proof() -> None:
    """A peer's proof of our challenge fails if the features it saw were changed on the way
    (a downgrade of the link's forms is not possible without the secret)."""
    full = c.proof(SECRET, "listener", "b", c.challenge(_hello(c.FEATURES)))
    assert full != c.proof(SECRET, "listener", "b", c.challenge(_hello(frozenset())))


def test_a_consume_without_its_table_is_read_with_no_arguments() -> None:
    """The first version's Consume (``plain_consume_frame``): for a peer that reads none."""
    op = c.Consume(3, "/", "q", True, False, 10, -1, {})
    frame = c.plain_consume_frame(op)
    assert len(frame) == len(c.encode(op)) - 4  # an empty table is its u32 length
    assert c.Reader().feed(frame) == [op]
    with pytest.raises(ValueError, match="arguments"):
        c.plain_consume_frame(c.Consume(3, "/", "q", True, False, 10, 0, {"x-stream-offset": 5}))


@pytest.mark.parametrize("names", [b"taken also", b"also  taken", b"also also", b" also"])
def test_features_not_as_challenge_writes_them_are_refused(names: bytes) -> None:
    """The proof covers the bytes sent, and the reader makes them again from the set: a
    Hello whose names are not sorted, once each, one space apart would fail its proof, so
    it is refused as bad input instead."""
    good = c.encode(_hello(frozenset({c.ALSO, c.TAKEN})))
    nonce_field = NONCE + b"\x01" + names
    frame = good.replace(NONCE + b"\x01also taken", nonce_field)
    length = len(frame) - 4
    frame = length.to_bytes(4, "big") + frame[4:]
    position = frame.index(nonce_field) - 1
    frame = frame[:position] + bytes([len(nonce_field)]) + frame[position + 1 :]
    with pytest.raises(c.LinkError, match="not in their order"):
        c.Reader().feed(frame)


def test_a_feature_name_that_cannot_be_sent_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be sent"):
        c.encode(_hello(frozenset({"two words"})))
    with pytest.raises(ValueError, match="16 bytes"):
        c.encode(c.Hello("a", 7, b"short", "t", frozenset()))
