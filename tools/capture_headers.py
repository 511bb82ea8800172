"""Record what a RabbitMQ node answers to old AMQP protocol headers (tests/data/rabbitmq-headers).

``python -m tools.capture_headers [--host H] [--port P] [--out DIR]`` opens raw sockets to the
broker, sends each header of :data:`HEADERS`, and records the exact bytes that come back: the
``connection.start`` (or the broker's own header, if it refuses), then, after a PLAIN login as
guest/guest, the answer to each probe of :data:`PROBES` on a fresh connection (which method
set the broker speaks after that header). Writes ``captures.json``; the README next to it says
how to read it. Needs a running broker; not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests/data/rabbitmq-headers"

HEADERS = {
    "AMQP 1 1 0 9": b"AMQP\x01\x01\x00\x09",
    "AMQP 1 1 8 0": b"AMQP\x01\x01\x08\x00",
    "AMQP 1 1 9 1": b"AMQP\x01\x01\x09\x01",
    "AMQP 0 0 9 1": b"AMQP\x00\x00\x09\x01",
}


def _method(class_id: int, method_id: int, args: bytes = b"") -> bytes:
    return struct.pack(">HH", class_id, method_id) + args


def _shortstr(text: str) -> bytes:
    data = text.encode()
    return bytes((len(data),)) + data


def _longstr(data: bytes) -> bytes:
    return struct.pack(">L", len(data)) + data


# Probes: (channel, method payload) frames sent once the connection and channel 1 are open.
# The payloads are written out by hand so the same octets go to the broker whatever version the
# header named; each comment says what the frame is in 0-8 / 0-9-1.
PROBES: dict[str, list[bytes]] = {
    # access.request (30/10) realm "/data", active+write+read: 0-8 only (0-9-1 dropped it).
    "access.request": [_method(30, 10, _shortstr("/data") + b"\x1c")],
    # 60/100 requeue=1 is 0-8's basic.recover (no reply in 0-8) and 0-9-1's recover-async;
    # basic.qos (60/10) after it shows whether the channel is still open.
    "basic.recover 60/100": [
        _method(60, 100, b"\x01"),
        _method(60, 10, struct.pack(">LHB", 0, 10, 0)),
    ],
    # 60/110 requeue=1 is 0-9-1's basic.recover (answered by recover-ok 60/111); 0-8 has none.
    "basic.recover 60/110": [_method(60, 110, b"\x01")],
    # queue.unbind (50/50) of nothing: 0-9 and 0-9-1 have it, 0-8 does not.
    "queue.unbind 50/50": [
        _method(50, 50, b"\x00\x00" + _shortstr("nq") + _shortstr("amq.direct") + b"\x00" * 5)
    ],
    # connection.close is 10/60 in 0-8 and 10/50 in 0-9-1 (10/60 is connection.blocked there).
    "connection.close 10/60": [_method(10, 60, b"\x00\xc8" + _shortstr("bye") + b"\x00" * 4)],
    "connection.close 10/50": [_method(10, 50, b"\x00\xc8" + _shortstr("bye") + b"\x00" * 4)],
}


def _frame(ftype: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHL", ftype, channel, len(payload)) + payload + b"\xce"


class _Peer:
    """A blocking socket that keeps every octet received."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.received = bytearray()
        self.closed = False
        self._pos = 0  # how much of ``received`` read_frame has consumed

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_for(self, seconds: float) -> bytes:
        """Read until ``seconds`` pass with nothing new, or the broker closes."""
        start = len(self.received)
        self.sock.settimeout(seconds)
        while not self.closed:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                self.closed = True
                break
            if not chunk:
                self.closed = True
                break
            self.received += chunk
        return bytes(self.received[start:])

    def read_frame(self) -> tuple[int, int, bytes]:
        """Read exactly one frame (the handshake needs each reply before the next step)."""
        self.sock.settimeout(5)
        while True:
            buf = self.received[self._pos :]
            if len(buf) >= 7:
                ftype, channel, size = struct.unpack_from(">BHL", buf)
                if len(buf) >= 8 + size:
                    self._pos += 8 + size
                    return ftype, channel, bytes(buf[7 : 7 + size])
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            self.received += chunk

    def close(self) -> None:
        self.sock.close()


def _frames(data: bytes) -> list[dict[str, Any]]:
    """Summaries of the complete frames in ``data`` (type, channel, class/method ids, close)."""
    out: list[dict[str, Any]] = []
    off = 0
    while len(data) - off >= 8:
        ftype, channel, size = struct.unpack_from(">BHL", data, off)
        if len(data) < off + 8 + size:
            break
        payload = data[off + 7 : off + 7 + size]
        entry: dict[str, Any] = {"type": ftype, "channel": channel}
        if ftype == 1 and size >= 4:
            class_id, method_id = struct.unpack_from(">HH", payload)
            entry["method"] = [class_id, method_id]
            if (class_id, method_id) in ((10, 50), (10, 60), (20, 40)) and size >= 7:
                code, n = struct.unpack_from(">HB", payload, 4)
                entry["reply_code"] = code
                entry["reply_text"] = payload[7 : 7 + n].decode(errors="replace")
        out.append(entry)
        off += 8 + size
    return out


def _open(host: str, port: int, header: bytes) -> _Peer:
    peer = _Peer(host, port)
    peer.send(header)
    _ftype, _ch, start = peer.read_frame()
    if start[:4] != b"\x00\x0a\x00\x0a":
        raise ConnectionError(f"expected connection.start, got {start[:4].hex()}")
    peer.send(
        _frame(
            1,
            0,
            _method(
                10,
                11,
                b"\x00\x00\x00\x00"  # client-properties: an empty table
                + _shortstr("PLAIN")
                + _longstr(b"\x00guest\x00guest")
                + _shortstr("en_US"),
            ),
        )
    )
    _ftype, _ch, tune = peer.read_frame()
    channel_max, frame_max, _heartbeat = struct.unpack_from(">HLH", tune, 4)
    peer.send(_frame(1, 0, _method(10, 31, struct.pack(">HLH", channel_max, frame_max, 0))))
    peer.send(_frame(1, 0, _method(10, 40, _shortstr("/") + _shortstr("") + b"\x00")))
    peer.read_frame()  # connection.open-ok
    peer.send(_frame(1, 1, _method(20, 10, _shortstr(""))))
    peer.read_frame()  # channel.open-ok
    return peer


def capture(host: str, port: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "broker": f"{host}:{port}",
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "headers": {},
    }
    for name, header in HEADERS.items():
        peer = _Peer(host, port)
        peer.send(header)
        reply = peer.read_for(1.0)
        peer.close()
        entry: dict[str, Any] = {"sent": header.hex(), "reply": reply.hex()}
        entry["reply_frames"] = _frames(reply)
        if reply.startswith(b"AMQP"):
            entry["refused_with_header"] = reply[:8].hex()
            result["headers"][name] = entry
            continue
        handshake = _open(host, port, header)
        entry["handshake_received"] = bytes(handshake.received).hex()
        entry["handshake_frames"] = _frames(bytes(handshake.received))
        handshake.close()
        probes: dict[str, Any] = {}
        for probe, payloads in PROBES.items():
            peer = _open(host, port, header)
            already = len(peer.received)
            sent = [_frame(1, 0 if p.startswith(b"\x00\x0a") else 1, p) for p in payloads]
            for frame in sent:
                peer.send(frame)
            peer.read_for(1.0)
            answer = bytes(peer.received[already:])
            probes[probe] = {
                "sent": [f.hex() for f in sent],
                "received": answer.hex(),
                "frames": _frames(answer),
                "broker_closed_socket": peer.closed,
            }
            peer.close()
        entry["probes"] = probes
        result["headers"][name] = entry
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.capture_headers", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5672)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    data = capture(args.host, args.port)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "captures.json"
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
