"""Property tests for SASL responses: what a client encodes the broker reads back, and any
bytes for any mechanism give credentials or a SaslError, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol import sasl

# Left out of the compiled pass (scripts/test): the SASL codec is not compiled.
pytestmark = pytest.mark.pure_only

# User names and passwords as clients send them: any text without NUL (PLAIN's separator).
text = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), max_size=40)


@settings(max_examples=200, deadline=None)
@given(text.filter(bool), text)
def test_plain_round_trip(username: str, password: str) -> None:
    creds = sasl.parse_response("PLAIN", sasl.plain_response(username, password))
    assert (creds.username, creds.password) == (username, password)
    same = sasl.parse_response("PLAIN", sasl.plain_response(username, password, username))
    assert same == creds


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40).filter(bool), st.text(max_size=40))
def test_amqplain_round_trip(username: str, password: str) -> None:
    creds = sasl.parse_response("AMQPLAIN", sasl.amqplain_response(username, password))
    assert (creds.username, creds.password) == (username, password)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=255))
def test_external_and_anonymous_round_trip(extra: str) -> None:
    assert sasl.parse_response("EXTERNAL", sasl.external_response(extra)).extra == extra
    assert sasl.parse_response("ANONYMOUS", sasl.anonymous_response(extra)).extra == extra


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([*sasl.MECHANISMS, "CRAM-MD5", ""]), st.binary(max_size=80))
def test_any_bytes_give_credentials_or_a_sasl_error(mechanism: str, response: bytes) -> None:
    try:
        creds = sasl.parse_response(mechanism, response)
    except sasl.SaslError as exc:
        reason = exc.reason
        assert reason, "a refusal always says why"
        return
    assert creds.mechanism == mechanism
    assert (creds.password is None) == (mechanism in ("EXTERNAL", "ANONYMOUS"))
