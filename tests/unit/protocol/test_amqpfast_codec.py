"""The AMQP/Fast 0.8a2 codec against test vectors worked out by hand from AMQ RFC 006.

Each vector is written octet by octet from the RFC's tables (section numbers in the
comments), not produced by the code under test, so a misreading in the codec shows up as a
mismatch here. ``size`` is the command-size: the payload (type octet + fields) plus the
command-end octet 0xCE (3.1.1: "The command-end byte is included in the command-size").
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.errors import AMQPError, CommandInvalid, FrameError, SyntaxError_
from leveret.protocol.amqpfast import commands as c
from leveret.protocol.amqpfast import fieldtable
from leveret.protocol.amqpfast.framing import (
    INITIATION,
    CommandDecoder,
    Fragment,
    encode_command,
    split_message,
)

# Left out of the compiled pass (scripts/test): the AMQP/Fast codec is not compiled.
pytestmark = pytest.mark.pure_only


def _decode_all(wire: bytes, frame_max: int = 1 << 20) -> list[c.Command | Fragment]:
    decoder = CommandDecoder(frame_max)
    decoder.receive(wire)
    items = []
    while (item := decoder.next()) is not None:
        items.append(item)
    assert decoder.buffered == 0
    return items


# -- vectors ------------------------------------------------------------------------------------


def test_initiation() -> None:
    # 3.2.2: protocol-id 128, protocol-version 1.
    assert INITIATION == b"\x80\x01"


def test_connection_challenge() -> None:
    wire = (
        b"\x00\x10"  # size: 1 type + 1 version + 11 mechanisms + 2 table + 1 end = 16
        b"\x0a"  # connection-challenge = %d10
        b"\x01"  # version octet
        b"\x0aPLAIN NONE"  # mechanisms short string: length 10
        b"\x00\x00"  # challenges: an empty field table (2-octet length 0)
        b"\xce"  # command-end
    )
    command = c.ConnectionChallenge(1, "PLAIN NONE", {})
    assert encode_command(command) == wire
    assert _decode_all(wire) == [command]


def test_connection_response_with_the_rfc_plain_example() -> None:
    # 3.2.4.2 gives the table for login "Johan" and password "Ok" as the octets below; its
    # octets spell OK, so "OK" is the password here.
    table = (
        b"\x00\x1c"  # %0d %28d: the table's 28 octets
        b"\x05LOGINS\x00\x05JOHAN"  # %5d 'LOGIN' 'S' %0d %5d 'JOHAN'
        b"\x08PASSWORDS\x00\x02OK"  # %8d 'PASSWORD' 'S' %0d %2d 'OK'
    )
    assert fieldtable.encode_table({"LOGIN": "JOHAN", "PASSWORD": "OK"}) == table
    wire = (
        b"\x00\x26"  # size: 1 type + 6 mechanism + 30 table + 1 end = 38
        b"\x0b"  # connection-response = %d11
        b"\x05PLAIN" + table + b"\xce"
    )
    command = c.ConnectionResponse("PLAIN", {"LOGIN": "JOHAN", "PASSWORD": "OK"})
    assert encode_command(command) == wire
    assert _decode_all(wire) == [command]


def test_connection_tune() -> None:
    wire = (
        b"\x00\x15"  # size: 1 + 17 options + 2 dictionary + 1 = 21
        b"\x0c"  # connection-tune = %d12
        b"\x00\x0f"  # options: 15 octets
        b"\x09FRAME_MAX"  # field name
        b"I\x00\x00\x10\x00"  # 'I' long-integer 4096
        b"\x00\x00"  # dictionary: empty
        b"\xce"
    )
    command = c.ConnectionTune({"FRAME_MAX": 4096}, {})
    assert encode_command(command) == wire
    assert _decode_all(wire) == [command]


def test_channel_open() -> None:
    wire = (
        b"\x00\x0a"  # size: 1 + 2 + 2 + 1 + 2 + 1 + 1 = 10
        b"\x14"  # channel-open = %d20
        b"\x00\x01"  # channel-id 1
        b"\x00\x07"  # confirm-tag 7
        b"\x01"  # transacted (first bit: least significant), restartable 0
        b"\x00\x00"  # options: empty table
        b"\x00"  # out-of-band: empty short string
        b"\xce"
    )
    command = c.ChannelOpen(1, 7, transacted=True)
    assert encode_command(command) == wire
    assert _decode_all(wire) == [command]
    restartable = encode_command(c.ChannelOpen(1, 7, restartable=True))
    assert restartable[7] == 0x02  # the second bit


def test_handle_open() -> None:
    wire = (
        b"\x00\x11"  # size: 1 + 2+2+2+2 + 1 + 2 + 1 + 1 + 2 + 1 = 17
        b"\x1e"  # handle-open = %d30
        b"\x00\x01"  # channel-id 1
        b"\x00\x02"  # handle-id 2
        b"\x00\x01"  # service-type 1: queue
        b"\x00\x00"  # confirm-tag 0
        b"\x0b"  # producer (bit 0), consumer (bit 1), browser 0 (bit 2), temporary (bit 3)
        b"\x01q"  # dest-name "q"
        b"\x00"  # mime-type ""
        b"\x00"  # encoding ""
        b"\x00\x00"  # options: empty table
        b"\xce"
    )
    command = c.HandleOpen(1, 2, 1, 0, True, True, False, True, "q")
    assert encode_command(command) == wire
    assert _decode_all(wire) == [command]


def test_message_header_block() -> None:
    # 3.4.4: body-size long, persistent bit, priority octet, expiration long, mime type,
    # encoding, identifier (short strings), headers (field table).
    block = (
        b"\x00\x00\x00\x03"  # body-size 3
        b"\x01"  # persistent: a bit, alone in its octet (the next field is an octet)
        b"\x09"  # priority 9
        b"\x00\x00\x00\x00"  # expiration: none
        b"\x0atext/plain"
        b"\x00"  # encoding ""
        b"\x02m1"  # identifier
        b"\x00\x07\x01XI\x00\x00\x00\x01"  # headers: X=(Integer)1, 7 octets
    )
    header = c.MessageHeader(3, True, 9, 0, "text/plain", "", "m1", {"X": 1})
    assert header.encode() == block
    assert c.MessageHeader.decode(block + b"abc") == (header, len(block))


def test_handle_send_then_its_fragment() -> None:
    header = c.MessageHeader(body_size=3)
    block = header.encode()
    assert block == b"\x00\x00\x00\x03" + b"\x00\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00" + (
        b"\x00\x00"
    )
    fragment = block + b"abc"  # 18 octets
    wire = (
        b"\x00\x0c"  # size: 1 + 2 + 2 + 4 + 1 + 1 + 1 = 12
        b"\x1f"  # handle-send = %d31
        b"\x00\x02"  # handle-id 2
        b"\x00\x00"  # confirm-tag 0
        b"\x00\x00\x00\x12"  # fragment-size 18
        b"\x00"  # partial, out-of-band, recovery, streaming: all 0
        b"\x00"  # dest-name ""
        b"\xce"
    ) + fragment  # 3.4.3: the message follows the command, outside it
    send = c.HandleSend(2, 0, 18)
    assert encode_command(send) + fragment == wire
    assert _decode_all(wire) == [send, Fragment(fragment)]


def test_handle_notify() -> None:
    wire = (
        b"\x00\x0f"  # size: 1 + 2 + 4 + 4 + 1 + 2 + 1 = 15
        b"\x29"  # handle-notify = %d41
        b"\x00\x02"  # handle-id
        b"\x00\x00\x00\x05"  # message-nbr 5
        b"\x00\x00\x00\x00"  # fragment-size 0: nothing follows
        b"\x18"  # partial 0, out-of-band 0, recovery 0, delivered (bit 3), redelivered (bit 4)
        b"\x01q"  # dest-name
        b"\xce"
    )
    command = c.HandleNotify(2, 5, 0, delivered=True, redelivered=True, dest_name="q")
    assert encode_command(command) == wire
    assert _decode_all(wire) == [command]


def test_long_size_form() -> None:
    # 3.1.1: short-size is 0x0000..0xFFFE; 0xFFFF escapes to a four-octet size.
    at_limit = c.HandleIndex(1, 0, b"x" * 65524)  # 1 + 2 + 4 + 2 + 65524 + 1 = 0xFFFE
    wire = encode_command(at_limit)
    assert wire[:2] == b"\xff\xfe"
    assert len(wire) == 2 + 0xFFFE
    over = c.HandleIndex(1, 0, b"x" * 65525)  # size 0xFFFF: the long form
    wire = encode_command(over)
    assert wire[:6] == b"\xff\xff\x00\x00\xff\xff"
    assert _decode_all(wire) == [over]
    # The long form with a small size is read as well.
    assert _decode_all(b"\xff\xff\x00\x00\x00\x03\x0e\x00\xce") == [c.ConnectionPing(False)]


def test_field_table_value_types() -> None:
    when = datetime.datetime(2005, 3, 30, tzinfo=datetime.UTC)
    table: fieldtable.FastTable = {
        "S": "é",
        "I": -2,
        "D": decimal.Decimal("1.5"),
        "T": when,
        "B": b"\xff",
    }
    encoded = fieldtable.encode_table(table)
    assert encoded == (
        b"\x00\x23"  # 35 octets
        b"\x01SS\x00\x02\xc3\xa9"  # 'S': 2-octet length, UTF-8
        b"\x01II\xff\xff\xff\xfe"  # 'I': signed 32-bit
        b"\x01DD\x01\x00\x00\x00\x0f"  # 'D': 1 decimal, 15
        b"\x01TT\x42\x49\xec\x00"  # 'T': time_t in 4 octets, 1112140800
        b"\x01BS\x00\x01\xff"  # bytes travel as 'S'
    )
    assert fieldtable.decode_table(encoded, 0) == (table, len(encoded))
    # 0.8a2: "If a field occurs more than once ... only the first instance should be used."
    twice = b"\x00\x0e" + b"\x01aI\x00\x00\x00\x01" + b"\x01aI\x00\x00\x00\x02"
    assert fieldtable.decode_table(twice, 0)[0] == {"a": 1}


@pytest.mark.parametrize(
    "table",
    [
        {"1x": "digit first"},
        {"a b": "space"},
        {"x" * 129: "long"},
        {"k": True},
        {"k": 2**31},
        {"k": 1.5},
        {"k": [1]},
    ],
)
def test_field_table_refuses_what_the_rfc_cannot_carry(table: dict[str, Any]) -> None:
    with pytest.raises(SyntaxError_):
        fieldtable.encode_table(table)


# -- framing errors -----------------------------------------------------------------------------


def test_framing_errors() -> None:
    decoder = CommandDecoder(4096)
    decoder.receive(b"\x00\x03\x0e\x00\x00")  # command-end is not 0xCE
    with pytest.raises(FrameError, match="command-end"):
        decoder.next()
    with pytest.raises(FrameError):  # poisoned
        decoder.next()
    too_big = CommandDecoder(4096)
    too_big.receive(b"\x10\x01")  # 4097: refused from the size alone
    with pytest.raises(FrameError, match="exceeds"):
        too_big.next()
    tiny = CommandDecoder(4096)
    tiny.receive(b"\x00\x01\xce")
    with pytest.raises(FrameError, match="too small"):
        tiny.next()
    unknown = CommandDecoder(4096)
    unknown.receive(b"\x00\x02\x63\xce")
    with pytest.raises(CommandInvalid, match="99"):
        unknown.next()
    fragment = CommandDecoder(4096)
    fragment.receive(encode_command(c.HandleSend(1, 0, 5000)))
    with pytest.raises(FrameError, match="fragment"):
        fragment.next()
    trailing = CommandDecoder(4096)
    trailing.receive(b"\x00\x04\x0e\x00\x00\xce")  # PING with an extra octet
    with pytest.raises(SyntaxError_, match="after the fields"):
        trailing.next()
    nul = CommandDecoder(4096)
    nul.receive(encode_command(c.ConnectionClose(200, "ok"))[:-3] + b"\x00k\xce")
    with pytest.raises(SyntaxError_, match="zero octet"):
        nul.next()
    with pytest.raises(SyntaxError_, match="zero octet"):
        c.ConnectionClose(200, "a\x00b").encode()


def test_out_of_band_send_has_no_fragment() -> None:
    wire = encode_command(c.HandleSend(1, 0, 100, out_of_band=True)) + encode_command(
        c.ConnectionPing(True)
    )
    assert _decode_all(wire) == [c.HandleSend(1, 0, 100, out_of_band=True), c.ConnectionPing(True)]


def test_split_message() -> None:
    header = c.MessageHeader(body_size=10)
    pieces = split_message(header, b"0123456789", 8)
    assert b"".join(pieces) == header.encode() + b"0123456789"
    assert [len(p) for p in pieces] == [8, 8, 8, 1]
    with pytest.raises(ValueError, match="no room"):
        split_message(header, b"", 0)


# -- properties ---------------------------------------------------------------------------------

_KINDS: dict[str, st.SearchStrategy[Any]] = {
    "octet": st.integers(0, 255),
    "short": st.integers(0, 0xFFFF),
    "long": st.integers(0, 0xFFFFFFFF),
    "bit": st.booleans(),
    "shortstr": st.text(
        st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30
    ).filter(lambda s: len(s.encode()) <= 255),
    "longstr": st.binary(max_size=200),
    "table": st.dictionaries(
        st.from_regex(r"[A-Za-z$#][A-Za-z0-9$#_]{0,20}", fullmatch=True),
        st.text(max_size=20)
        | st.integers(-(2**31), 2**31 - 1)
        | st.builds(
            lambda m, s: decimal.Decimal(m).scaleb(-s),
            st.integers(-(2**31), 2**31 - 1),
            st.integers(0, 9),
        ),
        max_size=3,
    ),
}


def _command(cls: type[c.Command]) -> st.SearchStrategy[c.Command]:
    return st.builds(cls, **{name: _KINDS[kind] for name, kind in cls.FIELDS})


@pytest.mark.parametrize("cls", list(c.COMMANDS.values()), ids=lambda cls: cls.NAME)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_command_round_trips(cls: type[c.Command], data: st.DataObject) -> None:
    assert [f.name for f in dataclasses.fields(cls)] == [name for name, _ in cls.FIELDS]
    command = data.draw(_command(cls))
    payload = command.encode()
    assert payload[0] == cls.TYPE
    assert c.decode_command(payload) == command
    for cut in range(1, len(payload)):
        with pytest.raises(SyntaxError_):
            c.decode_command(payload[:cut])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(list(c.COMMANDS.values())).flatmap(_command), max_size=6), st.data()
)
def test_streams_split_at_every_byte(commands: list[c.Command], data: st.DataObject) -> None:
    wire = b""
    expected: list[c.Command | Fragment] = []
    for drawn in commands:
        command = drawn
        if isinstance(command, c.HandleSend | c.HandleNotify | c.HandlePrepare):
            command = dataclasses.replace(command, fragment_size=command.fragment_size % 100)
        wire += encode_command(command)
        expected.append(command)
        owed = getattr(command, "fragment_size", 0)
        if owed and not getattr(command, "out_of_band", False):
            fragment = bytes(
                data.draw(st.binary(min_size=owed, max_size=owed)) if owed < 64 else b"\x01" * owed
            )
            wire += fragment
            expected.append(Fragment(fragment))
    assert _decode_all(wire) == expected
    one = CommandDecoder(1 << 20)
    got: list[c.Command | Fragment] = []
    for i in range(len(wire)):
        one.receive(wire[i : i + 1])
        while (item := one.next()) is not None:
            got.append(item)
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_random_bytes_only_raise_amqp_errors(wire: bytes) -> None:
    decoder = CommandDecoder(4096)
    decoder.receive(wire)
    try:
        while decoder.next() is not None:
            pass
    except AMQPError:
        pass
    try:
        c.MessageHeader.decode(wire)
    except AMQPError:
        pass
