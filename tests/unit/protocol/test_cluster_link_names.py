"""The link's reader keeps a Publish's names as text by their bytes
(``protocol/cluster/codec.py``, ``Reader._publish``): a link's publishes to one queue are
decoded once, whatever else comes between, and the kept names never change what is read
(more distinct names than it keeps, names too long to keep, a frame cut in its names)."""

from __future__ import annotations

import pytest

from leveret.protocol.cluster import codec as c

QUEUE = "orders.eu-west"
KEY = "orders.eu-west.created"


def _publish(queue: str, routing_key: str, seq: int = 0) -> bytes:
    return c.publish_frame(seq, "/", queue, "amq.topic", routing_key, 0, b"\x00\x00", b"body")


def _one(reader: c.Reader, frame: bytes) -> c.Publish:
    (op,) = reader.feed(frame)
    assert isinstance(op, c.Publish)
    return op


def test_a_queues_names_are_decoded_once_a_link() -> None:
    reader = c.Reader()
    first = _one(reader, _publish(QUEUE, KEY, seq=1))
    _one(reader, _publish("other", "other.key"))
    again = _one(reader, _publish(QUEUE, KEY, seq=2))
    assert (again.seq, again.vhost, again.queue, again.exchange, again.routing_key) == (
        2,
        "/",
        QUEUE,
        "amq.topic",
        KEY,
    )
    # The same text, not decoded again: the queue's name comes with its hash computed.
    assert again.queue is first.queue
    assert again.routing_key is first.routing_key


def test_more_names_than_it_keeps_are_all_read() -> None:
    reader = c.Reader()
    names = [f"q{i}" for i in range(c.NAMES_KEPT * 2 + 3)]
    for name in [*names, *reversed(names)]:
        op = _one(reader, _publish(name, f"key.{name}"))
        assert (op.queue, op.routing_key) == (name, f"key.{name}")


def test_names_too_long_to_keep_are_read_each_time() -> None:
    reader = c.Reader()
    long_key = "k" * 2000
    first = _one(reader, _publish(QUEUE, long_key))
    again = _one(reader, _publish(QUEUE, long_key))
    assert first.routing_key == again.routing_key == long_key
    assert again.routing_key is not first.routing_key


def test_a_frame_cut_in_its_names_is_refused_after_its_names_were_kept() -> None:
    reader = c.Reader()
    frame = _publish(QUEUE, KEY)
    _one(reader, frame)
    # The same frame with its routing key's length one more than the frame holds.
    at = frame.index(KEY.encode()) - 2
    bad = bytearray(frame)
    bad[at + 1] += 64
    with pytest.raises(c.LinkError):
        c.Reader().feed(bytes(bad))
    with pytest.raises(c.LinkError):
        reader.feed(bytes(bad))


def test_names_that_are_not_utf8_are_refused() -> None:
    frame = bytearray(_publish(QUEUE, KEY))
    frame[frame.index(QUEUE.encode())] = 0xFF
    with pytest.raises(c.LinkError):
        c.Reader().feed(bytes(frame))


def _also(queue: str, seq: int = 0) -> c.Also:
    (op,) = c.Reader().feed(c.also_frame(seq, c.publish_names("/", queue)))
    assert isinstance(op, c.Also)
    return op


def test_an_alsos_names_are_decoded_once_a_link() -> None:
    reader = c.Reader()
    frames = [c.also_frame(seq, c.publish_names("/", QUEUE)) for seq in (1, 2)]
    (first,) = reader.feed(frames[0])
    reader.feed(c.also_frame(0, c.publish_names("/", "other")))
    (again,) = reader.feed(frames[1])
    assert again == c.Also(2, "/", QUEUE)
    assert isinstance(first, c.Also)
    assert isinstance(again, c.Also)
    assert again.queue is first.queue  # kept, with its hash
    assert _also(QUEUE).queue is not first.queue  # each link's reader its own


def test_more_also_names_than_it_keeps_and_long_ones_are_all_read() -> None:
    reader = c.Reader()
    names = [f"q{i}" for i in range(c.NAMES_KEPT * 2 + 3)] + ["q" * 2000]
    for seq, name in enumerate([*names, *reversed(names)]):
        assert reader.feed(c.also_frame(seq, c.publish_names("/", name))) == [
            c.Also(seq, "/", name)
        ]


def test_an_also_cut_in_its_names_or_not_utf8_is_refused_after_its_names_were_kept() -> None:
    reader = c.Reader()
    frame = c.also_frame(1, c.publish_names("/", QUEUE))
    reader.feed(frame)
    longer = bytearray(frame)
    longer[frame.index(QUEUE.encode()) - 1] += 1  # the queue's length past the frame
    not_utf8 = bytearray(frame)
    not_utf8[frame.index(QUEUE.encode())] = 0xFF
    for bad in (longer, not_utf8):
        with pytest.raises(c.LinkError):
            reader.feed(bytes(bad))
