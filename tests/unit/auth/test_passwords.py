"""RabbitMQ's password hashes: the hashes below were made by RabbitMQ 3.10.8 itself
(``rabbitmqctl add_user`` for SHA-256; ``rabbit_password:hash/2`` for SHA-512 and MD5) and
are in tests/data/rabbitmq-3.10.8-definitions.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leveret.auth import passwords
from leveret.auth.passwords import MD5, SHA256, SHA512, BadPasswordHash

# Left out of the compiled pass (scripts/test): auth/ is not compiled.
pytestmark = pytest.mark.pure_only

DATA = Path(__file__).resolve().parents[2] / "data" / "rabbitmq-3.10.8-definitions.json"
RABBITMQ_PASSWORDS = {
    "lv_exp_sha256": "secret-256",
    "lv_exp_sha512": "secret-512",
    "lv_exp_md5": "secret-md5",
}


def _exported() -> dict[str, dict[str, str]]:
    return {u["name"]: u for u in json.loads(DATA.read_text())["users"]}


@pytest.mark.parametrize("name", sorted(RABBITMQ_PASSWORDS))
def test_rabbitmq_hashes_check(name: str) -> None:
    user = _exported()[name]
    stored = passwords.decode_hash(user["password_hash"], user["hashing_algorithm"])
    assert passwords.check_password(stored, user["hashing_algorithm"], RABBITMQ_PASSWORDS[name])
    assert not passwords.check_password(stored, user["hashing_algorithm"], "wrong")
    assert not passwords.check_password(stored, user["hashing_algorithm"], "")


def test_the_three_algorithms_are_the_exported_ones() -> None:
    algorithms = {u["hashing_algorithm"] for u in _exported().values()}
    assert algorithms == {SHA256, SHA512, MD5}


@pytest.mark.parametrize("algorithm", [SHA256, SHA512, MD5])
def test_hash_round_trip(algorithm: str) -> None:
    stored = passwords.hash_password("pässword", algorithm)
    assert len(stored) == 4 + {SHA256: 32, SHA512: 64, MD5: 16}[algorithm]
    assert passwords.check_password(stored, algorithm, "pässword")
    text = passwords.encode_hash(stored)
    assert passwords.decode_hash(text, algorithm) == stored


def test_salt_is_random() -> None:
    assert passwords.hash_password("x") != passwords.hash_password("x")
    assert passwords.hash_password("x", salt=b"abcd") == passwords.hash_password("x", salt=b"abcd")


def test_empty_hash_never_matches() -> None:
    assert not passwords.check_password(b"", SHA256, "anything")
    assert passwords.decode_hash("", SHA256) == b""


def test_no_algorithm_means_md5_as_in_rabbitmq_before_3_6() -> None:
    assert passwords.check_algorithm("") == MD5


@pytest.mark.parametrize(
    ("text", "algorithm", "message"),
    [
        ("not base64!", SHA256, "not base64"),
        ("AAAA", SHA256, "has 3 bytes"),
        ("AAAAAAAA", "rabbit_password_hashing_sha1", "unknown hashing algorithm"),
    ],
)
def test_bad_hashes_are_refused(text: str, algorithm: str, message: str) -> None:
    with pytest.raises(BadPasswordHash, match=message):
        passwords.decode_hash(text, algorithm)
