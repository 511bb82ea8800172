"""The 0-8, 0-9 and 0-9 draft codecs where they differ from 0-9-1: method ids and fields
(wire bytes written out by hand from the XML), field tables, the added value types, frames."""

from __future__ import annotations

import datetime
import decimal
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.errors import AMQPError, FrameError, SyntaxError_
from leveret.protocol.amqp08 import fieldtable as ft08
from leveret.protocol.amqp08 import framing as framing08
from leveret.protocol.amqp08._generated import constants as c08
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09 import framing as framing09
from leveret.protocol.amqp09 import wiretypes
from leveret.protocol.amqp09._generated import constants as c09
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp09.draft import fieldtable as ftd
from leveret.protocol.amqp09.draft._generated import constants as cd
from leveret.protocol.amqp09.draft._generated import methods as md
from leveret.protocol.amqp091 import framing as framing091
from leveret.protocol.amqp091._generated import methods as m091

# -- method sets --------------------------------------------------------------------------------


def test_0_8_ids_that_differ_from_0_9_1() -> None:
    # connection.close is 10/60 in 0-8 (10/50 in 0-9-1); its close-ok 10/61.
    close = m08.ConnectionClose(reply_code=320, reply_text="bye", class_id=60, method_id=40)
    assert close.encode() == b"\x00\x0a\x00\x3c" + b"\x01\x40" + b"\x03bye" + b"\x00\x3c\x00\x28"
    assert m08.ConnectionCloseOk.INDEX == (10 << 16) | 61
    assert m091.ConnectionClose.INDEX == (10 << 16) | 50
    # basic.recover is 60/100 with only requeue (0-9-1's recover-async has those bytes too).
    assert m08.BasicRecover(requeue=True).encode() == b"\x00\x3c\x00\x64\x01"
    assert m08.BasicRecover.NAME == "basic.recover"
    # channel.alert (20/30): reply-code short, reply-text shortstr, details table.
    alert = m08.ChannelAlert(reply_code=310, reply_text="x", details={"a": "b"})
    table = b"\x00\x00\x00\x08" + b"\x01a" + b"S\x00\x00\x00\x01b"
    assert alert.encode() == b"\x00\x14\x00\x1e" + b"\x01\x36" + b"\x01x" + table
    # access.request (30/10): realm, then five bits in one octet LSB first.
    request = m08.AccessRequest(realm="/data", passive=True, active=True, write=True, read=True)
    assert request.encode() == b"\x00\x1e\x00\x0a" + b"\x05/data" + b"\x1e"
    assert m08.decode_method(b"\x00\x1e\x00\x0b\x00\x05") == m08.AccessRequestOk(ticket=5)
    # The ticket is a named field in 0-8 (0-9-1 calls the same short reserved-1).
    declare = m08.QueueDeclare(ticket=5, queue="q", durable=True)
    assert declare.encode() == b"\x00\x32\x00\x0a\x00\x05\x01q\x02\x00\x00\x00\x00"
    # The Qpid additions of the overlay.
    assert m08.METHODS[(40 << 16) | 22] is m08.ExchangeBound
    assert m08.METHODS[(60 << 16) | 101] is m08.BasicRecoverOk
    assert c08.VERSION == (8, 0, 0)
    assert {c08.FRAME_OOB_METHOD, c08.FRAME_TRACE} == {4, 7}


def test_0_9_classes() -> None:
    assert [m09.ChannelOk.INDEX, m09.ChannelPing.INDEX, m09.ChannelResume.INDEX] == [
        (20 << 16) | 80,
        (20 << 16) | 60,
        (20 << 16) | 50,
    ]
    # channel.open-ok carries a channel-id longstr in 0-9.
    assert m09.ChannelOpenOk(channel_id=b"c1").encode() == b"\x00\x14\x00\x0b\x00\x00\x00\x02c1"
    # message.append: reference longstr, bytes longstr.
    append = m09.MessageAppend(reference=b"r", bytes_=b"xyz")
    assert append.encode() == b"\x00\x78\x00\x50" + b"\x00\x00\x00\x01r" + b"\x00\x00\x00\x03xyz"
    # message.transfer's body: kind octet (1 = reference) + longstr, after 21 other fields.
    transfer = m09.MessageTransfer(body=wiretypes.Content(b"ref", reference=True))
    assert transfer.encode().endswith(b"\x00\x00\x00\x00" + b"\x01\x00\x00\x00\x03ref")
    assert {cls.NAME for cls in m09.METHODS.values()} >= {
        "message.open",
        "message.close",
        "message.checkpoint",
        "message.resume",
        "message.offset",
        "queue.unbind",
        "file.stage",
        "stream.consume",
        "tunnel.request",
        "dtx.start",
        "access.request",
        "exchange.bound",
        "basic.recover-sync",
    }
    assert (c09.VERSION, c09.CLASS_MESSAGE) == ((0, 9, 0), 120)


def test_draft_classes_and_results() -> None:
    names = {cls.NAME.split(".")[0] for cls in md.METHODS.values()}
    assert names == {
        "connection",
        "session",
        "access",
        "exchange",
        "queue",
        "basic",
        "file",
        "stream",
        "tx",
        "dtx-demarcation",
        "dtx-coordination",
        "tunnel",
        "message",
        "binding",
        "execution",
    }
    # execution.result carries a long-struct: long size, short type (class << 8 | type), fields.
    result = md.ExecutionResult(command_id=7, data=md.DtxCoordinationGetTimeoutResult(timeout=30))
    assert result.encode() == (
        b"\x00\x8c\x00\x28" + b"\x00\x00\x00\x07" + b"\x00\x00\x00\x06" + b"\x69\x1f"
        b"\x00\x00\x00\x1e"
    )
    assert md.ExecutionResult(command_id=1).encode().endswith(b"\x00\x00\x00\x00")
    with pytest.raises(SyntaxError_, match="unknown struct type"):
        md.decode_method(b"\x00\x8c\x00\x28\x00\x00\x00\x01\x00\x00\x00\x02\xff\xff")
    # session.ack: a long, then the ranges as a short count of longs and the longs.
    ack = md.SessionAck(cumulative_seen_mark=9, seen_frame_set=((1, 2),))
    assert ack.encode() == b"\x00\x14\x00\x6e" + b"\x00\x00\x00\x09" + b"\x00\x02" + (
        b"\x00\x00\x00\x01\x00\x00\x00\x02"
    )
    assert cd.VERSION == (99, 0, 0)
    assert cd.FIELD_TABLE_TYPES[0x95] == ("string", 0, 2)


# -- value types --------------------------------------------------------------------------------


def test_content_and_long_set_errors() -> None:
    with pytest.raises(ValueError, match="neither inline"):
        wiretypes.decode_content(b"\x02\x00\x00\x00\x00", 0)
    with pytest.raises(IndexError):
        wiretypes.decode_content(b"\x00\x00\x00\x00\x05ab", 0)
    with pytest.raises(ValueError, match="pairs"):
        wiretypes.decode_long_set(b"\x00\x01\x00\x00\x00\x01", 0)
    with pytest.raises(struct.error):
        wiretypes.encode_long_set(((0, 2**32),))
    # message.transfer: 48 octets of empty fields, then a body whose kind octet is 7.
    bad = b"\x00\x78\x00\x0a" + b"\x00" * 48 + b"\x07\x00\x00\x00\x00"
    with pytest.raises(SyntaxError_, match=r"message\.transfer"):
        m09.decode_method(bad)
    assert m09.decode_method(bad[:52] + b"\x01" + bad[53:]) == m09.MessageTransfer(
        body=wiretypes.Content(b"", reference=True)
    )


def test_0_8_field_tables_write_only_0_8_types() -> None:
    when = datetime.datetime(2005, 3, 30, tzinfo=datetime.UTC)
    table: ft08.FieldTable = {
        "s": "x",
        "i": -5,
        "d": decimal.Decimal("1.25"),
        "t": when,
        "f": {"n": 1},
    }
    encoded = ft08.encode_table(table)
    assert encoded == (
        b"\x00\x00\x00\x30"
        + b"\x01sS\x00\x00\x00\x01x"
        + b"\x01iI\xff\xff\xff\xfb"
        + b"\x01dD\x02\x00\x00\x00\x7d"  # 1.25 = 125 with 2 decimals
        + b"\x01tT"
        + (1112140800).to_bytes(8, "big")  # 2005-03-30T00:00:00Z
        + b"\x01fF\x00\x00\x00\x07\x01nI\x00\x00\x00\x01"
    )
    assert ft08.decode_table(encoded, 0) == (table, len(encoded))
    bad_values: list[ft08.FieldValue] = [True, 1.5, b"x", [1], None, 2**31, {"deep": False}]
    for bad in bad_values:
        with pytest.raises(SyntaxError_, match="0-8"):
            ft08.encode_table({"k": bad})
    # Decoding is lenient: a 0-9-1 boolean ('t') from a 0-9-1-minded peer is understood.
    assert ft08.decode_table(b"\x00\x00\x00\x04\x01bt\x01", 0)[0] == {"b": True}


def test_draft_field_table_codes() -> None:
    encoded = ftd.encode_table({"b": True, "n": -2, "s": "é", "x": None})
    assert encoded == (
        b"\x00\x00\x00\x15"
        + b"\x01b\x08\x01"
        + b"\x01n\x21\xff\xff\xff\xfe"
        + b"\x01s\x95\x00\x02\xc3\xa9"
        + b"\x01x\xf0"
    )
    assert ftd.decode_table(encoded, 0)[0] == {"b": True, "n": -2, "s": "é", "x": None}
    # Codes the draft leaves unassigned are skipped by their range's width, as bytes.
    assert ftd.decode_value(b"\x2f\x01\x02\x03\x04", 0) == (b"\x01\x02\x03\x04", 5)
    assert ftd.decode_value(b"\x8f\x02hi", 0) == (b"hi", 4)
    with pytest.raises(SyntaxError_, match="reserved"):
        ftd.decode_value(b"\xb0", 0)
    # unsigned, iso-8859-15, UTF-16, a long decimal, an array of three unsigned shorts.
    assert ftd.decode_value(b"\x12\xff\xff", 0)[0] == 65535
    assert ftd.decode_value(b"\x84\x01\xa4", 0)[0] == "€"
    assert ftd.decode_value(b"\x96\x00\x02\x00A", 0)[0] == "A"
    assert ftd.decode_value(b"\xd8\x02" + (12345).to_bytes(8, "big"), 0)[0] == decimal.Decimal(
        "123.45"
    )
    array = b"\xaa\x00\x00\x00\x0b\x12\x00\x00\x00\x03\x00\x01\x00\x02\x00\x03"
    assert ftd.decode_value(array, 0) == ([1, 2, 3], len(array))
    with pytest.raises(SyntaxError_):
        ftd.decode_value(b"\xaa\x00\x00\x00\x05\x12\xff\xff\xff\xff", 0)
    assert ftd.decode_array(ftd.encode_array([b"a", b"bc"]), 0)[0] == [b"a", b"bc"]
    assert ftd.decode_array(ftd.encode_array([1, 2**40]), 0)[0] == [1, 2**40]
    assert ftd.decode_array(ftd.encode_array([]), 0)[0] == []
    with pytest.raises(SyntaxError_, match="types"):
        ftd.encode_array([1, "x"])
    with pytest.raises(SyntaxError_):
        ftd.encode_table({"k": object()})  # type: ignore[dict-item]  # refused at run time


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=48))
def test_draft_field_table_random_bytes_only_raise_syntax_errors(data: bytes) -> None:
    for decode in (ftd.decode_table, ftd.decode_value, ftd.decode_array):
        try:
            decode(data, 0)
        except SyntaxError_:
            pass


# -- frames -------------------------------------------------------------------------------------


def _frame(ftype: int, payload: bytes = b"x") -> bytes:
    return bytes([ftype]) + b"\x00\x01" + len(payload).to_bytes(4, "big") + payload + b"\xce"


@pytest.mark.parametrize("ftype", [4, 5, 6, 7])
def test_out_of_band_and_trace_frames(ftype: int) -> None:
    for decoder in (framing08.frame_decoder(), framing09.frame_decoder()):
        (frame,) = decoder.feed(_frame(ftype))
        assert (frame[0], frame[1], bytes(frame[2])) == (ftype, 1, b"x")
    with pytest.raises(FrameError, match="unknown frame type"):
        framing091.FrameDecoder().feed(_frame(ftype))
    draft = framing09.draft_frame_decoder()
    if ftype == 7:
        assert draft.feed(_frame(ftype))[0][0] == 7
    else:
        with pytest.raises(FrameError):
            draft.feed(_frame(ftype))


def test_protocol_headers() -> None:
    assert framing08.PROTOCOL_HEADER == b"AMQP\x01\x01\x08\x00"
    assert b"AMQP\x01\x01\x09\x01" in framing08.PROTOCOL_HEADERS
    assert framing09.PROTOCOL_HEADER == b"AMQP\x01\x01\x00\x09"
    assert framing09.DRAFT_PROTOCOL_HEADER[6:] == bytes([99, 0])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8]), min_size=1, max_size=6), st.data())
def test_legacy_frames_split_at_every_byte(types: list[int], data: st.DataObject) -> None:
    wire = b"".join(_frame(t, bytes([t]) * t) for t in types)
    cut = data.draw(st.integers(0, len(wire)))
    decoder = framing08.frame_decoder()
    frames = decoder.feed(wire[:cut]) + decoder.feed(wire[cut:])
    assert [(f[0], bytes(f[2])) for f in frames] == [(t, bytes([t]) * t) for t in types]
    one = framing09.frame_decoder()
    singly = [f for i in range(len(wire)) for f in one.feed(wire[i : i + 1])]
    assert [f[0] for f in singly] == types


def test_codec_errors_are_amqp_errors() -> None:
    with pytest.raises(AMQPError):
        m08.decode_method(b"\x00\x0a\x00\x32")  # 0-9-1's connection.close id is not 0-8's
