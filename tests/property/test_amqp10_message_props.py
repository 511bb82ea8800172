"""Property tests of the AMQP 1.0 message format: any message built from sections parses
back to the same sections, and re-annotating it keeps the bare message byte-identical."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.amqp10 import AmqpSequence, AmqpValue, Data, Header, Properties
from leveret.protocol.amqp10.message import Body, encode_message, parse_message
from leveret.protocol.amqp10.types import Symbol, Value
from tests.unit.protocol.amqp10.values import SCALARS, VALUES

SYMBOLS = st.text(string.ascii_lowercase + "-", min_size=1, max_size=8).map(
    lambda s: Symbol("x-" + s)
)
ANNOTATIONS = st.none() | st.dictionaries(SYMBOLS, SCALARS, max_size=3)
BODIES: st.SearchStrategy[Body | None] = st.one_of(
    st.none(),
    st.lists(st.binary(max_size=300).map(Data), min_size=1, max_size=3),
    VALUES.map(AmqpValue),
    st.lists(st.lists(VALUES, max_size=3).map(AmqpSequence), min_size=1, max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    BODIES,
    st.none() | st.builds(Header, durable=st.booleans(), priority=st.none() | st.integers(0, 9)),
    ANNOTATIONS,
    ANNOTATIONS,
    st.none() | st.builds(Properties, message_id=st.none() | st.text(max_size=8)),
    st.none() | st.dictionaries(st.text(max_size=5), SCALARS, max_size=3),
    ANNOTATIONS,
)
def test_sections_round_trip(
    body: Body | None,
    header: Header | None,
    delivery_annotations: dict[Value, Value] | None,
    message_annotations: dict[Value, Value] | None,
    properties: Properties | None,
    application_properties: dict[Value, Value] | None,
    footer: dict[Value, Value] | None,
) -> None:
    payload = encode_message(
        body,
        header=header,
        delivery_annotations=delivery_annotations,
        message_annotations=message_annotations,
        properties=properties,
        application_properties=application_properties,
        footer=footer,
    )
    msg = parse_message(payload)
    assert msg.header() == header
    assert msg.delivery_annotations() == (delivery_annotations or {})
    assert msg.message_annotations() == (message_annotations or {})
    assert msg.properties() == properties
    assert msg.application_properties() == (application_properties or {})
    assert msg.footer() == (footer or {})
    assert msg.body() == (body if not isinstance(body, Data | AmqpSequence) else [body])
    # The bare message alone is what a message without annotations or footer encodes to.
    bare = encode_message(
        body, properties=properties, application_properties=application_properties
    )
    assert msg.bare == bare
    again = parse_message(b"".join(msg.reannotated(header=Header(delivery_count=1))))
    assert again.bare == msg.bare
    assert again.footer() == (footer or {})
