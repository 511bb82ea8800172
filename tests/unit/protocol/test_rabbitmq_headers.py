"""RabbitMQ 3.10.8's answers to old protocol headers (tests/data/rabbitmq-headers), decoded
with Leveret's codecs: the reference the broker's header handling is checked against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from leveret.errors import SyntaxError_
from leveret.protocol.amqp08 import fieldtable as ft08
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m091

DATA = Path(__file__).resolve().parents[2] / "data" / "rabbitmq-headers" / "captures.json"
CAPTURES: dict[str, Any] = json.loads(DATA.read_text())["headers"]
OLD = ("AMQP 1 1 8 0", "AMQP 1 1 9 1")
NEW = ("AMQP 1 1 0 9", "AMQP 0 0 9 1")


def _frames(hex_octets: str) -> list[framing.Frame]:
    data = bytes.fromhex(hex_octets)
    frames = framing.FrameDecoder().feed(data)
    assert sum(len(f[2]) + 8 for f in frames) == len(data)
    return frames


def _methods(header: str, hex_octets: str) -> list[object]:
    # After a 0-8 header RabbitMQ speaks 0-8; else 0-9-1, plus the access class (from 0-9).
    out: list[object] = []
    for frame in _frames(hex_octets):
        assert frame[0] == framing.FRAME_METHOD
        index = int.from_bytes(bytes(frame[2][:4]), "big")
        if header in OLD:
            out.append(m08.decode_method(frame[2]))
        elif index in m091.METHODS:
            out.append(m091.decode_method(frame[2]))
        else:
            out.append(m09.decode_method(frame[2]))
    return out


def test_every_header_was_captured_and_none_refused() -> None:
    assert set(CAPTURES) == {*OLD, *NEW}
    for header, entry in CAPTURES.items():
        assert bytes.fromhex(entry["sent"]) == b"AMQP" + bytes(map(int, header.split()[1:]))
        assert "refused_with_header" not in entry


@pytest.mark.parametrize("header", [*OLD, *NEW])
def test_connection_start(header: str) -> None:
    entry = CAPTURES[header]
    (frame,) = _frames(entry["reply"])
    assert frame[1] == 0
    codec = m08 if header in OLD else m091
    start = codec.decode_method(frame[2])
    assert isinstance(start, codec.ConnectionStart)
    assert (start.version_major, start.version_minor) == ((8, 0) if header in OLD else (0, 9))
    assert (start.mechanisms, start.locales) == (b"AMQPLAIN PLAIN", b"en_US")
    props = start.server_properties
    assert (props["product"], props["version"]) == ("RabbitMQ", "3.10.8")
    # Leveret's encoders give back RabbitMQ's octets exactly; for 0-8 that is the strict 0-8
    # field-table encoder, which refuses anything but S, I, D, T and F.
    assert start.encode() == bytes(frame[2])
    if header in OLD:
        assert props["capabilities"] == {}
        with pytest.raises(SyntaxError_):
            ft08.encode_table({**props, "capabilities": {"publisher_confirms": True}})
    else:
        capabilities = props["capabilities"]
        assert isinstance(capabilities, dict)
        assert capabilities["publisher_confirms"] is True
        assert len(capabilities) == 9
    assert CAPTURES["AMQP 1 1 0 9"]["reply"] == CAPTURES["AMQP 0 0 9 1"]["reply"]
    assert CAPTURES["AMQP 1 1 8 0"]["reply"] == CAPTURES["AMQP 1 1 9 1"]["reply"]


@pytest.mark.parametrize("header", [*OLD, *NEW])
def test_handshake_replies(header: str) -> None:
    replies = _methods(header, CAPTURES[header]["handshake_received"])
    start, tune, open_ok, channel_open_ok = replies
    assert start == _methods(header, CAPTURES[header]["reply"])[0]
    assert isinstance(tune, m08.ConnectionTune | m091.ConnectionTune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    if header in OLD:
        assert isinstance(open_ok, m08.ConnectionOpenOk)
        # 0-8's channel.open-ok has no arguments: 4 octets, where 0-9-1's carries a longstr.
        assert channel_open_ok == m08.ChannelOpenOk()
        assert len(channel_open_ok.encode()) == 4
    else:
        assert channel_open_ok == m091.ChannelOpenOk()
        assert len(channel_open_ok.encode()) == 8


@pytest.mark.parametrize("header", [*OLD, *NEW])
def test_probes(header: str) -> None:
    probes = CAPTURES[header]["probes"]

    def answer(name: str) -> list[object]:
        assert not probes[name]["broker_closed_socket"]
        return _methods(header, probes[name]["received"])

    ((request_ok,),) = [answer("access.request")]
    assert isinstance(request_ok, m08.AccessRequestOk | m09.AccessRequestOk)
    assert request_ok.ticket == 1
    # 60/100 gets no reply; the basic.qos after it is answered.
    (qos_ok,) = answer("basic.recover 60/100")
    assert isinstance(qos_ok, m08.BasicQosOk | m091.BasicQosOk)
    (recover_ok,) = answer("basic.recover 60/110")
    assert isinstance(recover_ok, m08.BasicRecoverSyncOk | m091.BasicRecoverOk)
    (unbind_ok,) = answer("queue.unbind 50/50")
    assert isinstance(unbind_ok, m08.QueueUnbindOk | m091.QueueUnbindOk)
    own, other = ("10/60", "10/50") if header in OLD else ("10/50", "10/60")
    (close_ok,) = answer(f"connection.close {own}")
    assert isinstance(close_ok, m08.ConnectionCloseOk | m091.ConnectionCloseOk)
    (close,) = answer(f"connection.close {other}")
    assert isinstance(close, m08.ConnectionClose | m091.ConnectionClose)
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        541,
        "INTERNAL_ERROR",
        0,
        0,
    )
